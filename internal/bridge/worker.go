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
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hdet-dev/hdet/internal/engine"
	"github.com/hdet-dev/hdet/internal/forkthread"
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

	// MasterAddr and MasterPort are torch.distributed's rendezvous
	// (MASTER_ADDR/MASTER_PORT, with RANK, WORLD_SIZE, LOCAL_RANK, as
	// torchrun sets them). Every rank must get the same port (rank 0 picks
	// it and broadcasts it).
	MasterAddr string // default 127.0.0.1
	MasterPort int

	GPU string // CUDA_VISIBLE_DEVICES for the worker; "" leaves it as inherited
	// SyncMode is the configured mode; "" takes the script's. A script
	// that does otherwise than a configured mode is an ErrConflict.
	SyncMode string

	Timeout      time.Duration // per message once started; default DefaultTimeout
	StartTimeout time.Duration // from launch to READY; default DefaultStartTimeout

	Env            []string  // extra KEY=VALUE entries, applied last
	Stdout, Stderr io.Writer // the worker's output, each line prefixed "[rank N] "; default os.Stdout, os.Stderr
}

// frame is one read from the worker's connection.
type frame struct {
	msg     *message
	payload []byte
	err     error
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
	failed  error
	closed  bool
}

var _ engine.Replica = (*Worker)(nil)

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
	case o.WorldSize > 1 && (o.MasterPort <= 0 || o.MasterPort > 65535):
		return fmt.Errorf("%w: %d ranks need MasterPort in 1..65535, got %d", ErrOptions, o.WorldSize, o.MasterPort)
	case o.Timeout < 0 || o.StartTimeout < 0:
		return fmt.Errorf("%w: negative timeout", ErrOptions)
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

func (w *Worker) start(ctx context.Context) error {
	o := &w.opts
	var id [8]byte
	_, _ = rand.Read(id[:])
	sock := fmt.Sprintf("@hdet-%d-r%d-%s", os.Getpid(), o.Rank, hex.EncodeToString(id[:]))
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return w.errorf("starting", "listen on %s: %w", sock, err)
	}
	w.ln = ln
	if w.shm, err = newSHM(fmt.Sprintf("hdet-rank%d", o.Rank)); err != nil {
		return w.errorf("starting", "%w", err)
	}
	pkg, err := packageDir()
	if err != nil {
		return w.errorf("starting", "%w", err)
	}

	cmd := exec.Command(o.Command[0], o.Command[1:]...)
	cmd.Env = o.environ(sock, pkg)
	w.out = []*lineWriter{newLineWriter(o.Stdout, o.Rank), newLineWriter(o.Stderr, o.Rank)}
	cmd.Stdout = w.out[0]
	cmd.Stderr = io.MultiWriter(w.out[1], w.stderr)
	cmd.ExtraFiles = []*os.File{w.shm.file} // bufferFD
	// Its own process group, so that Close and failures also stop what the
	// script forked (data loader workers); Pdeathsig so that it dies with us.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 3 * time.Second // a forked child holding stderr must not block Wait
	if err := forkthread.Start(cmd); err != nil {
		return w.errorf("starting", "%w: %v", ErrExited, err)
	}
	w.cmd = cmd
	go func() {
		_ = cmd.Wait() // the exit status is read from ProcessState
		w.exitState = cmd.ProcessState
		for _, l := range w.out {
			l.flush()
		}
		close(w.exited)
	}()
	return w.handshake(ctx)
}

