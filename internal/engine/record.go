package engine

import (
	"context"
	"math"
	"time"

	"github.com/hdet-dev/hdet/internal/controller"
	"github.com/hdet-dev/hdet/internal/metrics"
	"github.com/hdet-dev/hdet/internal/plan"
	"github.com/hdet-dev/hdet/mpi/reduce"
)

// ShardEvaluator is a replica that can evaluate a part of the test set: the
// ranks then each evaluate one shard and sum, instead of every rank
// evaluating all of it.
type ShardEvaluator interface {
	// EvaluateShard returns the summed loss and the correct predictions
	// over shard (of shards) of the test set, and how many examples it had.
	EvaluateShard(ctx context.Context, shard, shards int) (lossSum, correct, n float64, err error)
}

// evaluate returns the test loss and accuracy of the current parameters,
// sharded across the ranks when the replica can.
func evaluate(ctx context.Context, c Comm, r Replica) (loss, accuracy float64, err error) {
	se, ok := r.(ShardEvaluator)
	if !ok {
		return r.Evaluate(ctx)
	}
	sum := make([]float64, 3)
	sum[0], sum[1], sum[2], err = se.EvaluateShard(ctx, c.Rank(), c.Size())
	if err != nil {
		return 0, 0, err
	}
	if err := c.AllreduceFloat64(sum, reduce.Sum); err != nil {
		return 0, 0, err
	}
	return sum[0] / sum[2], sum[1] / sum[2], nil
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

func frozenEvents(evs []controller.Event) []metrics.Event {
	out := make([]metrics.Event, 0, len(evs))
	for _, e := range evs {
		// controller.EventFrozen and EventClamped are metrics' kinds of the same names.
		out = append(out, metrics.Event{Kind: e.Kind, Param: e.Param, Message: e.String()})
	}
	return out
}

func now() float64 { return float64(time.Now().UnixMilli()) / 1e3 }

func windowRecord(p *plan.Plan, fb []controller.ParamFeedback, losses []float64, healthy []bool,
	fanout, converge float64, sum string, eval *metrics.Eval, events []metrics.Event) metrics.WindowRecord {
	rec := metrics.WindowRecord{
		Time: now(), Pass: p.Pass, Window: p.Window, Anneal: p.Anneal,
		Losses: floats(losses), Healthy: healthy, FanoutSeconds: fanout, ConvergeSeconds: converge,
		Checksum: sum, Eval: eval, Events: events,
		Values: map[string][]metrics.Float{}, Base: map[string]metrics.Float{}, BaseSteps: map[string][]metrics.Float{},
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
		rec.BaseSteps[pp.Name] = floats(pp.Base)
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
