// Package bridge runs an external training process (a PyTorch script using
// the hdet Python package) as one rank's engine.Replica.
//
// One exchange per window over a Unix socket in Linux's abstract namespace:
// PLAN (the window's per-step hyperparameter values) → the script trains →
// DONE (per-step losses, the values it applied). Before sending DONE the
// worker copies its parameters (and, in `local` mode, its optimizer state)
// into an anonymous float32 file (memfd) mapped shared by both processes;
// that mapping is SyncBuffer, which the engine all-reduces in place with
// MPI. The next PLAN (or EVAL, or STOP) tells the worker to copy the
// averaged buffer back into its tensors. Neither the socket nor the buffer
// has a name in the file system, so no ending leaves anything behind.
//
// CUDA tensors are staged through the same host buffer; the messages leave
// room for a CUDA IPC handle (BufferCUDAIPC) but only BufferSHM is
// implemented.
package bridge

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"sync"
	"time"

	"github.com/hdet-dev/hdet/internal/engine"
	"github.com/hdet-dev/hdet/internal/plan"
)

// Sync modes (docs/design.md §1). A worker's mode is what its script does: a
// script that set up torch.distributed (DDP) by the time it constructs the
// scheduler runs in gradients mode, any other in local mode.
const (
	SyncGradients = string(engine.SyncGradients) // the script's own DDP all-reduces gradients every step
	SyncLocal     = string(engine.SyncLocal)     // no communication inside a window; optimizer state is averaged too
)

// bufferFD is the worker's file descriptor for the sync buffer (the first
// of exec's ExtraFiles).
const bufferFD = 3

// DefaultTimeout bounds the wait for any one message, a whole window's
// training included.
const DefaultTimeout = 10 * time.Minute

// DefaultStartTimeout bounds the start, up to the scheduler's HELLO: a
// script may load its data first, and importing torch alone takes minutes
// on a busy machine or a cold network file system. A script that exits
// without connecting is reported at once, not after this.
const DefaultStartTimeout = 10 * time.Minute

// exitGrace is how long a closed connection may precede the process's exit
// before the worker is reported as hung rather than exited.
const exitGrace = 5 * time.Second

// Options configure one rank's worker.
type Options struct {
	Command []string // the worker's argv, e.g. python3 train.py --steps 600

	Rank, WorldSize, LocalRank int
	// LocalSize is the ranks on this host. With several, a worker whose
	// environment does not set OMP_NUM_THREADS gets 1, as torchrun gives
	// each of several processes: N scripts each using every core slow
	// each other down.
	LocalSize int

	// ReplicaSize is G, the ranks of this rank's replica (0 or 1: every rank
	// is a replica). With G > 1 the script's torch.distributed world is its
	// replica, as torchrun would start it for the replica alone: RANK is
	// ReplicaRank (its position), WORLD_SIZE is G, and MasterAddr/Port are
	// the replica's rendezvous.
	ReplicaSize, ReplicaRank int
	// ReplicaLocalRank and ReplicaLocalSize (G > 1) are the script's
	// LOCAL_RANK and LOCAL_WORLD_SIZE, as a torchrun on its host would
	// start the replica's ranks there: its index among them and their
	// number (a replica on one host: its position, and G).
	ReplicaLocalRank, ReplicaLocalSize int

	// MasterAddr and MasterPort are torch.distributed's rendezvous
	// (MASTER_ADDR/MASTER_PORT, with RANK, WORLD_SIZE, LOCAL_RANK, as
	// torchrun sets them). Every rank must get the same port (rank 0 picks
	// it and broadcasts it).
	MasterAddr string // default 127.0.0.1
	MasterPort int

	GPU string // CUDA_VISIBLE_DEVICES for the worker; "" leaves it as inherited
	// GPUIndex is the worker's own GPU in GPU's list (cuda:GPUIndex): a
	// script whose parameters are on another GPU is refused. -1: not checked.
	GPUIndex int
	// SyncMode is the configured mode; "" takes the script's. A script
	// that does otherwise than a configured mode is an ErrConflict.
	SyncMode string

	Timeout      time.Duration // per message once started; default DefaultTimeout
	StartTimeout time.Duration // from launch to READY; default DefaultStartTimeout

	// RunDir is the run directory (HDET_RUN_DIR), under which SaveState's
	// files go and the script's search-pass files (hdet.checkpoint_path).
	RunDir string
	// Pass is the pass the worker starts in (HDET_PASS): plan.PassSearch,
	// or plan.PassMain when a relaunch resumes the main pass.
	Pass int
	// ResumeState, when set, is this rank's state file (written by
	// SaveState) the worker resumes from, at optimizer step ResumeStep
	// (HDET_RESUME_STATE, HDET_RESUME_STEP): its HELLO must then say it
	// is resumable and starts at ResumeStep, else the start fails with
	// ErrSetting or ErrConflict.
	ResumeState string
	ResumeStep  int

	Env            []string  // extra KEY=VALUE entries, applied last
	Stdout, Stderr io.Writer // the worker's output, each line prefixed "[rank N] "; default os.Stdout, os.Stderr
}

