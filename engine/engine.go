package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"time"
	"unsafe"

	"github.com/rs/zerolog"

	"github.com/hdet-dev/hdet/device"
	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/metrics"
	"github.com/hdet-dev/hdet/mpi"
)

// Comm is the part of an MPI communicator the engine uses; *mpi.Comm has it.
type Comm interface {
	Rank() int
	Size() int
	AllreduceFloat32(buf []float32, op mpi.Op) error
	AllreducePtr(ptr unsafe.Pointer, n int, dt mpi.Datatype, op mpi.Op) error
	AllreduceFloat64(buf []float64, op mpi.Op) error
	AllgatherFloat64(send, recv []float64) error
	BcastMessage(msg []byte, root int) ([]byte, error)
}

// Sync modes (DESIGN §1).
const (
	SyncGradients = "gradients" // gradients all-reduced every step, per-rank step sizes
	SyncLocal     = "local"     // no communication inside a window; optimizer state averaged too
)

// ErrAllUnhealthy stops a run whose every rank diverged in the same window.
var ErrAllUnhealthy = errors.New("every rank is unhealthy")

// Progress shows rank 0's progress once per window.
type Progress interface {
	Update(step, total int, loss, baseLR float64)
	Done()
}

// Checkpointer writes a checkpoint after a converge, when due. The engine
// calls it on every rank; implementations write from rank 0 only.
type Checkpointer interface {
	AfterConverge(ctx context.Context, window, step int, force bool) error
}

// Fault injects test-only failures; a nil FaultAt is off, so the zero
// Fault injects nothing.
type Fault struct {
	NaN *FaultAt // Rank's window loss is NaN from Window on
	// NaNAll: every rank's loss is NaN in Window (Rank is ignored), before
	// any rollback, so the window re-run after the rollback is clean.
	NaNAll *FaultAt
	// Stop: Rank stops itself (SIGSTOP) when it starts training Window, as
	// a hung node would.
	Stop    *FaultAt
	Diverge *FaultAt // Rank's loss is 1000 times larger (still finite) from Window on
}

// FaultAt places a fault.
type FaultAt struct{ Rank, Window int }

func (f *FaultAt) at(rank, window int) bool { return f != nil && f.Rank == rank && f.Window == window }
func (f *FaultAt) from(rank, window int) bool {
	return f != nil && f.Rank == rank && window >= f.Window
}

// Options configure a run of the window loop.
type Options struct {
	Comm       Comm
	Replica    Replica
	Controller *hparam.Controller // rank 0 only; nil elsewhere
	Steps      int                // S
	Window     int                // T
	Sync       string
	EvalEvery  int             // windows between evaluations; 0: at the end only
	StartStep  int             // > 0 when resuming
	Metrics    *metrics.Writer // rank 0 only
	Progress   Progress        // rank 0 only; may be nil
	Checkpoint Checkpointer    // may be nil
	// Converge all-reduces the sync buffer; nil means MPI on the host slice.
	Converge device.Allreducer
	// Stop is polled at each converge; when any rank's Stop returns true the
	// ranks checkpoint together and Run returns ErrStopped.
	Stop  func() bool
	Fault Fault
	Log   zerolog.Logger
	// Watch is told of every phase of the loop (the watchdog); may be nil.
	Watch Watch
	// DivergenceFactor: a rank whose finite window loss exceeds this many
	// times the healthy ranks' median is unhealthy; 0 disables it.
	DivergenceFactor float64
	// A window where every rank is unhealthy rolls back to the newest
	// checkpoint in CheckpointDir (read by rank 0) with the learning rates
	// halved, at most MaxRollbacks times; CheckpointDir "" disables it.
	MaxRollbacks  int
	CheckpointDir string
}

// ErrStopped: the run was asked to stop (a signal) and checkpointed.
var ErrStopped = errors.New("run stopped by a signal after checkpointing")

// Result summarises a finished run.
type Result struct {
	Steps        int
	TestLoss     float64
	TestAccuracy float64
	Checksum     string
}

// reducer averages gradients across ranks in `gradients` mode.
type reducer struct {
	comm Comm
	inv  float32
}

func (r reducer) AllreduceMean(g []float32) error {
	// A non-finite gradient would poison every rank: this rank contributes
	// zeros instead, and its window is flagged unhealthy by its loss.
	if !finite32(g) {
		clear(g)
	}
	if err := r.comm.AllreduceFloat32(g, mpi.Sum); err != nil {
		return fmt.Errorf("gradient allreduce: %w", err)
	}
	for i := range g {
		g[i] *= r.inv
	}
	return nil
}

