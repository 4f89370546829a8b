package engine

import (
	"fmt"
	"math"

	"github.com/rs/zerolog"

	"github.com/hdet-dev/hdet/mpi/reduce"
)

// Layout is how W world ranks divide into N = W/G replicas of G ranks each
// (replica groups, `train.replica_size`). Consecutive world ranks form a
// replica: replica r is world ranks r*G .. r*G+G-1, so with mpirun's
// --map-by node or Slurm's block distribution a replica fills a node before
// the next one starts, and only the converge crosses the network. G = 1 is
// one rank per replica: today's layout.
type Layout struct {
	World int // W, world ranks
	Size  int // G, ranks per replica
}

// NewLayout checks that world ranks divide into replicas of g ranks.
func NewLayout(world, g int) (Layout, error) {
	if g < 1 {
		return Layout{}, fmt.Errorf("train.replica_size: got %d, want an integer >= 1 (ranks per replica)", g)
	}
	if world < 1 || world%g != 0 {
		return Layout{}, fmt.Errorf("train.replica_size: %d ranks (W) do not divide into replicas of %d ranks (G): want W a multiple of G (W=%d, G=%d)", world, g, world, g)
	}
	return Layout{World: world, Size: g}, nil
}

// Replicas is N, the number of replicas.
func (l Layout) Replicas() int { return l.World / l.Size }

// Replica is the replica a world rank belongs to.
func (l Layout) Replica(rank int) int { return rank / l.Size }

// Position is a world rank's place inside its replica, in [0, G): the
// ranks with the same position in every replica converge together.
func (l Layout) Position(rank int) int { return rank % l.Size }

// FirstRank is the lowest world rank of a replica.
func (l Layout) FirstRank(replica int) int { return replica * l.Size }

// CrossKey orders a rank in its position's cross-replica communicator:
// position p starts at replica p (mod N) and goes round, so the ranks that
// lead those allreduces (MPI's algorithms often give rank 0 more to send)
// are spread over the replicas' nodes rather than all on the first one.
func (l Layout) CrossKey(rank int) int {
	n := l.Replicas()
	return ((l.Replica(rank)-l.Position(rank))%n + n) % n
}

// Slice is the part [lo, hi) of an n-element buffer that position pos
// converges: n split into G slices of ceil(n/G), the last ones shorter or
// empty.
func (l Layout) Slice(n, pos int) (lo, hi int) {
	chunk := (n + l.Size - 1) / l.Size
	lo = min(pos*chunk, n)
	return lo, min(lo+chunk, n)
}

// Name names replica r in messages: "rank r" with one rank per replica,
// else "replica r (ranks a-b)".
func (l Layout) Name(r int) string {
	if l.Size <= 1 {
		return fmt.Sprintf("rank %d", r)
	}
	return fmt.Sprintf("replica %d (ranks %d-%d)", r, l.FirstRank(r), l.FirstRank(r)+l.Size-1)
}

func (l Layout) unit() string {
	if l.Size <= 1 {
		return "ranks"
	}
	return "replicas"
}

// Groups are a rank's communicators under replica groups (G > 1): Replica
// holds the G ranks of its replica (the per-step gradient allreduce in
// `local` mode: ordinary data parallelism inside the replica), Cross the N
// ranks that hold its position in every replica (the converge, so each rank
// moves 1/G of what a flat allreduce would).
type Groups struct {
	Layout
	Replica Comm
	Cross   Comm
	// Sharded: each rank of a replica holds its own part of the model
	// (FSDP2's shards), not a copy of the replica's buffer, so the converge
	// averages the whole buffer over Cross (each rank already holds 1/G)
	// instead of a slice of it put together inside the replica.
	Sharded bool
}

// groupOf returns the layout a loop runs under: o.Groups', or one rank per
// replica when there are no groups.
func groupOf(o Options) Layout {
	if o.Groups == nil || o.Groups.Size <= 1 {
		return Layout{World: o.Comm.Size(), Size: 1}
	}
	return o.Groups.Layout
}