// frame is one read from the worker's connection.
type frame struct {
	msg     *message
	payload []byte
	err     error
}

// torchSize and torchRank are the script's torch.distributed world: its
// replica with G > 1, else the run.
func (o *Options) torchSize() int {
	if o.ReplicaSize > 1 {
		return o.ReplicaSize
	}
	return o.WorldSize
}

// torchLocalRank is the script's LOCAL_RANK: with G > 1 its index among
// its replica's ranks on its host, else its node-local rank.
func (o *Options) torchLocalRank() int {
	if o.ReplicaSize > 1 {
		return o.ReplicaLocalRank
	}
	return o.LocalRank
}

// torchLocalSize is the script's LOCAL_WORLD_SIZE.
func (o *Options) torchLocalSize() int {
	if o.ReplicaSize > 1 {
		return o.ReplicaLocalSize
	}
	return o.LocalSize
}

func (o *Options) torchRank() int {
	if o.ReplicaSize > 1 {
		return o.ReplicaRank
	}
	return o.Rank
}

// Worker is one rank's external training process. It implements
// engine.Replica; its methods must not be called concurrently.
type Worker struct {
	opts   Options
	cmd    *exec.Cmd
	stderr *tail
	out    []*lineWriter
	ln     *net.UnixListener
	conn   net.Conn
	hello  Hello
	mode   string // the sync mode in force
	shm    *shmBuffer

	frames    chan frame
	exited    chan struct{} // closed once the process has been reaped
	exitState *os.ProcessState
	done      chan struct{} // closed by Close, stops the reader

	mu      sync.Mutex
	window  int  // index of the next window
	next    int  // global step the next window must start at
	probing bool // the window in progress reports a probe loss
	idle    bool // the worker waits for a message (between windows)
	applied engine.Values
	pass    int // plan.PassMain once restarted for the main pass
	// peakBaseLR is the highest rate the script set itself (its first
	// param group's, before hdet's multiplier) in the windows so far.
	peakBaseLR float64
	failed     error
	closed     bool
}

var (
	_ engine.Replica      = (*Worker)(nil)
	_ engine.PeakLR       = (*Worker)(nil)
	_ engine.Unrestorable = (*Worker)(nil)
)

// Start launches the worker, waits for it to connect and announce itself,
// maps the sync buffer and waits until the worker has copied its initial
// parameters into it. The worker is killed by the kernel when hdet exits
// (Pdeathsig, from forkthread's thread), so it never outlives a crashed hdet.
func Start(ctx context.Context, opts Options) (*Worker, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	w := &Worker{
		opts:   opts,
		pass:   opts.Pass,
		stderr: newTail(4096),
		frames: make(chan frame),
		exited: make(chan struct{}),
		done:   make(chan struct{}),
	}
	if err := w.start(ctx); err != nil {
		w.closed = true
		if w.cmd != nil {
			w.kill()
			<-w.exited
		}
		w.cleanup()
		return nil, err
	}
	return w, nil
}

