// Package engine runs the HDET window loop: plan, fan-out, gather and
// health, converge, evaluate, observe, checkpoint (loop.go, one method per
// phase), and the rollback of a window where every rank diverged.
package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math"
	"unsafe"

	"github.com/rs/zerolog"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/internal/checkpoint"
	"github.com/hdet-dev/hdet/internal/controller"
	"github.com/hdet-dev/hdet/internal/metrics"
	"github.com/hdet-dev/hdet/mpi/reduce"
)

// Comm is the part of an MPI communicator the engine uses; *mpi.Comm has it.
type Comm interface {
	Rank() int
	Size() int
	AllreduceFloat32(buf []float32, op reduce.Op) error
	AllreduceFloat64(buf []float64, op reduce.Op) error
	AllgatherFloat64(send, recv []float64) error
	BcastMessage(msg []byte, root int) ([]byte, error)
}

// Converger sums the sync buffer in place across ranks (the converge); the
// session adapts device's allreducers to it.
type Converger interface {
	AllreduceSum(buf []float32) error
}

// ErrAllUnhealthy stops a run whose every rank diverged in the same window.
var ErrAllUnhealthy = errors.New("every rank is unhealthy")

// ErrStopped: the run was asked to stop (a signal) and checkpointed.
var ErrStopped = errors.New("run stopped by a signal after checkpointing")

// Progress shows rank 0's progress once per window.
type Progress interface {
	Update(pass, step, total int, loss, baseLR float64)
	Done()
}

// Checkpointer writes a checkpoint after a converge, when due, and a
// pass's step-0 checkpoint where a rollback could use it (pass is
// plan.PassSearch or PassMain). The engine calls it on every rank;
// implementations write from rank 0 only.
type Checkpointer interface {
	AtStart(ctx context.Context, pass int, g checkpoint.Guard)
	AfterConverge(ctx context.Context, pass, window, step int, g checkpoint.Guard, force bool) error
}

// Options configure a run of the window loop.
type Options struct {
	Comm    Comm
	Replica Replica
	// Groups, when set with G > 1, makes each replica a group of G ranks
	// (see Groups and Layout): the plan, spread, signal, health and
	// controller work per replica, the converge runs on Groups.Cross, and
	// in `local` mode the per-step gradients are averaged on
	// Groups.Replica. Converge, when set, must then reduce over the
	// cross-replica communicator. nil: every rank is a replica.
	Groups     *Groups
	Controller *controller.Controller // rank 0 only; nil elsewhere
	Steps      int                    // S
	Window     int                    // T
	// MainWindow is the main pass's window, a multiple of T (0: T), the
	// controller's RunShape.MainWindowSteps: evaluations and checkpoints
	// keep their cadence in T-step windows.
	MainWindow int
	Sync       SyncMode
	EvalEvery  int // windows between evaluations; 0: at the end only
	StartStep  int // > 0 when resuming
	StartPass  int // plan.PassMain when resuming in the main pass
	// StartGuard is the divergence guard of the run resumed from (its
	// checkpoint's): its learning rates keep their halving 0.5^n, and its
	// next window is judged against the last one's losses.
	StartGuard checkpoint.Guard
	Metrics    *metrics.Writer // rank 0 only
	Progress   Progress        // rank 0 only; may be nil
	Checkpoint Checkpointer    // may be nil
	// Converge all-reduces the sync buffer; nil means Comm on the host slice.
	Converge Converger
	// Restart restores every rank's step-0 state (parameters, optimizer
	// state, data order, random streams) when the explorers commit and
	// the main pass begins (docs/design.md §1.2); the replica's sync
	// buffer may be a new one afterwards. nil: a run cannot commit.
	Restart func(ctx context.Context) error
	// Stop is polled at each converge; when any rank's Stop returns true the
	// ranks checkpoint together and Run returns ErrStopped.
	Stop func() bool
	Log  zerolog.Logger
	// Watch is told of every phase of the loop (the watchdog); may be nil.
	Watch Watch
	// Events (rank 0) go into the first window's record: what setup's
	// controller calls reported (an explorer frozen in the first plan).
	Events []controller.Event
	// DivergenceFactor: a rank whose finite window loss exceeds this many
	// times the healthy ranks' median, or whose probe loss exceeds its
	// square root times theirs, is unhealthy, and so is every rank when
	// that median exceeds this many times the previous window's (see
	// blownUp); 0 disables both.
	DivergenceFactor float64
	// A window where every rank is unhealthy rolls back to the newest
	// checkpoint in CheckpointDir (see Restore) with the learning rates
	// halved, at most MaxRollbacks times; CheckpointDir "" disables it, and
	// so does a replica that is Unrestorable.
	MaxRollbacks  int
	CheckpointDir string
}

// Result summarises a finished run.
type Result struct {
	Pass         int // the pass it ended in: plan.PassMain after a commit
	Steps        int
	TestLoss     float64
	TestAccuracy float64
	Checksum     string
	// LRScale is the rollbacks' halving of the learning rates at the end,
	// which a committed learning rate carries (ScaleCommit).
	LRScale float64
}

// ScaleCommit is a commitment as the main pass trains it: a learning rate
// carries the rollbacks' halving lrScale.
func ScaleCommit(c controller.ParamCommit, lrScale float64) controller.ParamCommit {
	if hparam.IsLR(c.Name) {
		c.Value *= lrScale
		c.Offset += math.Log(lrScale)
	}
	return c
}

// Run executes the HDET window loop on every rank until step S (or a
// stop): every rank finishes with the same parameters.
func Run(ctx context.Context, o Options) (Result, error) {
	l, err := newLoop(o)
	if err != nil {
		return Result{}, err
	}
	return l.run(ctx)
}

// Checksum identifies a parameter buffer (hex of the first 8 bytes of its SHA-256).
func Checksum(b []float32) string {
	var raw []byte
	if len(b) > 0 {
		raw = unsafe.Slice((*byte)(unsafe.Pointer(&b[0])), 4*len(b))
	}
	s := sha256.Sum256(raw)
	return hex.EncodeToString(s[:8])
}
