package engine

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/rs/zerolog"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/internal/checkpoint"
	"github.com/hdet-dev/hdet/internal/metrics"
	"github.com/hdet-dev/hdet/internal/plan"
	"github.com/hdet-dev/hdet/mpi/reduce"
)

// loop is one rank's window loop. Each window goes through the phases
// below in order; a window where every rank is unhealthy leaves through
// rollback (divergence.go) instead of converge.
type loop struct {
	o        Options
	rank, n  int    // world rank and size
	lay      Layout // how the world divides into replicas
	rep      int    // this rank's replica
	grads    GradReducer
	conv     Converger
	buf      []float32 // the sync buffer converge all-reduces
	params   []float32 // its parameters
	accepted map[string]bool
	watch    Watch
	pass     int // plan.PassSearch, or PassMain once the explorers committed
	// warnedSameBatches: the same-data warning is given once a run.
	warnedSameBatches bool
	// guard is the rollbacks so far and the healthy replicas' median
	// window and probe losses of the last converged window (of the last
	// that probed; 0 before a pass's first), which checkpoints carry so a
	// resumed run judges its next window as the run left alone would.
	guard   checkpoint.Guard
	pending []metrics.Event // rank 0: events for the next window record
	res     Result
}

// window is what one window's phases hand each other.
type window struct {
	index, start, steps int
	plan                plan.Plan
	lrScale             float64
	values              Values
	events              []metrics.Event

	loss, probe  float64 // this rank's
	level        float64 // this rank's replica's own learning rate at the window's end (WindowResult.Level)
	first        float64 // this rank's first step's loss
	healthy      bool    // this rank's, before the gathered verdict
	losses       []float64
	probes       []float64
	firsts       []float64 // per replica, its first step's loss; only where checkDivergence needs it
	healthyRanks []bool
	nHealthy     int
	identical    bool      // every rank holds the same parameters: the mean is theirs
	sqs          []float64 // per replica, its parameters' squared norm before the converge
	drift        float64   // relDrift at the converge (replica 0's ranks only)
	stop         bool      // some rank asked to stop

	planSeconds, fanout, converge float64
	probeSeconds                  float64 // this rank's, inside fanout
	tGather                       time.Time
	sum                           string
	eval                          *metrics.Eval
	allreduce, evalSeconds        float64 // the gradient allreduces inside fanout, the evaluation
	gatherSeconds                 float64
	handover                      map[string]float64 // a worker's, by phase (WindowResult.Handover)
}

func (w *window) end() int { return w.start + w.steps }

func newLoop(o Options) (*loop, error) {
	if _, err := ParseSyncMode(string(o.Sync)); err != nil {
		return nil, err
	}
	l := &loop{o: o, rank: o.Comm.Rank(), n: o.Comm.Size(), conv: o.Converge, watch: watchOrNop(o.Watch),
		accepted: map[string]bool{}, pending: frozenEvents(o.Events), lay: groupOf(o), pass: o.StartPass,
		guard: o.StartGuard}
	if err := checkGroups(o, l.lay); err != nil {
		return nil, err
	}
	if _, ok := As[Unrestorable](o.Replica); ok {
		l.o.CheckpointDir = "" // no checkpoint holds its state: no rollback
	}
	l.rep = l.lay.Replica(l.rank)
	cross := o.Comm
	switch {
	case o.Sync == SyncGradients: // the paper's: every rank's gradients, every step
		l.grads = &reducer{comm: o.Comm, one: make([]float32, 1)}
	case l.lay.Size > 1: // local: data parallelism inside the replica only
		l.grads = &reducer{comm: o.Groups.Replica, one: make([]float32, 1)}
	}
	if l.lay.Size > 1 {
		cross = o.Groups.Cross
	}
	if l.conv == nil {
		l.conv = hostConverge{cross}
	}
	l.buf = o.Replica.SyncBuffer(o.Sync == SyncLocal)
	l.params = l.buf[:o.Replica.ParamCount()]
	for _, h := range o.Replica.Hyperparameters() {
		l.accepted[h] = true
	}
	return l, nil
}

func (l *loop) run(ctx context.Context) (Result, error) {
	start := time.Now()
	if l.o.StartStep == 0 && l.o.Checkpoint != nil && l.canRollBack() {
		l.watch.Enter(0, 0, PhaseCheckpoint)
		l.o.Checkpoint.AtStart(ctx, l.pass, l.guard)
	}
	for step := l.o.StartStep; step < l.o.Steps; {
		next, err := l.window(ctx, step)
		if err != nil {
			return l.res, err
		}
		step = next
	}
	if l.o.Progress != nil && l.rank == 0 {
		l.o.Progress.Done()
	}
	l.res.Pass, l.res.Steps = l.pass, l.o.Steps
	l.res.Checksum, l.res.LRScale = Checksum(l.params), math.Pow(0.5, float64(l.guard.Rollbacks))
	l.o.Log.Info().Dur("wall_ms", time.Since(start)).Str("checksum", l.res.Checksum).Msg("run finished")
	return l.res, nil
}