// handshake takes the worker from its connection to READY.
func (w *Worker) handshake(ctx context.Context) error {
	o := &w.opts
	conn, err := w.accept(ctx)
	if err != nil {
		return w.fail("connecting", err)
	}
	w.conn = conn
	go w.read()

	m, _, err := w.await(ctx, msgHello, o.StartTimeout)
	if err != nil {
		return w.fail("sending HELLO", err)
	}
	if err := w.checkHello(m); err != nil {
		return w.fail("sending HELLO", err)
	}
	if err := w.shm.mapFloats(w.hello.ParamCount + w.hello.StateCount); err != nil {
		return w.fail("starting", err)
	}
	welcome := &message{
		Type: msgWelcome, Protocol: ProtocolVersion, Rank: o.Rank, WorldSize: o.WorldSize, SyncMode: w.mode,
		Buffer: &BufferSpec{Kind: BufferFD, FD: bufferFD, Floats: len(w.shm.data)},
	}
	if err := w.send(welcome, nil); err != nil {
		return w.fail("starting", err)
	}
	if _, _, err := w.await(ctx, msgReady, o.StartTimeout); err != nil {
		return w.fail("copying its initial parameters", err)
	}
	w.idle = true
	return nil
}

// environ is the worker's environment: ours, minus the variables we own,
// plus the HDET_* ones, torch.distributed's env:// rendezvous as torchrun
// sets it (so DistributedSampler and init_process_group work unchanged),
// and the embedded hdet package first on PYTHONPATH.
func (o *Options) environ(sock, pkg string) []string {
	set := map[string]string{
		"HDET_SOCKET":     sock,
		"HDET_BUFFER_FD":  strconv.Itoa(bufferFD),
		"HDET_PROTOCOL":   strconv.Itoa(ProtocolVersion),
		"HDET_RANK":       strconv.Itoa(o.Rank),
		"HDET_WORLD_SIZE": strconv.Itoa(o.WorldSize),
		"HDET_LOCAL_RANK": strconv.Itoa(o.LocalRank),
		"RANK":            strconv.Itoa(o.Rank),
		"WORLD_SIZE":      strconv.Itoa(o.WorldSize),
		"LOCAL_RANK":      strconv.Itoa(o.LocalRank),
		"MASTER_ADDR":     o.MasterAddr,
		"MASTER_PORT":     strconv.Itoa(o.MasterPort),
		"PYTHONPATH":      pkg,
	}
	if p := os.Getenv("PYTHONPATH"); p != "" {
		set["PYTHONPATH"] = pkg + ":" + p
	}
	if o.SyncMode != "" {
		set["HDET_SYNC_MODE"] = o.SyncMode
	}
	if o.GPU != "" {
		set["CUDA_VISIBLE_DEVICES"] = o.GPU
	}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if _, ours := set[k]; ours || k == "HDET_SYNC_MODE" {
			continue
		}
		env = append(env, kv)
	}
	for k, v := range set {
		env = append(env, k+"="+v)
	}
	return append(env, o.Env...)
}

func (w *Worker) accept(ctx context.Context) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		c, err := w.ln.Accept()
		ch <- result{c, err}
	}()
	timer := time.NewTimer(w.opts.StartTimeout)
	defer timer.Stop()
	select {
	case r := <-ch:
		return r.c, r.err
	case <-w.exited:
		return nil, fmt.Errorf("%w before connecting (%s); does the script construct hdet.OneCycleLR?", ErrExited, describeExit(w.exitState))
	case <-timer.C:
		_ = w.ln.Close()
		return nil, fmt.Errorf("%w: it did not connect within %v; does the script construct hdet.OneCycleLR?", ErrTimeout, w.opts.StartTimeout)
	case <-ctx.Done():
		_ = w.ln.Close()
		return nil, ctx.Err()
	}
}

