package plugins

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/rs/zerolog"

	"github.com/hdet-dev/hdet/hparam"
)

// ErrExplorerFailed: a call failed again after the restart it caused, the
// restart failed, or the explorer refused its input (hparam.ErrInvalid,
// which is not retried). The Explorer stays failed; the meta-controller
// freezes the hyperparameter.
var ErrExplorerFailed = errors.New("explorer failed")

// failure is the error of an explorer given up on: ErrExplorerFailed and
// its cause, with the cause's message only (the controller names the
// explorer and the call).
type failure struct{ err error }

func (f failure) Error() string   { return f.err.Error() }
func (f failure) Unwrap() []error { return []error{ErrExplorerFailed, f.err} }

// ErrClosed: the Explorer was closed.
var ErrClosed = errors.New("explorer closed")

// Event kinds.
const (
	EventRestarted = "restarted" // the explorer failed and was restarted with its last state
	EventFailed    = "failed"    // the explorer failed for good; calls now return ErrExplorerFailed
)

// Event reports a restart or a final failure, for the engine to log and
// record in metrics.jsonl.
type Event struct {
	Name string // Spec.Name
	Kind string // EventRestarted or EventFailed
	Op   string // the call that failed: "plan", "observe", ...
	Err  error  // why
}

// Explorer is a fault-tolerant hparam.Explorer backed by an explorer process.
// Every call has Spec.Timeout. When a call fails (the process crashed or was
// killed, the explorer returned an error, or the call timed out), the process
// is restarted: Init with the same Setup, LoadState with the state saved
// after the last Observe, and the call is retried. The restarted explorer is
// where the old one was, so the run's results do not change. If the retried
// call fails too, the Explorer fails for good (ErrExplorerFailed) and kills
// the process. Each failing call gets its restart: an explorer killed now
// and again (a node's OOM killer, an operator) is restarted each time
// rather than given up on at the second, which would freeze its
// hyperparameter and change the model.
//
// Calls are serialised. Close kills the process.
type Explorer struct {
	spec    Spec
	hl      hclog.Logger
	zl      zerolog.Logger
	onEvent func(Event)

	mu       sync.Mutex
	proc     *process
	restarts int
	failed   error // set once the explorer failed for good or was closed
	setup    *hparam.Setup
	state    []byte                // saved after the last Observe, SaveState or LoadState
	pending  *hparam.WindowRequest // a Plan made since state was saved
	events   []Event               // to deliver once mu is released
}

var _ hparam.Explorer = (*Explorer)(nil)

// Open starts spec's explorer binary. onEvent, when not nil, receives
// restarts and the final failure; it is called outside the Explorer's lock,
// from the goroutine making the call.
//
// A binary that is not executable fails with ErrNotExecutable, a checksum
// that is not SHA-256 hex with ErrBadChecksum, a binary that does not match
// its checksum with ErrChecksumMismatch: all configuration errors.
func Open(ctx context.Context, spec Spec, log zerolog.Logger, onEvent func(Event)) (*Explorer, error) {
	if spec.Timeout <= 0 {
		spec.Timeout = DefaultTimeout
	}
	if spec.Name == "" {
		spec.Name = Name(spec.Binary)
	}
	if spec.Checksum != "" {
		if _, err := parseChecksum(spec.Checksum); err != nil {
			return nil, err
		}
	}
	zl := log.With().Str("explorer", spec.Name).Logger()
	e := &Explorer{spec: spec, hl: NewHCLogger(zl), zl: zl, onEvent: onEvent}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p, err := start(spec, e.hl)
	if err != nil {
		return nil, err
	}
	e.proc = p
	return e, nil
}

// Pid is the explorer process's pid, 0 when none runs.
func (e *Explorer) Pid() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.proc == nil {
		return 0
	}
	return e.proc.pid
}

// Restarts is how many times the explorer was restarted.
func (e *Explorer) Restarts() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.restarts
}

// Close kills the explorer process. Later calls return ErrClosed.
func (e *Explorer) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stop()
	if e.failed == nil {
		e.failed = ErrClosed
	}
	return nil
}

func (e *Explorer) stop() {
	if e.proc != nil {
		e.proc.kill()
		e.proc = nil
	}
}

func (e *Explorer) Describe(ctx context.Context) (d hparam.Descriptor, err error) {
	err = e.do(ctx, "describe", func(ctx context.Context, x hparam.Explorer) (err error) {
		d, err = x.Describe(ctx)
		return err
	})
	return d, err
}

func (e *Explorer) Init(ctx context.Context, s hparam.Setup) error {
	return e.do(ctx, "init", func(ctx context.Context, x hparam.Explorer) error {
		if err := x.Init(ctx, s); err != nil {
			return err
		}
		s.Config = append([]byte(nil), s.Config...)
		e.setup, e.state, e.pending = &s, nil, nil
		return nil
	})
}

func (e *Explorer) Plan(ctx context.Context, r hparam.WindowRequest) (p hparam.WindowPlan, err error) {
	err = e.do(ctx, "plan", func(ctx context.Context, x hparam.Explorer) (err error) {
		if p, err = x.Plan(ctx, r); err == nil {
			e.pending = &r
		}
		return err
	})
	return p, err
}

// Observe also saves the explorer's state, the state a restart restores; the
// call's deadline covers both.
func (e *Explorer) Observe(ctx context.Context, o hparam.Observation) (f hparam.Feedback, err error) {
	err = e.do(ctx, "observe", func(ctx context.Context, x hparam.Explorer) error {
		fb, err := x.Observe(ctx, o)
		if err != nil {
			return err
		}
		st, err := x.SaveState(ctx)
		if err != nil {
			return fmt.Errorf("save state after observe: %w", err)
		}
		f, e.state, e.pending = fb, st, nil
		return nil
	})
	return f, err
}