func finite32(b []float32) bool {
	for _, v := range b {
		f := float64(v)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return false
		}
	}
	return true
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

// Run executes the HDET window loop on every rank: plan (broadcast from rank
// 0), fan-out for T steps, converge (one fused in-place allreduce over the
// healthy ranks), observe (rank 0). The last window ends at step S, so every
// rank finishes with the same parameters.
func Run(ctx context.Context, o Options) (Result, error) {
	c, rank, n := o.Comm, o.Comm.Rank(), o.Comm.Size()
	var grads GradReducer
	if o.Sync == SyncGradients {
		grads = reducer{comm: c, inv: 1 / float32(n)}
	}
	conv := o.Converge
	if conv == nil {
		var err error
		if conv, err = device.NewAllreducer(device.PathHost, c, nil); err != nil {
			return Result{}, err
		}
	}
	buf := o.Replica.SyncBuffer(o.Sync == SyncLocal)
	params := buf[:o.Replica.ParamCount()]
	accepted := map[string]bool{}
	for _, h := range o.Replica.Hyperparameters() {
		accepted[h] = true
	}
	gather := make([]float64, 3*n)
	start := time.Now()
	var res Result
	watch := watchOrNop(o.Watch)
	rollbacks := 0
	for step := o.StartStep; step < o.Steps; {
		window := step / o.Window
		steps := min(o.Window, o.Steps-step)

		// Plan: rank 0 decides, everyone receives the same bytes.
		watch.Enter(window, step, PhasePlan)
		tPlan := time.Now()
		var msg []byte
		var planEvents []metrics.Event
		if rank == 0 {
			plan, evs, err := o.Controller.Plan(ctx)
			if err != nil {
				return res, fmt.Errorf("plan window %d: %w", window, err)
			}
			planEvents = frozenEvents(evs)
			if msg, err = plan.MarshalBinary(); err != nil {
				return res, fmt.Errorf("encode plan of window %d: %w", window, err)
			}
		}
		msg, err := c.BcastMessage(msg, 0)
		if err != nil {
			return res, fmt.Errorf("broadcast plan of window %d: %w", window, err)
		}
		var plan hparam.Plan
		if err := plan.UnmarshalBinary(msg); err != nil {
			return res, fmt.Errorf("decode plan of window %d: %w", window, err)
		}
		if plan.Start != step || plan.Steps != steps {
			return res, fmt.Errorf("plan of window %d covers steps [%d, %d), want [%d, %d)", window, plan.Start, plan.Start+plan.Steps, step, step+steps)
		}
		lrScale := math.Pow(0.5, float64(rollbacks))
		scaleLR(&plan, lrScale)
		values := Values{}
		for i := range plan.Params {
			pp := &plan.Params[i]
			if !accepted[pp.Name] {
				return res, fmt.Errorf("the workload does not accept hyperparameter %q", pp.Name)
			}
			values[pp.Name] = pp.RankValues(rank)
		}

		planSeconds := time.Since(tPlan).Seconds()

		// Fan-out.
		watch.Enter(window, step, PhaseTrain)
		if o.Fault.Stop.at(rank, window) && rollbacks == 0 {
			stopSelf()
		}
		t0 := time.Now()
		tail := 0
		if plan.Probe {
			tail = max(1, steps/2) // DESIGN §1: the average of the window's last T/2 iterates
		}
		wr, err := o.Replica.TrainWindow(ctx, Window{Start: step, Steps: steps, V: values, Grads: grads, ProbeTail: tail})
		if err != nil {
			return res, fmt.Errorf("rank %d, window %d: %w", rank, window, err)
		}
		fanout := time.Since(t0).Seconds()
		loss := mean(wr.Losses)
		if o.Fault.NaN.from(rank, window) || (o.Fault.NaNAll != nil && o.Fault.NaNAll.Window == window && rollbacks == 0) {
			loss = math.NaN()
		}
		if o.Fault.Diverge.from(rank, window) {
			loss *= 1000
		}
		healthy := !math.IsNaN(loss) && !math.IsInf(loss, 0) && finite32(buf)

		// Converge: the healthy ranks' mean, received by all.
		watch.Enter(window, step+steps, PhaseGather)
		t1 := time.Now()
		stop := 0.0
		if o.Stop != nil && o.Stop() {
			stop = 1
		}
		flag := 0.0
		if healthy {
			flag = 1
		}
		if err := c.AllgatherFloat64([]float64{loss, flag + 2*stop, wr.Probe}, gather); err != nil {
			return res, fmt.Errorf("gather window losses: %w", err)
		}
		losses := make([]float64, n)
		probes := make([]float64, n)
		healthyRanks := make([]bool, n)
		nHealthy, stopRequested := 0, false
		for r := range n {
			losses[r], probes[r] = gather[3*r], gather[3*r+2]
			f := int(gather[3*r+1])
			healthyRanks[r] = f&1 == 1
			stopRequested = stopRequested || f&2 == 2
			if healthyRanks[r] {
				nHealthy++
			} else {
				losses[r], probes[r] = math.NaN(), math.NaN() // a rank with bad parameters has no usable loss
			}
		}
		events := planEvents
		for r, h := range healthyRanks {
			if !h {
				rr := r
				events = append(events, metrics.Event{Kind: metrics.EventUnhealthy, Rank: &rr,
					Message: fmt.Sprintf("rank %d had a non-finite loss or parameters in window %d; left out of the average and reset to it", r, window)})
			}
		}
		divEvents := markDiverged(losses, healthyRanks, o.DivergenceFactor, window)
		events = append(events, divEvents...)
		nHealthy -= len(divEvents)
		healthy = healthyRanks[rank]
		if nHealthy == 0 {
			watch.Enter(window, step+steps, PhaseRollback)
			to, evs, err := o.rollback(ctx, window, step, steps, rollbacks)
			if err != nil {
				return res, err
			}
			rollbacks++
			if rank == 0 {
				o.recordRollback(&plan, step+steps, losses, healthyRanks, append(append(events, evs...), rollbackEvent(window, to, rollbacks, o.MaxRollbacks)))
			}
			step = to
			continue
		}
		if !healthy {
			clear(buf)
		}
		watch.Enter(window, step+steps, PhaseConverge)
		if err := conv.Allreduce(device.HostBuffer(buf), mpi.Sum); err != nil {
			return res, fmt.Errorf("converge allreduce of window %d: %w", window, err)
		}
		inv := 1 / float32(nHealthy)
		for i := range buf {
			buf[i] *= inv
		}
		converge := time.Since(t1).Seconds()
		step += steps
		// The checksum goes into rank 0's metrics and the debug log: the
		// other ranks hash 1 MB per window only when debugging.
		sum := ""
		if rank == 0 || o.Log.GetLevel() <= zerolog.DebugLevel {
			sum = Checksum(params)
		}
		o.Log.Debug().Int("window", window).Int("step", step).Str("checksum", sum).Float64("loss", loss).
			Bool("healthy", healthy).Any("values_last", lastOf(values)).Msg("converged")

		var eval *metrics.Eval
		if step == o.Steps || (o.EvalEvery > 0 && (window+1)%o.EvalEvery == 0) {
			watch.Enter(window, step, PhaseEvaluate)
			l, a, err := o.Replica.Evaluate(ctx)
			if err != nil {
				return res, fmt.Errorf("evaluate after window %d: %w", window, err)
			}
			eval = &metrics.Eval{Loss: metrics.Float(l), Accuracy: metrics.Float(a)}
			res.TestLoss, res.TestAccuracy = l, a
		}

		if rank == 0 {
			watch.Enter(window, step, PhaseObserve)
			fb, evs, err := o.Controller.Observe(ctx, losses, windowProbes(plan.Probe, probes, healthyRanks))
			if err != nil {
				return res, fmt.Errorf("observe window %d: %w", window, err)
			}
			events = append(events, frozenEvents(evs)...)
			rec := windowRecord(&plan, fb, losses, healthyRanks, fanout, converge, sum, eval, events)
			rec.Step, rec.PlanSeconds = step, planSeconds
			if plan.Probe {
				rec.Probe = floats(windowProbes(true, probes, healthyRanks))
			}
			scaleNextLR(&rec, lrScale)
			for _, e := range events {
				o.Log.Warn().Str("event", e.Kind).Str("param", e.Param).Msg(e.Message)
			}
			if o.Metrics != nil {
				if err := o.Metrics.Write(rec); err != nil {
					o.Log.Warn().Err(err).Msg("metrics.jsonl write failed; training goes on")
				}
			}
			if o.Progress != nil {
				o.Progress.Update(step, o.Steps, meanHealthy(losses), baseLR(&plan))
			}
		}
		if o.Checkpoint != nil {
			watch.Enter(window, step, PhaseCheckpoint)
			if err := o.Checkpoint.AfterConverge(ctx, window, step, stopRequested || step == o.Steps); err != nil {
				return res, err
			}
		}
		if stopRequested && step < o.Steps {
			res.Steps = step
			return res, ErrStopped
		}
	}
	if o.Progress != nil && rank == 0 {
		o.Progress.Done()
	}
	res.Steps = o.Steps
	res.Checksum = Checksum(params)
	o.Log.Info().Dur("wall", time.Since(start)).Str("checksum", res.Checksum).Msg("run finished")
	return res, nil
}

