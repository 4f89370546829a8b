package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/hdet-dev/hdet/checkpoint"
	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/metrics"
)

// markDiverged makes unhealthy every healthy rank whose finite window loss
// is above factor times the median of the healthy ranks' losses (a replica
// whose loss exploded without reaching Inf or NaN), sets its loss to NaN as
// for a NaN replica, and returns one event per such rank. Every rank runs it
// on the same gathered losses, so all reach the same verdict. factor 0, or
// a median <= 0 (a loss that is not a positive cross-entropy), disables it.
func markDiverged(losses []float64, healthy []bool, factor float64, window int) []metrics.Event {
	if factor == 0 {
		return nil
	}
	var ok []float64
	for r, h := range healthy {
		if h {
			ok = append(ok, losses[r])
		}
	}
	med := median(ok)
	if !(med > 0) {
		return nil
	}
	var events []metrics.Event
	for r, h := range healthy {
		if h && losses[r] > factor*med {
			rr := r
			events = append(events, metrics.Event{Kind: metrics.EventUnhealthy, Rank: &rr,
				Message: fmt.Sprintf("rank %d's window loss %.4g in window %d is over train.divergence_factor (%g) times the healthy ranks' median %.4g: diverged; left out of the average and reset to it",
					r, losses[r], window, factor, med)})
			healthy[r], losses[r] = false, math.NaN()
		}
	}
	return events
}

func median(x []float64) float64 {
	if len(x) == 0 {
		return math.NaN()
	}
	s := slices.Clone(x)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// isLR reports whether a hyperparameter is a learning rate ("lr",
// "lr/hidden"): a rollback halves those.
func isLR(name string) bool { return name == "lr" || strings.HasPrefix(name, "lr/") }

// scaleLR multiplies the learning-rate bases of a decoded plan by s (0.5 per
// rollback so far). Only this rank's copy changes: the explorers keep
// planning and observing in their own, unscaled terms, so the applied
// learning rate is the explorer's times s, and so are the values and bases
// metrics.jsonl records. Values stay clamped to the explorer's bounds.
func scaleLR(p *hparam.Plan, s float64) {
	if s == 1 {
		return
	}
	for i := range p.Params {
		if pp := &p.Params[i]; isLR(pp.Name) {
			for j := range pp.Base {
				pp.Base[j] *= s
			}
		}
	}
}

// scaleNextLR applies scaleLR's factor to a record's next learning-rate
// bases (the explorers' feedback), so the record's numbers are all applied
// values.
func scaleNextLR(rec *metrics.Record, s float64) {
	for name, b := range rec.NextBase {
		if isLR(name) {
			rec.NextBase[name] = b * metrics.Float(s)
		}
	}
}

// ErrNoCheckpoint: a rollback found no checkpoint to go back to.
var ErrNoCheckpoint = errors.New("no checkpoint to roll back to")

// rollback handles a window where every rank is unhealthy: when rollbacks
// are left, every rank reloads the newest valid checkpoint (rank 0 reads it
// and broadcasts it, as a resume does) and rank 0 restores its controller;
// it returns the step to go on from and any explorer-freeze events.
// Otherwise it returns the error that stops the run.
func (o *Options) rollback(ctx context.Context, window, step, steps, done int) (int, []metrics.Event, error) {
	what := fmt.Errorf("%w in window %d (steps %d-%d): training diverged everywhere", ErrAllUnhealthy, window, step, step+steps)
	if o.CheckpointDir == "" || done >= o.MaxRollbacks {
		return 0, nil, fmt.Errorf("%w in window %d (steps %d-%d): training diverged everywhere after %d rollbacks (train.max_rollbacks %d) with learning rates scaled by %g; the last checkpoint stays valid",
			ErrAllUnhealthy, window, step, step+steps, done, o.MaxRollbacks, math.Pow(0.5, float64(done)))
	}
	rank := o.Comm.Rank()
	var msg []byte
	var why error
	if rank == 0 {
		ck, path, skipped, err := checkpoint.Latest(o.CheckpointDir)
		for _, sk := range skipped {
			o.Log.Warn().Str("path", sk.Path).AnErr("cause", sk.Err).Msg("rollback: skipping a damaged checkpoint")
		}
		if err == nil {
			msg = checkpoint.Encode(ck)
			o.Log.Warn().Str("path", path).Int("step", ck.Step).Msg("rolling back")
		}
		why = err
	}
	msg, err := o.Comm.BcastMessage(msg, 0)
	if err != nil {
		return 0, nil, fmt.Errorf("%w; broadcast of the checkpoint to roll back to: %w", what, err)
	}
	if len(msg) == 0 { // rank 0 found none; it alone knows why
		if why != nil {
			return 0, nil, fmt.Errorf("%w, and there is %w in %s (%w)", what, ErrNoCheckpoint, o.CheckpointDir, why)
		}
		return 0, nil, fmt.Errorf("%w, and there is %w", what, ErrNoCheckpoint)
	}
	ck, err := checkpoint.Decode(msg)
	if err != nil {
		return 0, nil, fmt.Errorf("%w; rollback: %w", what, err)
	}
	buf := o.Replica.SyncBuffer(true)
	if len(ck.Buffer) != len(buf) {
		return 0, nil, fmt.Errorf("%w; rollback: the checkpoint at step %d holds %d values, this replica %d", what, ck.Step, len(ck.Buffer), len(buf))
	}
	copy(buf, ck.Buffer)
	if rank != 0 {
		return ck.Step, nil, nil
	}
	evs, err := o.Controller.LoadState(ctx, ck.Controller)
	if err != nil {
		return 0, nil, fmt.Errorf("%w; rollback: controller state: %w", what, err)
	}
	return ck.Step, frozenEvents(evs), nil
}

func rollbackEvent(window, to, done, max int) metrics.Event {
	return metrics.Event{Kind: metrics.EventRollback, Message: fmt.Sprintf(
		"every rank was unhealthy in window %d: rolled back to the checkpoint at step %d with learning rates scaled by %g (rollback %d of at most %d)",
		window, to, math.Pow(0.5, float64(done)), done, max)}
}

// recordRollback logs the events of a window that ended in a rollback and
// writes its record (rank 0): the window has no converge and no feedback.
func (o *Options) recordRollback(p *hparam.Plan, step int, losses []float64, healthy []bool, events []metrics.Event) {
	for _, e := range events {
		o.Log.Warn().Str("event", e.Kind).Str("param", e.Param).Msg(e.Message)
	}
	if o.Metrics == nil {
		return
	}
	rec := windowRecord(p, nil, losses, healthy, 0, 0, "", nil, events)
	rec.Step = step
	if err := o.Metrics.Write(rec); err != nil {
		o.Log.Warn().Err(err).Msg("metrics.jsonl write failed; training goes on")
	}
}