// Commit also saves the explorer's state, which the commit changed.
func (e *Explorer) Commit(ctx context.Context) (c hparam.Commitment, err error) {
	err = e.do(ctx, "commit", func(ctx context.Context, x hparam.Explorer) error {
		cm, err := x.Commit(ctx)
		if err != nil {
			return err
		}
		st, err := x.SaveState(ctx)
		if err != nil {
			return fmt.Errorf("save state after commit: %w", err)
		}
		c, e.state, e.pending = cm, st, nil
		return nil
	})
	return c, err
}

func (e *Explorer) SaveState(ctx context.Context) (st []byte, err error) {
	err = e.do(ctx, "save-state", func(ctx context.Context, x hparam.Explorer) (err error) {
		if st, err = x.SaveState(ctx); err == nil {
			e.state, e.pending = st, nil
		}
		return err
	})
	return st, err
}

func (e *Explorer) LoadState(ctx context.Context, st []byte) error {
	return e.do(ctx, "load-state", func(ctx context.Context, x hparam.Explorer) error {
		if err := x.LoadState(ctx, st); err != nil {
			return err
		}
		e.state, e.pending = append([]byte(nil), st...), nil
		return nil
	})
}

// do runs call against the process, restarting it on failure (at most
// restartAttempts times).
func (e *Explorer) do(ctx context.Context, op string, call func(context.Context, hparam.Explorer) error) error {
	e.mu.Lock()
	err := e.doLocked(ctx, op, call)
	events := e.events
	e.events = nil
	e.mu.Unlock()
	if e.onEvent != nil {
		for _, ev := range events {
			e.onEvent(ev)
		}
	}
	return err
}

func (e *Explorer) doLocked(ctx context.Context, op string, call func(context.Context, hparam.Explorer) error) error {
	if e.failed != nil {
		return e.failed
	}
	err := e.try(ctx, op, call)
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return err // the caller gave up; not the explorer's fault
	}
	if errors.Is(err, hparam.ErrInvalid) {
		// A refusal of its input (a config block, a window) is an answer,
		// not a crash: a restarted explorer would refuse the same way.
		return e.fail(op, err)
	}
	for attempt := 1; ; attempt++ {
		if err = e.restartAndRetry(ctx, op, call, err); err == nil {
			return nil
		}
		if ctx.Err() != nil || errors.Is(err, hparam.ErrInvalid) || attempt == restartAttempts {
			return e.fail(op, err)
		}
	}
}

// restartAttempts is how many restarts one failing call gets: a process
// killed while it starts, or again right after, is not an explorer that
// fails deterministically, and freezing its hyperparameter would change
// the model; one that fails the call after every restart is frozen.
const restartAttempts = 3

// restartAndRetry replaces the process after the call failed with err and
// makes the call again.
func (e *Explorer) restartAndRetry(ctx context.Context, op string, call func(context.Context, hparam.Explorer) error, err error) error {
	e.restarts++
	e.zl.Warn().Err(err).Str("op", op).Msg("explorer failed; restarting it with its last saved state")
	e.events = append(e.events, Event{Name: e.spec.Name, Kind: EventRestarted, Op: op, Err: err})
	if rerr := e.restart(ctx, op); rerr != nil {
		return fmt.Errorf("%w; restart: %w", err, rerr)
	}
	return e.try(ctx, op, call)
}

// try makes one call with the per-call deadline.
func (e *Explorer) try(ctx context.Context, op string, call func(context.Context, hparam.Explorer) error) error {
	if e.proc == nil {
		return errors.New("no explorer process")
	}
	cctx, cancel := context.WithTimeout(ctx, e.spec.Timeout)
	defer cancel()
	err := call(cctx, e.proc.explorer)
	if err != nil && ctx.Err() == nil && errors.Is(cctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%s timed out after %s: %w", op, e.spec.Timeout, err)
	}
	return err
}

// restart replaces the process and brings the new one to the old one's last
// saved state. Before an Observe it replays the window's Plan, which an
// explorer may have used to advance its state.
func (e *Explorer) restart(ctx context.Context, op string) error {
	e.stop()
	p, err := start(e.spec, e.hl)
	if err != nil {
		return err
	}
	e.proc = p
	steps := []func(context.Context, hparam.Explorer) error{}
	if e.setup != nil {
		s := *e.setup
		steps = append(steps, func(ctx context.Context, x hparam.Explorer) error { return x.Init(ctx, s) })
	}
	if e.state != nil {
		st := e.state
		steps = append(steps, func(ctx context.Context, x hparam.Explorer) error { return x.LoadState(ctx, st) })
	}
	if e.pending != nil && op == "observe" {
		r := *e.pending
		steps = append(steps, func(ctx context.Context, x hparam.Explorer) error { _, err := x.Plan(ctx, r); return err })
	}
	for _, step := range steps {
		if err := e.try(ctx, "restore", step); err != nil {
			return err
		}
	}
	return nil
}

// fail gives up on the explorer for good.
func (e *Explorer) fail(op string, err error) error {
	e.stop()
	e.failed = failure{err}
	e.zl.Error().Err(err).Str("op", op).Msg("explorer failed for good")
	e.events = append(e.events, Event{Name: e.spec.Name, Kind: EventFailed, Op: op, Err: err})
	return e.failed
}