func mean(x []float64) float64 {
	if len(x) == 0 {
		return math.NaN()
	}
	s := 0.0
	for _, v := range x {
		s += v
	}
	return s / float64(len(x))
}

func meanHealthy(x []float64) float64 {
	s, k := 0.0, 0
	for _, v := range x {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			s += v
			k++
		}
	}
	if k == 0 {
		return math.NaN()
	}
	return s / float64(k)
}

func lastOf(v Values) map[string]float64 {
	out := make(map[string]float64, len(v))
	for k, s := range v {
		out[k] = s[len(s)-1]
	}
	return out
}

// baseLR is the learning-rate base shown in progress: "lr", else the first
// "lr/..." group, else NaN.
func baseLR(p *hparam.Plan) float64 {
	for _, name := range []string{"lr", "lr/hidden", "lr/output"} {
		if pp, ok := p.Param(name); ok {
			return pp.Base[len(pp.Base)-1]
		}
	}
	return math.NaN()
}

func frozenEvents(evs []hparam.Event) []metrics.Event {
	out := make([]metrics.Event, 0, len(evs))
	for _, e := range evs {
		// hparam.EventFrozen and EventClamped are metrics' kinds of the same names.
		out = append(out, metrics.Event{Kind: e.Kind, Param: e.Param, Message: e.String()})
	}
	return out
}

