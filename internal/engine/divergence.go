package engine

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/internal/checkpoint"
	"github.com/hdet-dev/hdet/internal/metrics"
	"github.com/hdet-dev/hdet/internal/plan"
	"github.com/hdet-dev/hdet/internal/stats"
)

// checkDivergence is gather's last step: it makes unhealthy each replica
// whose window loss, or probe loss (against the factor's square root) when
// the window probed, diverged (markDiverged), and every replica when the
// window blew up everywhere (blownUp) and a rollback is left; why: docs/design.md §6.4.
func (l *loop) checkDivergence(w *window) {
	before := healthyMedian(w.losses, w.healthyRanks)
	f := l.o.DivergenceFactor
	last, lastName, judged, judgedName := l.guard.LastMedian, "the previous window's", before, "median"
	if l.firstOfPass() {
		// A pass's first window (or the first after a resume) has no
		// earlier one: its replicas' loss at its first step stands in, so
		// that replicas which blew up in it are not averaged into every
		// later window. Against that loss only a window whose every
		// replica blew up rolls back: a bracket window's highest replicas
		// may, while the others are sound.
		last, lastName = healthyMedian(w.firsts, w.healthyRanks), "its first step's"
		judged, judgedName = healthyMin(w.losses, w.healthyRanks), "lowest"
	}
	div := markDiverged(l.lay, divergence{w.losses, last, lastName, "window loss", f, "train.divergence_factor"}, w.healthyRanks, w.index)
	if w.plan.Probe {
		pd := markDiverged(l.lay, divergence{w.probes, l.guard.LastProbe, "the previous window's", "probe loss", math.Sqrt(f), "the square root of train.divergence_factor"}, w.healthyRanks, w.index)
		for _, e := range pd {
			w.losses[*e.Rank] = math.NaN()
		}
		div = append(div, pd...)
	}
	w.events = append(w.events, div...)
	w.nHealthy -= len(div)
	// The median before the replicas that diverged were left out: with two
	// of four replicas wrecked, the two left can be wrecked too.
	if ev, ok := blownUp(judged, judgedName, last, lastName, f, w.index); ok && l.canRollBack() {
		clear(w.healthyRanks)
		w.events, w.nHealthy = append(w.events, ev), 0
	} else if w.nHealthy > 0 {
		l.guard.LastMedian = healthyMedian(w.losses, w.healthyRanks)
		if w.plan.Probe {
			l.guard.LastProbe = healthyMedian(w.probes, w.healthyRanks)
		}
	}
}

// divergence is what markDiverged checks: one loss per replica, the
// previous window's healthy median of the same loss (0: none; for the
// window loss of a pass's first window, the median of its first
// steps' losses) and its name, the loss's name for messages, and the
// factor with the rule it comes from.
type divergence struct {
	losses   []float64
	last     float64
	lastName string
	what     string
	factor   float64
	rule     string
}

// markDiverged makes unhealthy every healthy replica whose finite loss is
// above d.factor times the lower of the healthy replicas' median and d.last
// (but not below the best replica's loss: when every replica blew up, that
// is blownUp's to judge), sets its loss to NaN as for a NaN replica, and
// returns one event per such replica, naming it and its ranks as lay lays
// them out; why the previous window's median too: docs/design.md §6.4.
// healthy is per replica. Every rank runs it on the same gathered losses,
// so all reach the same verdict. d.factor 0, or a reference <= 0 (a loss
// that is not a positive cross-entropy), disables it.
func markDiverged(lay Layout, d divergence, healthy []bool, window int) []metrics.Event {
	if d.factor == 0 {
		return nil
	}
	ref := healthyMedian(d.losses, healthy)
	if d.last > 0 && d.last < ref {
		ref = max(d.last, healthyMin(d.losses, healthy)) // the best replica never diverged
	}
	if !(ref > 0) {
		return nil
	}
	var events []metrics.Event
	for r, h := range healthy {
		if h && d.losses[r] > d.factor*ref {
			rr := r
			events = append(events, metrics.Event{Kind: metrics.EventUnhealthy, Rank: &rr,
				Message: fmt.Sprintf("%s's %s %.4g in window %d is over %s (%.4g) times %.4g (the healthy %s' median; %s when lower, but not below the best one's): diverged; left out of the average and reset to it",
					lay.Name(r), d.what, d.losses[r], window, d.rule, d.factor, ref, lay.unit(), d.lastName)})
			healthy[r], d.losses[r] = false, math.NaN()
		}
	}
	return events
}

// healthyMin is the lowest of the healthy replicas' losses (+Inf for none).
func healthyMin(losses []float64, healthy []bool) float64 {
	m := math.Inf(1)
	for r, h := range healthy {
		if h {
			m = min(m, losses[r])
		}
	}
	return m
}

// healthyMedian is the median of the healthy replicas' losses (NaN for none).
func healthyMedian(losses []float64, healthy []bool) float64 {
	var ok []float64
	for r, h := range healthy {
		if h {
			ok = append(ok, losses[r])
		}
	}
	return stats.Median(ok)
}