func (w *Worker) checkHello(m *message) error {
	if m.Hello == nil || m.Hello.Protocol != ProtocolVersion {
		v := 0
		if m.Hello != nil {
			v = m.Hello.Protocol
		}
		return fmt.Errorf("%w: worker speaks %d, this hdet speaks %d; install the hdet Python package from the same release", ErrVersion, v, ProtocolVersion)
	}
	h := *m.Hello
	switch {
	case h.ParamCount <= 0 || h.StateCount < 0:
		return fmt.Errorf("%w: HELLO with %d parameters and %d floats of optimizer state", ErrProtocol, h.ParamCount, h.StateCount)
	case h.SyncMode != SyncGradients && h.SyncMode != SyncLocal:
		return fmt.Errorf("%w: HELLO with sync mode %q", ErrProtocol, h.SyncMode)
	case h.StateCount > 0 && h.SyncMode != SyncLocal:
		return fmt.Errorf("%w: HELLO with optimizer state in %s mode", ErrProtocol, h.SyncMode)
	case h.Dtype != "float32":
		return fmt.Errorf("%w: HELLO with buffer dtype %q (want float32)", ErrProtocol, h.Dtype)
	case !slices.Contains(h.Buffers, BufferFD):
		return fmt.Errorf("%w: worker cannot use a %s buffer (offers %v)", ErrProtocol, BufferFD, h.Buffers)
	case len(h.Hyperparameters) == 0:
		return fmt.Errorf("%w: HELLO without hyperparameters", ErrProtocol)
	}
	sum := 0
	for _, g := range h.ParamGroups {
		sum += g.Size
	}
	if sum != h.ParamCount {
		return fmt.Errorf("%w: HELLO param groups hold %d parameters, param_count says %d", ErrProtocol, sum, h.ParamCount)
	}
	if err := checkMode(w.opts.SyncMode, h.SyncMode, w.opts.WorldSize); err != nil {
		return err
	}
	w.hello, w.mode = h, h.SyncMode
	return nil
}

// checkMode compares the configured sync mode with what the script does.
func checkMode(configured, script string, ranks int) error {
	switch {
	case configured == "" || configured == script:
		return nil
	case configured == SyncLocal:
		return fmt.Errorf("%w: train.sync is local, but the script set up torch.distributed, whose DDP all-reduces gradients every step; remove train.sync (hdet then follows the script) or set it to gradients", ErrConflict)
	case ranks > 1:
		return fmt.Errorf("%w: train.sync is gradients, but the script did not set up torch.distributed before constructing the scheduler, so nothing averages its gradients; remove train.sync (hdet then runs local mode) or call init_process_group first", ErrConflict)
	}
	return nil
}

// read forwards frames from the connection until an error or Close.
func (w *Worker) read() {
	for {
		m, p, err := readFrame(w.conn)
		select {
		case w.frames <- frame{m, p, err}:
		case <-w.done:
			return
		}
		if err != nil {
			return
		}
	}
}

func (w *Worker) send(m *message, payload []byte) error {
	_ = w.conn.SetWriteDeadline(time.Now().Add(w.opts.Timeout))
	if err := writeFrame(w.conn, m, payload); err != nil {
		if errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
			return w.exitError()
		}
		return fmt.Errorf("send %s: %w", strings.ToUpper(m.Type), err)
	}
	return nil
}

// await waits for a message of type want, the worker's exit, the timeout or
// ctx, whichever comes first.
func (w *Worker) await(ctx context.Context, want string, timeout time.Duration) (*message, []byte, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case f := <-w.frames:
		return w.expect(f, want)
	case <-w.exited:
		// A report the worker sent just before exiting says more than its
		// exit status.
		select {
		case f := <-w.frames:
			if f.err == nil && f.msg.Type == msgError {
				return nil, nil, fmt.Errorf("%w: %s (then %s)", ErrWorker, f.msg.Message, describeExit(w.exitState))
			}
		case <-time.After(200 * time.Millisecond):
		}
		return nil, nil, fmt.Errorf("%w (%s)", ErrExited, describeExit(w.exitState))
	case <-timer.C:
		return nil, nil, fmt.Errorf("%w: no %s within %v", ErrTimeout, strings.ToUpper(want), timeout)
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
}

func (w *Worker) expect(f frame, want string) (*message, []byte, error) {
	switch {
	case errors.Is(f.err, io.EOF) || errors.Is(f.err, syscall.ECONNRESET):
		return nil, nil, w.exitError()
	case f.err != nil:
		return nil, nil, f.err
	case f.msg.Type == want:
		return f.msg, f.payload, nil
	case f.msg.Type == msgError:
		return nil, nil, fmt.Errorf("%w: %s", ErrWorker, f.msg.Message)
	}
	return nil, nil, fmt.Errorf("%w: expected %s, got %q", ErrProtocol, strings.ToUpper(want), f.msg.Type)
}