func windowRecord(p *hparam.Plan, fb []hparam.ParamFeedback, losses []float64, healthy []bool,
	fanout, converge float64, sum string, eval *metrics.Eval, events []metrics.Event) metrics.Record {
	rec := metrics.Record{
		Type: metrics.TypeWindow, Time: float64(time.Now().UnixMilli()) / 1e3, Window: p.Window,
		Losses: floats(losses), Healthy: healthy, FanoutSeconds: fanout, ConvergeSeconds: converge,
		Checksum: sum, Eval: eval, Events: events,
		Values: map[string][]metrics.Float{}, Base: map[string]metrics.Float{},
		NextBase: map[string]metrics.Float{}, Weights: map[string][]metrics.Float{},
		Estimate: map[string]metrics.Float{}, Offset: map[string]metrics.Float{},
	}
	n := p.Ranks()
	for i := range p.Params {
		pp := &p.Params[i]
		last := len(pp.Base) - 1
		vals := make([]float64, n)
		for r := range n {
			vals[r] = pp.Value(r, last)
		}
		rec.Values[pp.Name] = floats(vals)
		rec.Base[pp.Name] = metrics.Float(pp.Base[last])
	}
	for _, f := range fb {
		rec.NextBase[f.Name] = metrics.Float(f.Base)
		rec.Estimate[f.Name] = metrics.Float(f.Estimate)
		rec.Offset[f.Name] = metrics.Float(f.Offset)
		if len(f.Weights) > 0 {
			rec.Weights[f.Name] = floats(f.Weights)
		}
	}
	return rec
}

// windowProbes is what the controller sees of the probe losses: nil when the
// window did not probe, NaN for a rank left out of the average.
func windowProbes(probed bool, probes []float64, healthy []bool) []float64 {
	if !probed {
		return nil
	}
	out := make([]float64, len(probes))
	for r, p := range probes {
		out[r] = p
		if !healthy[r] {
			out[r] = math.NaN()
		}
	}
	return out
}

func floats(x []float64) []metrics.Float {
	out := make([]metrics.Float, len(x))
	for i, v := range x {
		out[i] = metrics.Float(v)
	}
	return out
}