// window runs the window starting at step and returns the step to go on
// from: its end, or a checkpoint's step after a rollback.
func (l *loop) window(ctx context.Context, step int) (int, error) {
	w, err := l.plan(ctx, step)
	if err != nil {
		return 0, err
	}
	if err := l.fanOut(ctx, w); err != nil {
		return 0, err
	}
	if err := l.gather(w); err != nil {
		return 0, err
	}
	if w.nHealthy == 0 {
		return l.rollback(ctx, w)
	}
	for _, phase := range []func(context.Context, *window) error{l.converge, l.evaluate, l.observe, l.checkpoint} {
		if err := phase(ctx, w); err != nil {
			return 0, err
		}
	}
	if w.stop && w.end() < l.o.Steps {
		l.res.Pass, l.res.Steps = l.pass, w.end()
		return 0, ErrStopped
	}
	return w.end(), nil
}

// plan: rank 0's controller decides, every rank receives the same bytes and
// turns them into this rank's values.
func (l *loop) plan(ctx context.Context, step int) (*window, error) {
	t := l.windowSteps()
	w := &window{index: step / t, start: step, steps: min(t, l.o.Steps-step)}
	l.watch.Enter(w.index, step, PhasePlan)
	began := time.Now()
	var msg []byte
	if l.rank == 0 {
		p, evs, err := l.o.Controller.Plan(ctx)
		if err != nil {
			return nil, fmt.Errorf("plan window %d: %w", w.index, err)
		}
		w.events = append(l.pending, frozenEvents(evs)...)
		l.pending = nil
		for _, n := range l.o.Controller.Notices() {
			l.o.Log.Warn().Int("window", w.index).Msg(n)
		}
		if msg, err = p.MarshalBinary(); err != nil {
			return nil, fmt.Errorf("encode plan of window %d: %w", w.index, err)
		}
	}
	msg, err := l.o.Comm.BcastMessage(msg, 0)
	if err != nil {
		return nil, fmt.Errorf("broadcast plan of window %d: %w", w.index, err)
	}
	if err := w.plan.UnmarshalBinary(msg); err != nil {
		return nil, fmt.Errorf("decode plan of window %d: %w", w.index, err)
	}
	if w.plan.Pass != l.pass {
		if err := l.restart(ctx, w); err != nil {
			return nil, err
		}
	}
	if w.plan.Start != w.start || w.plan.Steps != w.steps {
		return nil, fmt.Errorf("plan of window %d covers steps [%d, %d), want [%d, %d)", w.index, w.plan.Start, w.plan.Start+w.plan.Steps, w.start, w.end())
	}
	w.lrScale = math.Pow(0.5, float64(l.guard.Rollbacks))
	scaleLR(&w.plan, w.lrScale)
	w.values = Values{}
	for i := range w.plan.Params {
		pp := &w.plan.Params[i]
		if !l.accepted[pp.Name] {
			return nil, fmt.Errorf("the workload does not accept hyperparameter %q", pp.Name)
		}
		w.values[pp.Name] = pp.RankValues(l.rep)
	}
	if w.plan.Anneal {
		annealLR(&w.plan, w.values)
	}
	w.planSeconds = time.Since(began).Seconds()
	return w, nil
}

// windowSteps is the window of the pass in force: T, or the main pass's
// (Options.MainWindow).
func (l *loop) windowSteps() int {
	if l.pass == plan.PassMain && l.o.MainWindow > 0 {
		return l.o.MainWindow
	}
	return l.o.Window
}

// cadence is the index, in T-step windows, of the one w ends in: what the
// evaluation and checkpoint cadences (every so many windows) count, in a
// main pass with longer windows as in the search pass.
func (l *loop) cadence(w *window) int { return (w.end()+l.o.Window-1)/l.o.Window - 1 }

