package bridge

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Sentinel errors; every error from a Worker wraps one of them (test with
// errors.Is) inside a *WorkerError that names the rank.
var (
	ErrOptions  = errors.New("invalid bridge options")
	ErrExited   = errors.New("worker process exited")
	ErrTimeout  = errors.New("worker did not answer in time")
	ErrProtocol = errors.New("bad message from worker")
	ErrVersion  = errors.New("worker speaks another protocol version")
	ErrWorker   = errors.New("worker reported an error")
	ErrBadPlan  = errors.New("invalid window plan")
	ErrClosed   = errors.New("worker already closed")
	// ErrConflict: the script and the configuration (or two ranks'
	// scripts) disagree; a usage error (exit 2).
	ErrConflict = errors.New("script and configuration disagree")
	// ErrSetting: an hdet.attach argument or explore setting the script sent is
	// one hdet cannot use; a usage error (exit 2).
	ErrSetting = errors.New("invalid hdet setting in the script")
)

// WorkerError is a failure of rank Rank's worker while doing Op.
type WorkerError struct {
	Rank   int
	PID    int
	Op     string // "starting", "training window 3 (steps 40-59)", ...
	Err    error
	Stderr string // what of the worker's stderr explains the failure (relevant), if any
}

func (e *WorkerError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "rank %d: worker", e.Rank)
	if e.PID > 0 {
		fmt.Fprintf(&b, " (pid %d)", e.PID)
	}
	fmt.Fprintf(&b, " %s: %v", e.Op, e.Err)
	if s := strings.TrimSpace(e.Stderr); s != "" {
		fmt.Fprintf(&b, "\n--- rank %d's worker stderr: its error ---\n%s", e.Rank, s)
	}
	return b.String()
}

func (e *WorkerError) Unwrap() error { return e.Err }

// tail keeps the last max bytes written to it, whole lines where it can; the
// worker's stderr goes through it so errors can quote a Python traceback.
type tail struct {
	max int
	buf []byte
	mu  sync.Mutex // writes come from exec's copier goroutine
}

func newTail(max int) *tail { return &tail{max: max} }

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	s := string(t.buf)
	t.mu.Unlock()
	if len(s) >= t.max {
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s = s[i+1:]
		}
	}
	return s
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
		e.Stderr = relevant(w.stderr.String())
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
