// Package session runs one `hdet run` on one rank: the setup phases (config,
// device, replica, explorers, resume, run directory), each agreed by every
// rank, then the window loop, then the end record. The CLI parses flags and
// maps the outcome to an exit code; MPI's lifetime stays with the caller.
package session

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/rs/zerolog"

	"github.com/hdet-dev/hdet/device"
	"github.com/hdet-dev/hdet/internal/checkpoint"
	"github.com/hdet-dev/hdet/internal/config"
	"github.com/hdet-dev/hdet/internal/controller"
	"github.com/hdet-dev/hdet/internal/engine"
	"github.com/hdet-dev/hdet/internal/metrics"
	"github.com/hdet-dev/hdet/internal/watchdog"
	"github.com/hdet-dev/hdet/internal/workload"
	"github.com/hdet-dev/hdet/mpi/reduce"
	"github.com/hdet-dev/hdet/slurm"
)

// World is the communicator a session runs on; *mpi.Comm has it.
type World interface {
	engine.Comm
	device.Reducer
	LocalRank() int
	LocalSize() int
}

// Options are what the CLI parsed and wired.
type Options struct {
	World     World
	Out       io.Writer // rank 0's closing lines and progress
	Log       zerolog.Logger
	Config    []byte   // the YAML config
	Source    string   // where it came from, for the log
	Sets      []string // --set overrides
	PluginDir string
	Worker    []string // --worker's command; empty: the built-in workload
	ShareGPUs bool     // --share-gpus: ranks may share a node's GPUs
	// AllreducePath is --allreduce-path; CUDAAware whether MPI takes device
	// pointers.
	AllreducePath    string
	CUDAAware        bool
	DebugCollectives bool
	NoRequeue        bool
	// Host names this node (rank 0's rendezvous address); Abort ends the
	// whole job (the watchdog's last resort).
	Host  func() (string, error)
	Abort func(code int)
	// Stop reports that a signal asked the run to checkpoint and stop.
	Stop func() bool
	// Split is MPI_Comm_split on World (replica groups, G > 1); nil: the
	// world cannot be split, and train.replica_size must be 1.
	Split func(color, key int) (World, error)
}

// WrapReplica, when set, wraps every rank's replica; the fault suite's
// binary (built with -tags faults) sets it to inject failures.
var WrapReplica func(r engine.Replica, rank, window int) (engine.Replica, error)

// Outcome is what a finished or stopped run leaves for the caller.
type Outcome struct {
	Result engine.Result
	// Report (rank 0, after a finished run) writes the run's report; the
	// caller runs it after MPI_Finalize, so no rank waits on it.
	Report func() error
}

// UsageError marks an error caused by what the user typed or configured;
// a workload's Factory returns one too.
type UsageError = workload.UsageError

// Usagef builds a UsageError.
func Usagef(format string, a ...any) error { return &UsageError{Err: fmt.Errorf(format, a...)} }

// ErrPeerFailed: another rank failed during setup (it says why).
var ErrPeerFailed = errors.New("another rank failed during setup")

// Agreed reports whether the ranks can end together (MPI_Finalize) rather
// than abort: a setup failure they agreed on, a stop after a signal (every
// rank knows of both), or a script that failed after the run (no
// collective is left to wait on).
func Agreed(err error) bool {
	var ae agreedError
	return errors.As(err, &ae) || errors.Is(err, engine.ErrStopped) || AfterRun(err)
}

// AfterRun reports whether err is a worker script's failure after a
// finished run (its exit after hdet's STOP).
func AfterRun(err error) bool {
	var ae *AfterRunError
	return errors.As(err, &ae)
}

// AfterRunError marks a worker script's failure after a finished run: the
// run's results are written, and the job still ends non-zero.
type AfterRunError struct{ Err error }

func (e *AfterRunError) Error() string { return e.Err.Error() }
func (e *AfterRunError) Unwrap() error { return e.Err }

// agreedError is a setup failure every rank has learnt of through agree.
type agreedError struct{ error }

func (e agreedError) Unwrap() error { return e.error }

// session is one rank's run, built up by the setup phases.
type session struct {
	o           Options
	rank        int
	cfg         *config.Config
	slurm       slurm.Env
	sync        engine.SyncMode
	replica     engine.Replica
	gpu         workload.GPU // this rank's GPU, for a workload that starts a process
	converge    device.Allreducer
	lay         engine.Layout // replica groups (G = 1: a rank per replica)
	inside      World         // G > 1: this rank's replica
	hostPeers   []int         // G > 1: the node-local ranks of its replica's ranks on its host, in position order
	cross       World         // G > 1: the same position in every replica
	steps       int
	ctrl        *controller.Controller // rank 0
	mw          *metrics.Writer        // rank 0
	resumeAt    int                    // the step a resume starts from; 0 for a fresh run
	resumePass  int                    // the pass it is in (plan.PassMain after a commit)
	resumeGuard checkpoint.Guard       // its rollbacks (the learning rates keep their halving) and last losses
	resumed     bool                   // a checkpoint was loaded (resumeAt 0: the step-0 one)
	// restarted: no checkpoint, but this run's own metrics.jsonl from a
	// launch that ended before writing one; the run starts over.
	restarted bool
	events    []controller.Event // rank 0: setup's explorer events, for the first record
	wd        *watchdog.Watchdog
	closers   []func()
}

// Run sets up this rank, trains, and writes the end of the run.
func Run(ctx context.Context, o Options) (Outcome, error) {
	s := &session{o: o, rank: o.World.Rank()}
	defer s.close()
	if err := s.setup(ctx); err != nil {
		return Outcome{}, err
	}
	return s.train(ctx)
}

func (s *session) close() {
	s.wd.Stop()
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
}

// agree makes every rank learn whether any rank failed a setup phase (or
// its script's end, after the run), so no rank waits forever in the next
// collective for one that already gave up.
func agree(w World, err error) error {
	code := []float64{0}
	if err != nil {
		code[0] = 1
		var ue *UsageError
		if errors.As(err, &ue) {
			code[0] = 2
		}
	}
	if rerr := w.AllreduceFloat64(code, reduce.Max); rerr != nil {
		return errors.Join(err, rerr)
	}
	switch {
	case err != nil:
		return agreedError{err}
	case code[0] == 2:
		return agreedError{&UsageError{Err: ErrPeerFailed}}
	case code[0] != 0:
		return agreedError{ErrPeerFailed}
	}
	return nil
}