// restart begins the main pass when the plan is its first (docs/design.md
// §1.2): every rank restores its step-0 state, the divergence
// guards start afresh, and the main pass gets a step-0 checkpoint of its
// own to roll back to.
func (l *loop) restart(ctx context.Context, w *window) error {
	if w.plan.Pass != plan.PassMain || l.pass != plan.PassSearch || w.plan.Start != 0 {
		return fmt.Errorf("plan of window %d is for pass %d from step %d, but the run is in pass %d at step %d", w.plan.Window, w.plan.Pass, w.plan.Start, l.pass, w.start)
	}
	l.watch.Enter(0, 0, PhaseRestart)
	if l.o.Restart == nil {
		return fmt.Errorf("the explorers committed, but this workload cannot restore its step-0 state for the main pass")
	}
	if err := l.o.Restart(ctx); err != nil {
		return fmt.Errorf("restoring the step-0 state for the main pass: %w", err)
	}
	l.buf = l.o.Replica.SyncBuffer(l.o.Sync == SyncLocal)
	l.params = l.buf[:l.o.Replica.ParamCount()]
	// The rollbacks' halving stays: the search found its rate at that scale.
	l.pass, l.guard.LastMedian, l.guard.LastProbe = plan.PassMain, 0, 0
	w.index, w.start, w.steps = 0, 0, min(l.windowSteps(), l.o.Steps)
	l.o.Log.Info().Msg("search pass over: the main pass trains from step 0 at the committed values, without spread")
	if l.o.Checkpoint != nil && l.canRollBack() {
		l.watch.Enter(0, 0, PhaseCheckpoint)
		l.o.Checkpoint.AtStart(ctx, l.pass, l.guard)
	}
	return nil
}

// spreads reports whether the plan gives the replicas different values.
func spreads(p *plan.Plan) bool {
	for _, pp := range p.Params {
		if !pp.Frozen && pp.Spread.Alpha > 0 {
			return true
		}
	}
	return false
}

// fanOut trains this rank's replica for the window.
func (l *loop) fanOut(ctx context.Context, w *window) error {
	l.watch.Enter(w.index, w.start, PhaseTrain)
	t := time.Now()
	tail := 0
	if w.plan.Probe {
		tail = max(1, w.steps/2) // docs/design.md §1: the average of the window's last T/2 iterates
	}
	wr, err := l.o.Replica.TrainWindow(ctx, Window{Start: w.start, Steps: w.steps, V: w.values, Grads: l.grads, ProbeTail: tail, Search: w.plan.Search})
	if err != nil {
		return fmt.Errorf("rank %d, window %d: %w", l.rank, w.index, err)
	}
	w.fanout, w.probeSeconds, w.handover = time.Since(t).Seconds(), wr.ProbeSeconds, wr.Handover
	w.loss, w.probe, w.level = mean(wr.Losses), wr.Probe, wr.Level
	if w.plan.Anneal {
		w.loss = annealedLoss(wr.Losses)
	}
	if len(wr.Losses) > 0 {
		w.first = wr.Losses[0]
	}
	w.healthy = !math.IsNaN(w.loss) && !math.IsInf(w.loss, 0) && finite32(l.buf)
	return nil
}

// gather shares every rank's loss, probe, health and stop request, and
// reaches the same health verdict on every rank; with replica groups, per
// replica (its ranks' mean loss and probe; healthy when all its ranks are).
func (l *loop) gather(w *window) error {
	l.watch.Enter(w.index, w.end(), PhaseGather)
	w.tGather = time.Now()
	if r, ok := l.grads.(*reducer); ok {
		w.allreduce = r.taken().Seconds()
	}
	mine := rankReport{loss: w.loss, first: w.first, probe: w.probe, healthy: w.healthy, stop: l.o.Stop != nil && l.o.Stop()}
	if l.o.Sync == SyncGradients && w.healthy {
		mine.print = fingerprint(l.params)
	}
	mine.sq = sqNorm(l.owned(l.buf))
	// Send and receive buffers must not overlap (MPI forbids it): with
	// them aliased, a rank could send or keep another's report as its own.
	send, flat := make([]float64, reportLen), make([]float64, reportLen*l.n)
	mine.pack(send)
	if err := l.o.Comm.AllgatherFloat64(send, flat); err != nil {
		return fmt.Errorf("gather window losses: %w", err)
	}
	all := make([]rankReport, l.n)
	for r := range all {
		all[r] = unpackReport(flat[reportLen*r:])
	}
	w.identical = identical(all)
	reps := perReplica(all, l.lay.Size)
	if err := trainedAlike(w.index, spreads(&w.plan), reps); err != nil {
		return err
	}
	if l.o.Sync == SyncLocal && !l.warnedSameBatches && l.checksData(w) && sameBatches(reps) {
		l.warnedSameBatches = true
		w.events = append(w.events, metrics.Event{Kind: metrics.EventSameData,
			Message: fmt.Sprintf("every replica's first step of window %d had the same loss to the last bit: they train on the same batches, so the average is one replica's training; give each its own data (%s)", w.index, sameDataAdvice(l.lay.Size))})
	}
	n := len(reps)
	w.losses, w.probes, w.healthyRanks, w.sqs = make([]float64, n), make([]float64, n), make([]bool, n), make([]float64, n)
	if l.firstOfPass() { // only a pass's first window checks against its first steps
		w.firsts = make([]float64, n)
	}
	for r, rep := range reps {
		w.losses[r], w.probes[r], w.healthyRanks[r], w.sqs[r] = rep.loss, rep.probe, rep.healthy, rep.sq
		if w.firsts != nil {
			w.firsts[r] = rep.first
		}
		w.stop = w.stop || rep.stop
		if rep.healthy {
			w.nHealthy++
			continue
		}
		w.losses[r], w.probes[r] = math.NaN(), math.NaN() // a rank with bad parameters has no usable loss
		rr := r
		w.events = append(w.events, metrics.Event{Kind: metrics.EventUnhealthy, Rank: &rr,
			Message: fmt.Sprintf("%s had a non-finite loss or parameters in window %d; left out of the average and reset to it", l.lay.Name(r), w.index)})
	}
	l.checkDivergence(w)
	w.gatherSeconds = time.Since(w.tGather).Seconds()
	return nil
}

