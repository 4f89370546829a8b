package main

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"

	"github.com/hdet-dev/hdet/internal/metrics"
)

// netPoint is one test evaluation of the pass that gives the run's model,
// at the wall time since the run's start record with every evaluation up
// to it taken out.
type netPoint struct {
	Seconds, Accuracy float64
}

// netMetrics is what study 7 reads from a run's metrics.jsonl. Times are
// rank 0's timers summed over the windows of both passes.
type netMetrics struct {
	Steps       int // trained: the search pass's and the main pass's
	SearchSteps int
	Windows     int
	Converges   int // windows whose converge all-reduced the sync buffer
	Wall        float64
	EvalSecs    float64 // the evaluations' time, taken out of Wall
	Evals       int
	Allreduce   float64 // the per-step gradient allreduces (inside fan-out)
	Converge    float64 // gather + converge allreduce
	Plan        float64 // controller plan + broadcast
	Accuracy    float64 // the final evaluation's
	ToTarget    float64 // training seconds to the first evaluation at or above the target; NaN: never
	Curve       []netPoint
}

// steps is the time of a training step with evaluations taken out.
func (m netMetrics) perStep() float64 { return m.Wall / float64(max(m.Steps, 1)) }

// readNetMetrics reads a finished run. A window converged (its sync buffer
// all-reduced) in local mode always; in gradients mode only when its ranks
// trained with different values (the search pass's spread): otherwise
// every rank holds the same parameters and the allreduce is skipped.
func readNetMetrics(dir, sync string, target float64) (netMetrics, error) {
	recs, _, err := metrics.ReadFile(filepath.Join(dir, "metrics.jsonl"))
	if err != nil {
		return netMetrics{}, err
	}
	m := netMetrics{ToTarget: math.NaN(), Accuracy: math.NaN()}
	var start *metrics.StartRecord
	var end *metrics.EndRecord
	final := 0
	for _, r := range recs {
		switch r := r.(type) {
		case metrics.StartRecord:
			if start == nil {
				start = &r
			}
		case metrics.CommitRecord:
			final, m.SearchSteps = 1, r.Step
		case metrics.EndRecord:
			end = &r
		}
	}
	if start == nil || end == nil {
		return m, fmt.Errorf("%s: the run has no start or no end record", dir)
	}
	last := map[int]int{}
	for _, w := range metrics.Of[metrics.WindowRecord](recs) {
		m.Windows++
		last[w.Pass] = w.Step
		m.EvalSecs += w.EvalSeconds
		m.Allreduce, m.Converge, m.Plan = m.Allreduce+w.AllreduceSeconds, m.Converge+w.ConvergeSeconds, m.Plan+w.PlanSeconds
		if sync == "local" || windowSpread(w) {
			m.Converges++
		}
		at := w.Time - start.Time - m.EvalSecs
		m.Wall = at
		if w.Eval == nil {
			continue
		}
		m.Evals++
		if w.Pass != final {
			continue
		}
		acc := float64(w.Eval.Accuracy)
		m.Curve = append(m.Curve, netPoint{at, acc})
		if acc >= target && math.IsNaN(m.ToTarget) {
			m.ToTarget = at
		}
	}
	for _, s := range last {
		m.Steps += s
	}
	if end.Eval != nil {
		m.Accuracy = float64(end.Eval.Accuracy)
	}
	if m.Windows == 0 {
		return m, errors.New("no window records")
	}
	return m, nil
}

// windowSpread says whether the window's ranks trained with different values.
func windowSpread(w metrics.WindowRecord) bool {
	for _, vs := range w.Values {
		for _, v := range vs {
			if v != vs[0] {
				return true
			}
		}
	}
	return false
}

// ringHostBytes is what each host sends in one ring allreduce of size
// bytes over members (world ranks, in the communicator's order): member i
// sends 2(P-1)/P of the buffer to member i+1 (Open MPI's ring: P-1 blocks
// in the reduce-scatter, P-1 in the allgather), which crosses the network
// when the two sit on different hosts.
func ringHostBytes(members []int, hostOf func(int) int, hosts int, size float64) []float64 {
	out := make([]float64, hosts)
	p := len(members)
	if p < 2 {
		return out
	}
	each := 2 * float64(p-1) / float64(p) * size
	for i, r := range members {
		if h := hostOf(r); h != hostOf(members[(i+1)%p]) {
			out[h] += each
		}
	}
	return out
}

// netExpected is the bytes each host should send during a run by the
// ring's count: in gradients mode one allreduce of the gradients (the
// parameter count in float32) per step over every rank; in local mode with
// replica groups one per step inside each replica; and per converge the
// sync buffer (parameters; in local mode with AdamW's two moments, 3x),
// over every rank, or with groups each rank's 1/G slice over the ranks of
// its position. Small messages (the gradient contributor count, the plan
// broadcast, the loss gather, the evaluation's sums) and the launch are
// left out.
func netExpected(s netSettings, c netConfig, m netMetrics) []float64 {
	w := s.ranks()
	hostOf := func(r int) int { return r / s.Slots } // mpirun's --map-by slot over the hostfile
	grad := float64(modelFloats * 4)
	total := make([]float64, s.Hosts)
	add := func(per []float64, times int) {
		for h := range total {
			total[h] += per[h] * float64(times)
		}
	}
	span := func(from, step, n int) []int {
		var out []int
		for i := range n {
			out = append(out, from+i*step)
		}
		return out
	}
	buf := grad
	if c.Sync == "local" {
		buf = 3 * grad
	}
	switch {
	case c.Sync == "gradients":
		add(ringHostBytes(span(0, 1, w), hostOf, s.Hosts, grad), m.Steps)
	case c.G > 1:
		for rep := range w / c.G {
			add(ringHostBytes(span(rep*c.G, 1, c.G), hostOf, s.Hosts, grad), m.Steps)
		}
	}
	if c.G <= 1 {
		add(ringHostBytes(span(0, 1, w), hostOf, s.Hosts, buf), m.Converges)
		return total
	}
	for pos := range c.G {
		add(ringHostBytes(span(pos, c.G, w/c.G), hostOf, s.Hosts, buf/float64(c.G)), m.Converges)
	}
	return total
}
