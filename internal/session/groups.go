package session

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/hdet-dev/hdet/internal/engine"
)

// layout checks train.replica_size against the world (W must be a multiple
// of G: a usage error naming both) and keeps the layout.
func (s *session) layout() error {
	lay, err := engine.NewLayout(s.o.World.Size(), s.cfg.Train.ReplicaSize)
	if err != nil {
		return &UsageError{Err: err}
	}
	s.lay = lay
	return nil
}

// makeGroups splits the world into the replica groups' communicators when
// G > 1 (SplitGroups; every rank calls it). The communicators live until
// MPI_Finalize.
func (s *session) makeGroups(context.Context) error {
	if s.lay.Size <= 1 {
		return nil
	}
	if s.o.Split == nil {
		return fmt.Errorf("train.replica_size %d: this communicator cannot be split into replica groups", s.lay.Size)
	}
	inside, cross, err := SplitGroups(s.lay, s.o.World.Rank(), s.o.Split)
	if err != nil {
		return err
	}
	s.inside, s.cross = inside, cross
	if err := s.checkPlacement(); err != nil {
		return err
	}
	if s.o.World.Rank() == 0 {
		s.o.Log.Info().Int("replicas", s.lay.Replicas()).Int("replica_size", s.lay.Size).Int("ranks", s.lay.World).
			Msg("replica groups: consecutive ranks form a replica; the converge runs across replicas")
	}
	return nil
}

// Sized is what SplitGroups checks of the communicators a split made.
type Sized interface {
	Rank() int
	Size() int
}

// SplitGroups makes world rank rank's communicators under the replica
// groups of lay (G > 1) with split, MPI_Comm_split on the world; every rank
// calls it, since the split is collective. inside is the rank's replica, its
// G consecutive world ranks ordered by position; cross holds the ranks at
// its position in every replica, ordered by Layout.CrossKey. A split that
// does not come out as lay says is an error. `hdet run` and `hdet bench
// allreduce --replica-size` both split through it, so the benchmark times
// the communicators a run converges on.
func SplitGroups[C Sized](lay engine.Layout, rank int, split func(color, key int) (C, error)) (inside, cross C, err error) {
	var none C
	rep, pos := lay.Replica(rank), lay.Position(rank)
	if inside, err = split(rep, pos); err != nil {
		return none, none, fmt.Errorf("replica groups: the communicator of replica %d: %w", rep, err)
	}
	if cross, err = split(pos, lay.CrossKey(rank)); err != nil {
		return none, none, fmt.Errorf("replica groups: the cross-replica communicator of position %d: %w", pos, err)
	}
	if inside.Size() != lay.Size || cross.Size() != lay.Replicas() || inside.Rank() != pos || cross.Rank() != lay.CrossKey(rank) {
		return none, none, fmt.Errorf("replica groups: rank %d got replica rank %d of %d and cross rank %d of %d, want %d of %d and %d of %d",
			rank, inside.Rank(), inside.Size(), cross.Rank(), cross.Size(), pos, lay.Size, lay.CrossKey(rank), lay.Replicas())
	}
	return inside, cross, nil
}

// replicas is N, the number of replicas the controller sees.
func (s *session) replicas() int { return s.lay.Replicas() }

// groups are the engine's replica groups (nil when G = 1), their
// collectives watched like the world's.
func (s *session) groups() *engine.Groups {
	if s.lay.Size <= 1 {
		return nil
	}
	return &engine.Groups{Layout: s.lay, Replica: s.wd.Comm(s.inside), Cross: s.wd.Comm(s.cross), Sharded: s.sharded()}
}

// convergeComm is the communicator the converge reduces over: the world, or
// the cross-replica one under replica groups.
func (s *session) convergeComm() World {
	if s.cross != nil {
		return s.cross
	}
	return s.o.World
}

// checkPlacement logs every rank's host, replica and position (debug),
// keeps which ranks of this rank's replica share its host (a script's
// LOCAL_RANK and its GPUs), and has rank 0 warn when replicas and hosts
// interleave: a replica spread over hosts while a host holds ranks of
// several replicas (mpirun --map-by node, Slurm's cyclic distribution),
// where the per-step gradient traffic crosses the network that a block
// layout would keep on the node. A replica over whole nodes (G a multiple
// of the ranks per node) is not warned about. Without Host every rank
// counts as on one host.
func (s *session) checkPlacement() error {
	host := ""
	if s.o.Host != nil {
		h, err := s.o.Host()
		if err != nil {
			h = fmt.Sprintf("rank-%d", s.rank) // unknown: counted as a host of its own
		}
		host = h
	}
	w, lay := s.o.World, s.lay
	rank := w.Rank()
	s.o.Log.Debug().Int("world_rank", rank).Int("replica", lay.Replica(rank)).Int("position", lay.Position(rank)).Str("host", host).Msg("replica group member")
	h := fnv.New64a()
	_, _ = h.Write([]byte(host))
	all := make([]float64, 2*lay.World)
	if err := w.AllgatherFloat64([]float64{float64(h.Sum64() & (1<<52 - 1)), float64(w.LocalRank())}, all); err != nil {
		return fmt.Errorf("replica groups: gathering the ranks' hosts: %w", err)
	}
	hosts, locals := make([]float64, lay.World), make([]int, lay.World)
	for r := range hosts {
		hosts[r], locals[r] = all[2*r], int(all[2*r+1])
	}
	s.hostPeers = onHost(hosts, locals, lay, rank)
	if rank != 0 || s.o.Host == nil {
		return nil
	}
	if spans := interleaved(hosts, lay); len(spans) > 0 {
		s.o.Log.Warn().Msgf("replica groups: %s span several hosts while hosts hold ranks of several replicas, so the per-step traffic crosses the network; "+
			"place consecutive ranks together (mpirun --map-by slot or ppr:K:node, Slurm --distribution=block; hdet sbatch --replica-size writes it)", strings.Join(spans, ", "))
	}
	return nil
}

// onHost lists the node-local ranks of rank's replica's ranks on rank's
// host, in position order (hosts[r] and locals[r]: rank r's host and
// node-local rank): what a torchrun on that host would have started for
// the replica, LOCAL_RANK being the index of rank in it.
func onHost(hosts []float64, locals []int, lay engine.Layout, rank int) []int {
	var out []int
	first := lay.FirstRank(lay.Replica(rank))
	for r := first; r < first+lay.Size; r++ {
		if hosts[r] == hosts[rank] {
			out = append(out, locals[r])
		}
	}
	return out
}

// interleaved names the replicas (at most 4, then a count) that span hosts
// when some host also holds ranks of more than one replica; hosts[r] is
// rank r's host (any identifier).
func interleaved(hosts []float64, lay engine.Layout) []string {
	replicasOn := map[float64]map[int]bool{}
	for r, h := range hosts {
		if replicasOn[h] == nil {
			replicasOn[h] = map[int]bool{}
		}
		replicasOn[h][lay.Replica(r)] = true
	}
	shared := false
	for _, reps := range replicasOn {
		shared = shared || len(reps) > 1
	}
	var spans []string
	for rep := range lay.Replicas() {
		first := lay.FirstRank(rep)
		for p := 1; p < lay.Size && shared; p++ {
			if hosts[first+p] != hosts[first] {
				spans = append(spans, lay.Name(rep))
				break
			}
		}
	}
	if len(spans) > 4 {
		spans = append(spans[:4], fmt.Sprintf("and %d more", len(spans)-4))
	}
	return spans
}