// checkGroups makes sure Options.Groups fit the world they split.
func checkGroups(o Options, lay Layout) error {
	if lay.Size <= 1 {
		return nil
	}
	g := o.Groups
	if g.Replica == nil || g.Cross == nil {
		return fmt.Errorf("replica groups of %d ranks without their communicators", lay.Size)
	}
	if _, err := NewLayout(o.Comm.Size(), lay.Size); err != nil || lay.World != o.Comm.Size() {
		return fmt.Errorf("replica groups laid out for %d ranks of %d on a world of %d ranks", lay.World, lay.Size, o.Comm.Size())
	}
	if g.Replica.Size() != lay.Size || g.Cross.Size() != lay.Replicas() {
		return fmt.Errorf("replica groups: a replica communicator of %d ranks (want %d), a cross-replica one of %d (want %d)",
			g.Replica.Size(), lay.Size, g.Cross.Size(), lay.Replicas())
	}
	return nil
}

// SliceGatherer is a replica's communicator that can put the positions'
// slices of a buffer together in place (an allgather: each rank sends its
// slice once, where a sum-allreduce of the buffer moves all of it).
type SliceGatherer interface {
	AllgathervFloat32(buf []float32, counts []int) error
}

// Counts are the lengths of the G slices of an n-element buffer
// (Layout.Slice), in position order.
func (l Layout) Counts(n int) []int {
	out := make([]int, l.Size)
	for p := range out {
		lo, hi := l.Slice(n, p)
		out[p] = hi - lo
	}
	return out
}

// SumGrouped is the converge's sum under replica groups, for the rank at
// world rank rank of lay. The G ranks of a replica hold the same buffer
// (same values, gradients averaged inside the replica), so the rank at
// position p sums only its slice (Layout.Slice) across the replicas through
// cross (its position's cross-replica communicator, or an allreducer over
// it): each rank sends 1/G of what a flat allreduce would over the network.
// The replica's ranks then put their slices together on inside (this rank's
// replica): by an allgather where inside is a SliceGatherer and the buffer
// fits MPI's int offsets, else by a sum in which every element has one
// non-zero term. Both are exact (the sum turns a -0 into +0) and leave
// every rank with the same buffer. The window loop and `hdet bench
// allreduce --replica-size` both converge through it.
func SumGrouped(buf []float32, lay Layout, rank int, cross Converger, inside Comm) error {
	lo, hi := lay.Slice(len(buf), lay.Position(rank))
	if hi > lo {
		if err := cross.AllreduceSum(buf[lo:hi]); err != nil {
			return fmt.Errorf("across replicas: %w", err)
		}
	}
	if g, ok := inside.(SliceGatherer); ok && len(buf) <= math.MaxInt32 {
		if err := g.AllgathervFloat32(buf, lay.Counts(len(buf))); err != nil {
			return fmt.Errorf("inside replica %d: %w", lay.Replica(rank), err)
		}
		return nil
	}
	clear(buf[:lo])
	clear(buf[hi:])
	if err := inside.AllreduceFloat32(buf, reduce.Sum); err != nil {
		return fmt.Errorf("inside replica %d: %w", lay.Replica(rank), err)
	}
	return nil
}

// sumGrouped is the loop's converge under replica groups: SumGrouped, or
// for sharded buffers the whole of this rank's over its position's
// communicator.
func (l *loop) sumGrouped(buf []float32) error {
	if l.o.Groups.Sharded {
		if err := l.conv.AllreduceSum(buf); err != nil {
			return fmt.Errorf("across replicas, position %d's shards: %w", l.lay.Position(l.rank), err)
		}
		return nil
	}
	return SumGrouped(buf, l.lay, l.rank, l.conv, l.o.Groups.Replica)
}

// replicaChecksum is, when debugging replica groups, this rank's parameters'
// checksum before the converge (the ranks of a replica must agree on it:
// sumGrouped relies on it; sharded ranks hold different parts); ""
// otherwise.
func (l *loop) replicaChecksum() string {
	if l.lay.Size <= 1 || l.o.Groups.Sharded || l.o.Log.GetLevel() > zerolog.DebugLevel {
		return ""
	}
	return Checksum(l.params)
}