func (o *Options) validate() error {
	switch {
	case len(o.Command) == 0:
		return fmt.Errorf("%w: no worker command", ErrOptions)
	case o.WorldSize < 1 || o.Rank < 0 || o.Rank >= o.WorldSize:
		return fmt.Errorf("%w: rank %d of world size %d", ErrOptions, o.Rank, o.WorldSize)
	case o.LocalRank < 0:
		return fmt.Errorf("%w: local rank %d", ErrOptions, o.LocalRank)
	case o.SyncMode != "" && o.SyncMode != SyncGradients && o.SyncMode != SyncLocal:
		return fmt.Errorf("%w: sync mode %q (allowed: %s, %s, or empty for the script's)", ErrOptions, o.SyncMode, SyncGradients, SyncLocal)
	case o.ReplicaSize > 1 && (o.ReplicaRank < 0 || o.ReplicaRank >= o.ReplicaSize || o.WorldSize%o.ReplicaSize != 0):
		return fmt.Errorf("%w: position %d in a replica of %d ranks, world size %d", ErrOptions, o.ReplicaRank, o.ReplicaSize, o.WorldSize)
	case o.ReplicaSize > 1 && (o.ReplicaLocalSize < 1 || o.ReplicaLocalRank < 0 || o.ReplicaLocalRank >= o.ReplicaLocalSize):
		return fmt.Errorf("%w: local rank %d of the replica's %d ranks on this host", ErrOptions, o.ReplicaLocalRank, o.ReplicaLocalSize)
	case o.torchSize() > 1 && (o.MasterPort <= 0 || o.MasterPort > 65535):
		return fmt.Errorf("%w: %d ranks need MasterPort in 1..65535, got %d", ErrOptions, o.torchSize(), o.MasterPort)
	case o.Timeout < 0 || o.StartTimeout < 0:
		return fmt.Errorf("%w: negative timeout", ErrOptions)
	case o.Pass != plan.PassSearch && o.Pass != plan.PassMain:
		return fmt.Errorf("%w: pass %d", ErrOptions, o.Pass)
	case o.ResumeState != "" && o.ResumeStep < 0:
		return fmt.Errorf("%w: resume at step %d", ErrOptions, o.ResumeStep)
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = DefaultStartTimeout
	}
	if o.MasterAddr == "" {
		o.MasterAddr = "127.0.0.1"
	}
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	return nil
}

// Restart ends the script and starts it again, with torch.distributed's
// rendezvous on masterPort and HDET_PASS=main in its environment (and no
// HDET_RESUME_*): the start of a run's main pass (docs/design.md §1.2),
// where the script's own initialisation is the step-0 state. The engine keeps this Worker:
// only the process, its connection and its buffer are new. The script must
// announce the same model as the first time (else ErrConflict).
func (w *Worker) Restart(ctx context.Context, masterPort int) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.usable(); err != nil {
		return err
	}
	before := w.hello
	w.kill() // it waits between windows: nothing of its state is needed
	<-w.exited
	w.cleanup()
	w.opts.MasterPort, w.opts.Pass, w.opts.ResumeState, w.opts.ResumeStep = masterPort, plan.PassMain, "", 0
	w.frames, w.exited, w.done = make(chan frame), make(chan struct{}), make(chan struct{})
	w.cmd, w.conn, w.ln, w.shm, w.exitState = nil, nil, nil, nil, nil
	w.window, w.next, w.idle, w.applied, w.pass = 0, 0, false, nil, plan.PassMain
	if err := w.start(ctx); err != nil { // as Start: nothing of it is left
		if w.cmd != nil {
			w.kill()
			<-w.exited
		}
		w.cleanup()
		w.closed, w.failed = true, err
		return err
	}
	if w.hello.ParamCount != before.ParamCount || w.hello.StateCount != before.StateCount || w.mode != before.SyncMode {
		return w.fail("starting again for the main pass", fmt.Errorf("%w: the script announced %d parameters and %d floats of optimizer state in %s mode, the first time %d and %d in %s mode",
			ErrConflict, w.hello.ParamCount, w.hello.StateCount, w.mode, before.ParamCount, before.StateCount, before.SyncMode))
	}
	return nil
}