// converge: the healthy ranks' mean, received by every rank. Where every
// rank already holds the same parameters (gradients mode without a
// spread: plain data parallelism, a main pass) the mean is theirs, so the
// allreduce, and the rounding its sum would add, is skipped.
func (l *loop) converge(_ context.Context, w *window) error {
	healthy, before := w.healthyRanks[l.rep], l.replicaChecksum()
	l.watch.Enter(w.index, w.end(), PhaseConverge)
	if !w.identical {
		if err := l.average(w, healthy); err != nil {
			return err
		}
	}
	w.converge = time.Since(w.tGather).Seconds()
	// The checksum goes into rank 0's metrics and the debug log: the other
	// ranks hash 1 MB per window only when debugging.
	if l.rank == 0 || l.o.Log.GetLevel() <= zerolog.DebugLevel {
		w.sum = Checksum(l.params)
	}
	e := l.o.Log.Debug().Int("window", w.index).Int("step", w.end()).Str("checksum", w.sum).Float64("loss", w.loss).
		Bool("healthy", healthy).Any("values_last", lastOf(w.values))
	if before != "" {
		e = e.Str("replica_checksum", before)
	}
	if w.handover != nil {
		e = e.Any("handover_seconds", w.handover)
	}
	e.Float64("gather_seconds", w.gatherSeconds).Float64("converge_seconds", w.converge).Msg("converged")
	return nil
}

// average replaces the sync buffer with the healthy ranks' mean.
func (l *loop) average(w *window, healthy bool) error {
	if !healthy {
		clear(l.buf)
	}
	sum := l.conv.AllreduceSum
	if l.lay.Size > 1 {
		sum = l.sumGrouped
	}
	if err := sum(l.buf); err != nil {
		return fmt.Errorf("converge allreduce of window %d: %w", w.index, err)
	}
	if err := l.measureDrift(w); err != nil {
		return err
	}
	inv := 1 / float32(w.nHealthy)
	for i := range l.buf {
		l.buf[i] *= inv
	}
	return nil
}

// measureDrift sets w.drift on replica 0's ranks (rank 0 records it) from
// the gathered squared norms and the sum the converge left in the buffer
// (its squared norm taken before the 1/n scaling, which would round it):
// with replica groups, the replica's ranks add up their parts of it, one
// float64 on the replica's own communicator.
func (l *loop) measureDrift(w *window) error {
	if l.rep != 0 {
		return nil
	}
	part := []float64{sqNorm(l.owned(l.buf))}
	if l.lay.Size > 1 {
		if err := l.o.Groups.Replica.AllreduceFloat64(part, reduce.Sum); err != nil {
			return fmt.Errorf("drift of window %d, inside replica 0: %w", w.index, err)
		}
	}
	w.drift = relDrift(w.sqs, w.healthyRanks, part[0])
	return nil
}

