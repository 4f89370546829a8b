package session

import (
	"context"
	"fmt"

	"github.com/hdet-dev/hdet/internal/engine"
)

// layout checks train.replica_size against the world (W must be a multiple
// of G: a usage error naming both) and keeps the layout.
func (s *session) layout() error {
	lay, err := engine.NewLayout(s.o.World.Size(), s.cfg.Train.ReplicaSize)
	if err != nil {
		return &UsageError{Err: err}
	}
	if lay.Size > 1 && len(s.o.Worker) > 0 {
		// The script's own process group would have to be split per replica
		// for its per-step gradients; the bridge does not do that yet.
		return Usagef("train.replica_size %d: replica groups need the built-in workload; a --worker script runs with train.replica_size 1", lay.Size)
	}
	s.lay = lay
	return nil
}

// makeGroups splits the world into the replica groups' communicators when
// G > 1 (every rank calls it: MPI_Comm_split is collective): one per
// replica, of its G consecutive world ranks ordered by position, and one
// per position, of the ranks that hold it in every replica ordered by
// replica. The communicators live until MPI_Finalize.
func (s *session) makeGroups(context.Context) error {
	if s.lay.Size <= 1 {
		return nil
	}
	if s.o.Split == nil {
		return fmt.Errorf("train.replica_size %d: this communicator cannot be split into replica groups", s.lay.Size)
	}
	rank := s.o.World.Rank()
	rep, pos := s.lay.Replica(rank), s.lay.Position(rank)
	inside, err := s.o.Split(rep, pos)
	if err != nil {
		return fmt.Errorf("replica groups: the communicator of replica %d: %w", rep, err)
	}
	cross, err := s.o.Split(pos, rep)
	if err != nil {
		return fmt.Errorf("replica groups: the cross-replica communicator of position %d: %w", pos, err)
	}
	if inside.Size() != s.lay.Size || cross.Size() != s.lay.Replicas() || inside.Rank() != pos || cross.Rank() != rep {
		return fmt.Errorf("replica groups: rank %d got replica rank %d of %d and cross rank %d of %d, want %d of %d and %d of %d",
			rank, inside.Rank(), inside.Size(), cross.Rank(), cross.Size(), pos, s.lay.Size, rep, s.lay.Replicas())
	}
	s.inside, s.cross = inside, cross
	if rank == 0 {
		s.o.Log.Info().Int("replicas", s.lay.Replicas()).Int("replica_size", s.lay.Size).Int("ranks", s.lay.World).
			Msg("replica groups: consecutive ranks form a replica; the converge runs across replicas")
	}
	return nil
}

// replicas is N, the number of replicas the controller sees.
func (s *session) replicas() int { return s.lay.Replicas() }

// groups are the engine's replica groups (nil when G = 1), their
// collectives watched like the world's.
func (s *session) groups() *engine.Groups {
	if s.lay.Size <= 1 {
		return nil
	}
	return &engine.Groups{Layout: s.lay, Replica: s.wd.Comm(s.inside), Cross: s.wd.Comm(s.cross)}
}

// convergeComm is the communicator the converge reduces over: the world, or
// the cross-replica one under replica groups.
func (s *session) convergeComm() World {
	if s.cross != nil {
		return s.cross
	}
	return s.o.World
}
