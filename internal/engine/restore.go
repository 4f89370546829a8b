package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/rs/zerolog"

	"github.com/hdet-dev/hdet/internal/checkpoint"
	"github.com/hdet-dev/hdet/internal/controller"
	"github.com/hdet-dev/hdet/mpi/reduce"
)

// RestoreOptions say where Restore finds a checkpoint and what it loads.
type RestoreOptions struct {
	Comm       Comm
	Dir        string
	Replica    Replica
	Controller *controller.Controller // rank 0 only
	Log        zerolog.Logger
	// Check, when set, runs on every rank between reading and loading
	// (a resume's compatibility check); its error stops the restore.
	Check func(ck *checkpoint.State, path string) error
	// OwnBuffer leaves the replica's parameters as they are: FSDP2 shards
	// differ by position and a checkpoint holds rank 0's, so each rank of
	// a sharded worker run keeps the shards its script resumed.
	OwnBuffer bool
}

// Restored is the checkpoint Restore loaded.
type Restored struct {
	State   *checkpoint.State
	Path    string
	Skipped []checkpoint.Skipped // newer, damaged checkpoints passed over
}

// Restore is the one routine that loads a checkpoint into a running job, for
// a resume and a rollback alike: every rank reads the newest valid
// checkpoint in Dir itself, the ranks agree that they read the same one
// (its step and checksum), then each copies it into its replica and rank 0
// restores its controller, returning the explorers' events. An error
// wrapping checkpoint.ErrNone means no rank found one.
func Restore(ctx context.Context, o RestoreOptions) (Restored, []controller.Event, error) {
	ck, path, skipped, rerr := checkpoint.Latest(o.Dir)
	if o.Comm.Rank() == 0 {
		for _, sk := range skipped {
			o.Log.Warn().Str("path", sk.Path).AnErr("cause", sk.Err).Msg("skipping a damaged checkpoint; falling back to the one before")
		}
	}
	res := Restored{State: ck, Path: path, Skipped: skipped}
	if err := agreeOnCheckpoint(o.Comm, o.Dir, ck, rerr); err != nil {
		return res, nil, err
	}
	if o.Check != nil {
		if err := o.Check(ck, path); err != nil {
			return res, nil, err
		}
	}
	if !o.OwnBuffer {
		buf := o.Replica.SyncBuffer(true)
		if len(ck.Buffer) != len(buf) {
			return res, nil, fmt.Errorf("checkpoint %s holds %d values, this replica %d", path, len(ck.Buffer), len(buf))
		}
		copy(buf, ck.Buffer)
	}
	if o.Comm.Rank() != 0 {
		return res, nil, nil
	}
	evs, err := o.Controller.LoadState(ctx, ck.Controller)
	if err != nil {
		return res, nil, fmt.Errorf("checkpoint %s: controller state: %w", path, err)
	}
	return res, evs, nil
}

// agreeOnCheckpoint compares what every rank read: whether it found a
// checkpoint, its step and the first 8 bytes of its SHA-256.
func agreeOnCheckpoint(c Comm, dir string, ck *checkpoint.State, rerr error) error {
	mine := []float64{0, -1, 0, 0}
	if rerr == nil {
		enc := checkpoint.Encode(ck)
		sum := enc[len(enc)-32:] // Encode ends with the SHA-256 of the rest
		mine = []float64{1, float64(ck.Step), float64(binary.LittleEndian.Uint32(sum)), float64(binary.LittleEndian.Uint32(sum[4:]))}
	}
	lo, hi := slices.Clone(mine), slices.Clone(mine)
	if err := errors.Join(c.AllreduceFloat64(lo, reduce.Min), c.AllreduceFloat64(hi, reduce.Max)); err != nil {
		return fmt.Errorf("agreeing on the checkpoint: %w", err)
	}
	switch {
	case hi[0] == 0: // no rank found one, this one included
		return fmt.Errorf("%s: %w", dir, rerr)
	case !slices.Equal(lo, hi):
		return fmt.Errorf("the ranks read different checkpoints in %s (steps %g..%g, some none): every rank must see the same run.dir (a file system all nodes share)", dir, lo[1], hi[1])
	}
	return nil
}