// evaluate measures the test set after the last window and every EvalEvery
// windows.
func (l *loop) evaluate(ctx context.Context, w *window) error {
	if w.end() != l.o.Steps && (l.o.EvalEvery <= 0 || (l.cadence(w)+1)%l.o.EvalEvery != 0) {
		return nil
	}
	l.watch.Enter(w.index, w.end(), PhaseEvaluate)
	t := time.Now()
	loss, acc, err := evaluate(ctx, l.o.Comm, l.o.Replica)
	if err != nil {
		return fmt.Errorf("evaluate after window %d: %w", w.index, err)
	}
	w.evalSeconds = time.Since(t).Seconds()
	w.eval = &metrics.Eval{Loss: metrics.Float(loss), Accuracy: metrics.Float(acc)}
	l.res.TestLoss, l.res.TestAccuracy = loss, acc
	return nil
}

// observe (rank 0) hands the window's losses to the controller and records
// the window.
func (l *loop) observe(ctx context.Context, w *window) error {
	if l.rank != 0 {
		return nil
	}
	l.watch.Enter(w.index, w.end(), PhaseObserve)
	probes := windowProbes(w.plan.Probe, w.probes, w.healthyRanks)
	fb, evs, err := l.o.Controller.Observe(ctx, w.losses, probes, w.level)
	if err != nil {
		return fmt.Errorf("observe window %d: %w", w.index, err)
	}
	w.events = append(w.events, frozenEvents(evs)...)
	rec := windowRecord(&w.plan, fb, w.losses, w.healthyRanks, w.fanout, w.converge, w.sum, w.eval, w.events)
	rec.Step, rec.PlanSeconds, rec.ProbeSeconds = w.end(), w.planSeconds, w.probeSeconds
	if w.plan.Probe {
		rec.Probe = floats(probes)
	}
	rec.AllreduceSeconds, rec.EvalSeconds = w.allreduce, w.evalSeconds
	rec.GatherSeconds, rec.HandoverSeconds = w.gatherSeconds, w.handover
	drift := metrics.Float(w.drift)
	rec.Drift = &drift
	scaleNextLR(&rec, w.lrScale)
	l.recordWindow(rec)
	if l.o.Progress != nil {
		l.o.Progress.Update(w.plan.Pass, w.end(), l.o.Steps, meanHealthy(w.losses), plan.BaseLR(&w.plan))
	}
	if w.plan.Pass == plan.PassSearch && l.o.Controller.Pass() == plan.PassMain {
		l.recordCommit(w.end(), w.lrScale)
	}
	return nil
}

// recordCommit (rank 0) logs and records the values the explorers
// committed when the search pass ended at step end; learning rates carry
// the rollbacks' halving lrScale, which the main pass keeps applying.
func (l *loop) recordCommit(end int, lrScale float64) {
	rec := metrics.CommitRecord{Time: now(), Step: end, Committed: map[string]metrics.Commit{}}
	e := l.o.Log.Info().Int("search_steps", end)
	for _, c := range l.o.Controller.Commitments() {
		c = ScaleCommit(c, lrScale)
		cm := metrics.Commit{Offset: metrics.Float(c.Offset), Value: metrics.Float(c.Value), Frozen: c.Frozen}
		e = e.Float64(c.Name, c.Value)
		if peak := l.scriptPeakLR(); hparam.IsLR(c.Name) && peak > 0 {
			cm.ScriptPeakLR, cm.PeakLR = metrics.Float(peak), metrics.Float(peak*c.Value)
			e = e.Str(c.Name+"_peak", fmt.Sprintf("%.3g -> %.3g", peak, peak*c.Value))
		}
		rec.Committed[c.Name] = cm
	}
	e.Msg("committed")
	l.record(rec)
}

func (l *loop) scriptPeakLR() float64 {
	p, ok := As[PeakLR](l.o.Replica)
	if !ok {
		return 0
	}
	return p.PeakLR()
}

// recordWindow logs a window record's events and writes it (rank 0).
func (l *loop) recordWindow(rec metrics.WindowRecord) {
	for _, e := range rec.Events {
		l.o.Log.Warn().Str("event", e.Kind).Str("param", e.Param).Msg(e.Message)
	}
	l.record(rec)
}

// record writes a record (rank 0); a write failure only warns.
func (l *loop) record(rec metrics.Record) {
	if l.o.Metrics == nil {
		return
	}
	if err := l.o.Metrics.Write(rec); err != nil {
		l.o.Log.Warn().Err(err).Msg("metrics.jsonl write failed; training goes on")
	}
}

// checkpoint writes one when due, and always at the end or on a stop.
func (l *loop) checkpoint(ctx context.Context, w *window) error {
	if l.o.Checkpoint == nil {
		return nil
	}
	l.watch.Enter(w.index, w.end(), PhaseCheckpoint)
	return l.o.Checkpoint.AfterConverge(ctx, l.pass, l.cadence(w), w.end(), l.guard, w.stop || w.end() == l.o.Steps)
}