// Hello returns what the worker announced: its hyperparameters, parameter
// groups, run length and hdet settings.
func (w *Worker) Hello() Hello { return w.hello }

// PID is the worker process's id.
func (w *Worker) PID() int { return w.cmd.Process.Pid }

// Hyperparameters lists the names the worker accepts.
func (w *Worker) Hyperparameters() []string { return slices.Clone(w.hello.Hyperparameters) }

// ParamCount is the number of parameters at the start of SyncBuffer.
func (w *Worker) ParamCount() int { return w.hello.ParamCount }

// SyncBuffer returns the shared mapping, the same memory for the worker's
// whole life: its parameters as it left them at its last DONE (or at
// start), followed in `local` mode, when withOptimizer is set, by its
// optimizer state (zeros until the first step creates it). The worker loads
// whatever the caller leaves in it at its next PLAN, EVAL or STOP. Nil once
// the worker is closed.
func (w *Worker) SyncBuffer(withOptimizer bool) []float32 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || w.shm == nil {
		return nil
	}
	if withOptimizer && w.mode == SyncLocal {
		return w.shm.data
	}
	return w.shm.data[:w.hello.ParamCount]
}

// PeakLR is the highest learning rate the script set itself (its first
// param group's, before hdet's multiplier) in the windows so far: hdet's
// learning rates are multipliers of it (engine.PeakLR).
func (w *Worker) PeakLR() float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.peakBaseLR
}

// Unrestorable: the script's own state (its data position, random
// streams) is not in hdet's checkpoints, so a worker run does not roll
// back; a relaunch resumes it only from the state files SaveState wrote
// with them, when the script is Resumable (docs/pytorch.md#resume).
func (w *Worker) Unrestorable() {}

// Applied returns the values the worker reported applying at each step of
// the last window (already checked equal to the plan).
func (w *Worker) Applied() engine.Values {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.applied
}

// usable reports the sticky failure or closure.
func (w *Worker) usable() error {
	if w.failed != nil {
		return w.failed
	}
	if w.closed {
		return w.wrap("after Close", ErrClosed)
	}
	return nil
}

// Close ends the worker. When the run went well (the worker waits between
// windows) it sends STOP, after which the worker loads the final averaged
// parameters, returns from step() and lets the script finish; Close waits
// for it to exit (up to the timeout) and reports a non-zero exit. Otherwise
// it kills the worker. Either way it removes the socket and the buffer.
func (w *Worker) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	var err error
	if w.failed == nil && w.idle {
		err = w.stop()
	}
	w.kill() // what is left of its process group
	<-w.exited
	w.cleanup()
	return err
}

func (w *Worker) stop() error {
	const op = "finishing after STOP"
	if err := w.send(w.load(&message{Type: msgStop}), nil); err != nil {
		return w.wrap(op, err)
	}
	timer := time.NewTimer(w.opts.Timeout)
	defer timer.Stop()
	select {
	case <-w.exited:
		if !w.exitState.Success() {
			return w.wrap(op, fmt.Errorf("%w (%s)", ErrExited, describeExit(w.exitState)))
		}
		return nil
	case <-timer.C:
		return w.wrap(op, fmt.Errorf("%w: still running %v after STOP", ErrTimeout, w.opts.Timeout))
	}
}

func (w *Worker) cleanup() {
	close(w.done)
	if w.conn != nil {
		_ = w.conn.Close()
	}
	if w.ln != nil {
		_ = w.ln.Close()
	}
	if w.shm != nil {
		w.shm.close()
	}
}
