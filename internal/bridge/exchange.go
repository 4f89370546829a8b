package bridge

// The window exchange: PLAN, DONE, EVAL, RESULT over the worker's socket.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/hdet-dev/hdet/internal/engine"
)

// read forwards frames from conn to frames until an error or done is
// closed. It takes the process's connection and channels as arguments:
// Restart replaces the Worker's fields while this process's reader may
// still be finishing.
func read(conn net.Conn, frames chan<- frame, done <-chan struct{}) {
	for {
		m, p, err := readFrame(conn)
		select {
		case frames <- frame{m, p, err}:
		case <-done:
			return
		}
		if err != nil {
			return
		}
	}
}

func (w *Worker) send(m *message, payload []byte) error { return w.sendFrame(m.Type, m, payload) }

// sendFrame sends m (a *message, or a saveRequest) of type typ.
func (w *Worker) sendFrame(typ string, m any, payload []byte) error {
	_ = w.conn.SetWriteDeadline(time.Now().Add(w.opts.Timeout))
	if err := writeFrame(w.conn, m, payload); err != nil {
		if errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
			return w.exitError()
		}
		return fmt.Errorf("send %s: %w", strings.ToUpper(typ), err)
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

// load is the load request of PLAN, EVAL and STOP.
func (w *Worker) load(m *message) *message {
	m.Load, m.LoadOptimizer = true, w.mode == SyncLocal
	return m
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
	plan := w.load(&message{Type: msgPlan, Window: w.window, Start: start, Steps: steps, Values: v, Pass: w.pass, Search: win.Search})
	if w.probing {
		plan.ProbeTail = min(win.ProbeTail, steps)
	}
	plan.SentAt = unixSeconds(time.Now())
	if err := w.send(plan, nil); err != nil {
		return engine.WindowResult{}, w.fail(op, err)
	}
	w.idle = false
	m, payload, err := w.await(ctx, msgDone, w.opts.Timeout)
	if err != nil {
		return engine.WindowResult{}, w.fail(op, err)
	}
	received := time.Now()
	losses, err := w.checkDone(m, payload, steps, v)
	if err != nil {
		return engine.WindowResult{}, w.fail(op, err)
	}
	w.idle = true
	w.window++
	w.next = start + steps
	// checkDone saw the script's own rate at each of the window's steps.
	res := engine.WindowResult{Losses: losses, Probe: math.NaN(), Handover: handover(m, received), Level: m.BaseLR[steps-1]}
	if w.probing {
		res.Losses, res.Probe = losses[:steps], losses[steps]
	}
	return res, nil
}

// handover is the script's hand-over timing in DONE m, plus the DONE's
// trip through the socket (received: when it was read); nil from a script
// that sent none.
func handover(m *message, received time.Time) map[string]float64 {
	if m.Timing == nil {
		return nil
	}
	t := maps.Clone(m.Timing)
	if m.SentAt > 0 {
		t["socket"] = max(0, unixSeconds(received)-m.SentAt)
	}
	return t
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

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
	if len(m.BaseLR) != steps {
		return nil, fmt.Errorf("%w: worker reports its own learning rate at %d steps of %d", ErrProtocol, len(m.BaseLR), steps)
	}
	for _, b := range m.BaseLR {
		if !(b >= 0) || math.IsInf(b, 0) {
			return nil, fmt.Errorf("%w: the script's own learning rate was %v in window %d; hdet multiplies it, so it must be a finite number >= 0", ErrProtocol, b, w.window)
		}
		w.peakBaseLR = max(w.peakBaseLR, b)
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