// exitError explains a closed connection by the exit that normally follows.
func (w *Worker) exitError() error {
	select {
	case <-w.exited:
		return fmt.Errorf("%w (%s)", ErrExited, describeExit(w.exitState))
	case <-time.After(exitGrace):
		return fmt.Errorf("%w: it closed its connection but is still running", ErrProtocol)
	}
}

func describeExit(s *os.ProcessState) string {
	if s == nil {
		return "exit status unknown"
	}
	if ws, ok := s.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return fmt.Sprintf("killed by signal %d (%v)", int(ws.Signal()), ws.Signal())
	}
	return fmt.Sprintf("exit status %d", s.ExitCode())
}

// errorf builds a WorkerError without marking the worker failed.
func (w *Worker) errorf(op, format string, a ...any) error {
	return w.wrap(op, fmt.Errorf(format, a...))
}

func (w *Worker) wrap(op string, err error) error {
	e := &WorkerError{Rank: w.opts.Rank, Op: op, Err: err}
	if w.cmd != nil && w.cmd.Process != nil {
		e.PID = w.cmd.Process.Pid
	}
	if errors.Is(err, ErrWorker) {
		// The script reports its error, then Python prints the traceback
		// and exits: wait for the exit (stderr is copied whole by then) so
		// the message can quote the traceback.
		select {
		case <-w.exited:
		case <-time.After(exitGrace):
		}
	}
	if errors.Is(err, ErrExited) || errors.Is(err, ErrWorker) || errors.Is(err, ErrProtocol) || errors.Is(err, ErrTimeout) {
		e.Stderr = w.stderr.String()
	}
	return e
}

// fail marks the worker broken (every later call returns the same error)
// and kills it: after a timeout, a bad message or a cancelled window its
// state is unknown.
func (w *Worker) fail(op string, err error) error {
	w.failed = w.wrap(op, err)
	w.idle = false
	w.kill()
	return w.failed
}