// blownUp reports a window whose healthy median loss med (medName: in a
// process's first window the lowest) is over factor times last, named
// lastName (the previous window's median, or in a pass's first window
// its first steps'): every replica blew up together (a
// learning rate too high for all of them), which the per-window check
// cannot see because the median rose with them. Averaging such replicas
// wrecks the model, so the window is treated as diverged everywhere and
// rolls back. factor 0, or no reference (last <= 0), disables it.
func blownUp(med float64, medName string, last float64, lastName string, factor float64, window int) (metrics.Event, bool) {
	if factor == 0 || !(last > 0) || !(med > factor*last) {
		return metrics.Event{}, false
	}
	return metrics.Event{Kind: metrics.EventUnhealthy, Message: fmt.Sprintf(
		"the replicas' %s window loss %.4g in window %d is over train.divergence_factor (%g) times %s %.4g: training blew up everywhere",
		medName, med, window, factor, lastName, last)}, true
}

// scaleLR multiplies the learning-rate bases of a decoded plan by s (0.5 per
// rollback so far). Only this rank's copy changes: the explorers keep
// planning and observing in their own, unscaled terms, so the applied
// learning rate is the explorer's times s, and so are the values and bases
// metrics.jsonl records. Values stay clamped to the explorer's bounds.
func scaleLR(p *plan.Plan, s float64) {
	if s == 1 {
		return
	}
	for i := range p.Params {
		if pp := &p.Params[i]; hparam.IsLR(pp.Name) {
			for j := range pp.Base {
				pp.Base[j] *= s
			}
		}
	}
}

// scaleNextLR applies scaleLR's factor to a record's next learning-rate
// bases (the explorers' feedback), so the record's numbers are all applied
// values.
func scaleNextLR(rec *metrics.WindowRecord, s float64) {
	for name, b := range rec.NextBase {
		if hparam.IsLR(name) {
			rec.NextBase[name] = b * metrics.Float(s)
		}
	}
}

// ErrNoCheckpoint: a rollback found no checkpoint to go back to.
var ErrNoCheckpoint = errors.New("no checkpoint to roll back to")

// rollback is the phase of a window where every rank is unhealthy: when
// rollbacks are left, every rank reloads the newest valid checkpoint (the
// same routine as a resume), the window is recorded with its events, and
// the loop goes on from the checkpoint's step with the learning rates
// halved once more. Otherwise it returns the error that stops the run.
func (l *loop) rollback(ctx context.Context, w *window) (int, error) {
	l.watch.Enter(w.index, w.end(), PhaseRollback)
	what := fmt.Errorf("%w in window %d (steps %d-%d): training diverged everywhere", ErrAllUnhealthy, w.index, w.start, w.end())
	if !l.canRollBack() {
		if l.o.CheckpointDir == "" {
			return 0, fmt.Errorf("%w, and this run does not roll back (no checkpoint holds its training state: a worker script keeps its own); lower the learning rate", what)
		}
		return 0, fmt.Errorf("%w after %d rollbacks (train.max_rollbacks %d) with learning rates scaled by %g; the last checkpoint stays valid",
			what, l.guard.Rollbacks, l.o.MaxRollbacks, w.lrScale)
	}
	got, evs, err := Restore(ctx, RestoreOptions{Comm: l.o.Comm, Dir: l.o.CheckpointDir, Replica: l.o.Replica, Controller: l.o.Controller, Log: l.o.Log})
	if errors.Is(err, checkpoint.ErrNone) {
		return 0, fmt.Errorf("%w, and there is %w (%w)", what, ErrNoCheckpoint, err)
	}
	if err != nil {
		return 0, fmt.Errorf("%w; rollback: %w", what, err)
	}
	if got.State.Pass != l.pass { // the main pass's step-0 checkpoint failed to write
		return 0, fmt.Errorf("%w; rollback: the newest checkpoint (%s) is of the search pass, and the main pass has none", what, got.Path)
	}
	l.guard.Rollbacks++
	to := got.State.Step
	if l.rank == 0 {
		l.o.Log.Warn().Str("path", got.Path).Int("step", to).Msg("rolling back")
		w.events = append(append(w.events, frozenEvents(evs)...), rollbackEvent(w.index, to, l.guard.Rollbacks, l.o.MaxRollbacks))
		rec := windowRecord(&w.plan, nil, w.losses, w.healthyRanks, 0, 0, "", nil, w.events)
		rec.Step = w.end()
		l.recordWindow(rec) // the window has no converge and no feedback
	}
	return to, nil
}

// canRollBack reports whether a rollback is left: a checkpoint directory
// to go back to and fewer than train.max_rollbacks done.
func (l *loop) canRollBack() bool {
	return l.o.CheckpointDir != "" && l.guard.Rollbacks < l.o.MaxRollbacks
}

func rollbackEvent(window, to, done, max int) metrics.Event {
	return metrics.Event{Kind: metrics.EventRollback, Message: fmt.Sprintf(
		"every rank was unhealthy in window %d: rolled back to the checkpoint at step %d with learning rates scaled by %g (rollback %d of at most %d)",
		window, to, math.Pow(0.5, float64(done)), done, max)}
}

// firstOfPass reports whether the window about to be judged is a pass's
// first (or the first after a resume): it has no previous window's median.
func (l *loop) firstOfPass() bool { return !(l.guard.LastMedian > 0) }