func (w *Worker) kill() {
	if w.cmd != nil && w.cmd.Process != nil {
		_ = syscall.Kill(-w.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// Restart ends the script and starts it again, with torch.distributed's
// rendezvous on masterPort and HDET_PASS=main in its environment: the
// start of a run's main pass (docs/design.md §1.2), where the script's
// own initialisation is the step-0 state. The engine keeps this Worker:
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
	w.opts.MasterPort = masterPort
	w.opts.Env = append(slices.Clip(w.opts.Env), "HDET_PASS=main")
	w.frames, w.exited, w.done = make(chan frame), make(chan struct{}), make(chan struct{})
	w.cmd, w.conn, w.ln, w.shm, w.exitState = nil, nil, nil, nil, nil
	w.window, w.next, w.idle, w.applied = 0, 0, false, nil
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
// groups, OneCycleLR settings and hdet settings.
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

// load is the load request of PLAN, EVAL and STOP.
func (w *Worker) load(m *message) *message {
	m.Load, m.LoadOptimizer = true, w.mode == SyncLocal
	return m
}

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

// TrainWindow sends the window's plan and waits for the worker to train it.
// grads is unused: in `gradients` mode the script's own DDP all-reduces the
// gradients every step.
func (w *Worker) TrainWindow(ctx context.Context, win engine.Window) (engine.WindowResult, error) {
	start, steps, v := win.Start, win.Steps, win.V
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.usable(); err != nil {
		return engine.WindowResult{}, err
	}
	op := fmt.Sprintf("training window %d (steps %d-%d)", w.window, start, start+steps-1)
	if err := w.checkPlan(start, steps, v); err != nil {
		return engine.WindowResult{}, w.wrap(op, err)
	}
	w.probing = win.ProbeTail > 0 && w.hello.Probe
	plan := w.load(&message{Type: msgPlan, Window: w.window, Start: start, Steps: steps, Values: v})
	if w.probing {
		plan.ProbeTail = min(win.ProbeTail, steps)
	}
	if err := w.send(plan, nil); err != nil {
		return engine.WindowResult{}, w.fail(op, err)
	}
	w.idle = false
	m, payload, err := w.await(ctx, msgDone, w.opts.Timeout)
	if err != nil {
		return engine.WindowResult{}, w.fail(op, err)
	}
	losses, err := w.checkDone(m, payload, steps, v)
	if err != nil {
		return engine.WindowResult{}, w.fail(op, err)
	}
	w.idle = true
	w.window++
	w.next = start + steps
	res := engine.WindowResult{Losses: losses, Probe: math.NaN()}
	if w.probing {
		res.Losses, res.Probe = losses[:steps], losses[steps]
	}
	return res, nil
}

// CanProbe implements engine.Replica: the script gave hdet.probe(fn).
func (w *Worker) CanProbe() bool { return w.hello.Probe }

// SyncMode is the mode in force: the configured one, which the script
// agrees with, or the script's.
func (w *Worker) SyncMode() string { return w.mode }

func (w *Worker) checkPlan(start, steps int, v engine.Values) error {
	if steps <= 0 {
		return fmt.Errorf("%w: %d steps", ErrBadPlan, steps)
	}
	if start != w.next {
		return fmt.Errorf("%w: window starts at step %d, the worker is at step %d", ErrBadPlan, start, w.next)
	}
	for name, vals := range v {
		if !slices.Contains(w.hello.Hyperparameters, name) {
			return fmt.Errorf("%w: the worker does not accept %q (it accepts %v)", ErrBadPlan, name, w.hello.Hyperparameters)
		}
		if len(vals) != steps {
			return fmt.Errorf("%w: %d values of %q for %d steps", ErrBadPlan, len(vals), name, steps)
		}
		for i, x := range vals {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return fmt.Errorf("%w: %s = %v at step %d", ErrBadPlan, name, x, start+i)
			}
		}
	}
	return nil
}

// checkDone validates a DONE against the plan and returns the losses.
func (w *Worker) checkDone(m *message, payload []byte, steps int, v engine.Values) ([]float64, error) {
	if m.Window != w.window || m.Steps != steps {
		return nil, fmt.Errorf("%w: DONE for window %d of %d steps, expected window %d of %d", ErrProtocol, m.Window, m.Steps, w.window, steps)
	}
	n := steps
	if w.probing {
		n++ // the probe loss follows the step losses
	}
	losses, err := float64s(payload, n)
	if err != nil {
		return nil, err
	}
	for name, plan := range v {
		got := m.Applied[name]
		if len(got) != steps {
			return nil, fmt.Errorf("%w: worker reports %d applied values of %q for %d steps", ErrProtocol, len(got), name, steps)
		}
		for i := range plan {
			if got[i] != plan[i] {
				return nil, fmt.Errorf("%w: worker applied %s = %v at step %d, the plan said %v", ErrProtocol, name, got[i], w.next+i, plan[i])
			}
		}
	}
	w.applied = m.Applied
	return losses, nil
}

// Evaluate asks the worker's registered evaluate function for the test loss
// and accuracy of the buffer's (averaged) parameters. A script that
// registered none is not asked: the result is NaN, NaN (metrics.jsonl then
// shows null), not an error, so the run goes on.
func (w *Worker) Evaluate(ctx context.Context) (loss, accuracy float64, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.usable(); err != nil {
		return math.NaN(), math.NaN(), err
	}
	if !w.hello.Evaluate {
		return math.NaN(), math.NaN(), nil
	}
	op := fmt.Sprintf("evaluating after window %d", w.window-1)
	if err := w.send(w.load(&message{Type: msgEval}), nil); err != nil {
		return math.NaN(), math.NaN(), w.fail(op, err)
	}
	_, payload, err := w.await(ctx, msgResult, w.opts.Timeout)
	if err != nil {
		return math.NaN(), math.NaN(), w.fail(op, err)
	}
	r, err := float64s(payload, 2)
	if err != nil {
		return math.NaN(), math.NaN(), w.fail(op, err)
	}
	return r[0], r[1], nil
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
