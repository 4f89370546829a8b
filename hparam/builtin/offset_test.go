package builtin

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/hparam"
)

// lrSetup is 4 ranks, 10 windows of 10 steps.
var lrSetup = hparam.Setup{Name: "lr", Ranks: 4, TotalSteps: 100, WindowSteps: 10, Seed: 1}

// window plans window k of e and observes it with losses given by f of
// each rank's offset x_r = log(v_r/centre) (values in slot order).
func window(t *testing.T, e hparam.Explorer, k int, f func(x float64) float64) (hparam.WindowPlan, hparam.Feedback) {
	t.Helper()
	ctx := context.Background()
	wp, err := e.Plan(ctx, hparam.WindowRequest{Window: k, Start: 10 * k, Steps: 10})
	require.NoError(t, err)
	centre := wp.Base[9]
	values := wp.Spread.Values(centre, 4, wp.Bounds)
	losses := make([]float64, 4)
	for r, v := range values {
		losses[r] = f(math.Log(v / centre))
	}
	fb, err := e.Observe(ctx, hparam.Observation{Window: k, Values: values, Losses: losses})
	require.NoError(t, err)
	return wp, fb
}

// constLR is a constant schedule at 0.01 explored on a log scale.
func constLR(t *testing.T, extra string) hparam.Explorer {
	t.Helper()
	e, err := initBuiltin(t, LR, `{"schedule": {"kind": "onecycle", "max_lr": 0.01, "pct_start": 0, "div_factor": 1, "final_div_factor": 1},
		"spread": {"alpha": 0.5, "narrow_from": 1}, "auto": {"signal": "train", "commit": "continue"`+extra+`}}`, lrSetup)
	require.NoError(t, err)
	return e
}

func TestOffsetFlatLossesLeaveUUnchanged(t *testing.T) {
	e := constLR(t, "")
	for k := range 9 {
		_, fb := window(t, e, k, func(float64) float64 { return 0.37 })
		require.Zero(t, fb.Offset)
		require.Zero(t, fb.Estimate)
		require.Equal(t, 0.01, fb.Base)
	}
}

func TestQuadraticVertex(t *testing.T) {
	xs := []float64{math.Log(0.5), math.Log(5.0 / 6), math.Log(7.0 / 6), math.Log(1.5)}
	parab := func(v float64) []float64 {
		ls := make([]float64, len(xs))
		for i, x := range xs {
			ls[i] = 2 + 3*(x-v)*(x-v)
		}
		return ls
	}
	assert.InDelta(t, 0.1, QuadraticVertex(xs, parab(0.1), 10), 1e-12, "the vertex of an exact parabola")
	assert.InDelta(t, -0.3, QuadraticVertex(xs, parab(-0.3), 10), 1e-12)
	assert.Equal(t, -1.5*math.Log(2), QuadraticVertex(xs, parab(-5), 1.5*math.Log(2)), "clipped below")
	assert.Equal(t, 0.2, QuadraticVertex(xs, parab(3), 0.2), "clipped above")
	concave := []float64{1, 2, 2.1, 1.5} // best rank is the lowest x
	assert.Equal(t, xs[0], QuadraticVertex(xs, concave, 10))
	assert.Equal(t, -0.1, QuadraticVertex(xs[:2], []float64{2, 1}, 0.1), "two points: the best, clipped")

	o, err := NewOffset(DefaultAutoConfig(FormOffset))
	require.NoError(t, err)
	est, _ := o.Estimate(xs, []float64{1, 1, 1, 1})
	assert.Zero(t, est, "flat fit")
	est, _ = o.Estimate(xs, []float64{1, math.NaN(), 1, math.Inf(1)})
	assert.Zero(t, est, "flat over the healthy ranks")
	ls := parab(0.1)
	ls[1] = math.NaN()
	est, _ = o.Estimate(xs, ls)
	assert.InDelta(t, 0.1, est, 1e-12, "three healthy points still fit")
}

// A parabola with its vertex at log(2) inside the clip: one update moves u
// there (beta 0, lambda 1), and the base doubles.
func TestOffsetParabolaMovesToVertex(t *testing.T) {
	e := constLR(t, "")
	v := math.Log(1.3)
	_, fb := window(t, e, 0, func(x float64) float64 { return 1 + (x-v)*(x-v) })
	assert.InDelta(t, v, fb.Estimate, 1e-12)
	assert.InDelta(t, v, fb.Offset, 1e-12)
	assert.InDelta(t, 0.013, fb.Base, 1e-14)
	wp, _ := window(t, e, 1, func(float64) float64 { return 1 })
	assert.InDelta(t, 0.013, wp.Base[0], 1e-14, "the next window runs at the new base")
}

func TestOffsetClipAndMomentum(t *testing.T) {
	e := constLR(t, `, "beta": 0.5, "lambda": 2, "clip": 1`)
	span := math.Log(2)                                // the largest |x_r| of a multiplicative spread of 0.5, |log 0.5|
	down := func(x float64) float64 { return 1 + 5*x } // straight: the best rank's x, -span
	var u, v float64
	for k := range 3 {
		_, fb := window(t, e, k, down)
		assert.InDelta(t, -span, fb.Estimate, 1e-12, "window %d", k)
		v = 0.5*v + 0.5*(-span)
		u += 2 * v
		assert.InDelta(t, u, fb.Offset, 1e-12, "window %d", k)
	}
	_, fb := window(t, e, 3, func(float64) float64 { return 1 })
	v *= 0.5
	u += 2 * v
	assert.InDelta(t, u, fb.Offset, 1e-12, "momentum carries on with a flat reading")
}

func TestOffsetBounds(t *testing.T) {
	e, err := initBuiltin(t, LR, `{"schedule": {"kind": "onecycle", "max_lr": 0.01, "pct_start": 0, "div_factor": 1, "final_div_factor": 1},
		"spread": {"alpha": 0.5, "narrow_from": 1}, "bounds": {"lower": 0.005, "upper": 0.02}, "auto": {"signal": "train", "lambda": 10, "until": 0.25}}`, lrSetup)
	require.NoError(t, err)
	up := func(x float64) float64 { return 1 - x }
	_, fb := window(t, e, 0, up)
	assert.InDelta(t, math.Log(2), fb.Offset, 1e-12, "u stops where the base meets the upper bound")
	assert.InDelta(t, 0.02, fb.Base, 1e-15)
	_, fb = window(t, e, 1, func(x float64) float64 { return 1 + x })
	assert.InDelta(t, math.Log(0.5), fb.Offset, 1e-12, "and the lower one")
}

// The warm-up guard: while the schedule rises, a reading that says "lower"
// holds the next window at the value the rise would have reached (u
// absorbs the rise); a "higher" reading lets the base rise with it.
func TestOffsetWarmupGuard(t *testing.T) {
	cfg := `{"schedule": {"kind": "linear", "initial": 0.001, "peak": 0.011, "warmup_steps": 50, "final": 0.001},
		"spread": {"alpha": 0.5, "narrow_from": 1}, "auto": {"signal": "train", "until": 0.51}}`
	e, err := initBuiltin(t, LR, cfg, lrSetup)
	require.NoError(t, err)
	// Higher: vertex at +0.2, the schedule keeps rising.
	_, fb := window(t, e, 0, func(x float64) float64 { return (x - 0.2) * (x - 0.2) })
	require.InDelta(t, 0.2, fb.Offset, 1e-12)
	wp, _ := window(t, e, 1, func(x float64) float64 { return 1 + x }) // straight: the lowest replica, log 0.5
	assert.Greater(t, wp.Base[9], wp.Base[0], "window 1 rose with the schedule")
	assert.InDelta(t, 0.003*math.Exp(0.2), wp.Base[0], 1e-15)
	wp, fb = window(t, e, 2, func(float64) float64 { return 1 })
	for _, b := range wp.Base {
		require.Equal(t, wp.Base[0], b, "window 2 is held")
	}
	u := 0.2 + math.Log(0.5) - math.Log(0.007/0.005) // the rise over window 2, 0.005 -> 0.007
	assert.InDelta(t, 0.007*math.Exp(u), wp.Base[0], 1e-15)
	assert.InDelta(t, u, fb.Offset, 1e-12)
	wp, _ = window(t, e, 3, func(float64) float64 { return 1 })
	assert.InDelta(t, 0.007*math.Exp(u), wp.Base[0], 1e-15, "continuous after the hold")
	assert.Greater(t, wp.Base[9], wp.Base[0], "flat reading: the schedule rises again")
}

// auto.bracket makes the search's first window a range test: its replicas
// span base/bracket..base*bracket, and the first update moves to the best
// of them; the guard after it measures the regular spread. Off (1) by
// default, with or without a probe.
func TestOffsetBracket(t *testing.T) {
	warmup := `{"schedule": {"kind": "linear", "initial": 0.001, "peak": 0.011, "warmup_steps": 50, "final": 0.001}%s}`
	withProbe := lrSetup
	withProbe.Probe = true
	for _, tc := range []struct {
		name, auto string
		s          hparam.Setup
		alpha      float64 // window 0's spread (geometric when bracketed)
	}{
		{"default, no probe in the run", ``, lrSetup, 0.5},
		{"default, a probe", ``, withProbe, 0.5},
		{"8, no probe", `, "auto": {"bracket": 8}`, lrSetup, 7},
		{"4, a probe", `, "auto": {"bracket": 4}`, withProbe, 3},
		{"8, signal train", `, "auto": {"bracket": 8, "signal": "train"}`, lrSetup, 7},
	} {
		e, err := initBuiltin(t, LR, fmt.Sprintf(warmup, tc.auto), tc.s)
		require.NoError(t, err, tc.name)
		wp, fb := window(t, e, 0, func(x float64) float64 { return -x }) // the highest replica is best
		assert.Equal(t, tc.alpha, wp.Spread.Alpha, tc.name)
		if tc.alpha == 0.5 {
			assert.Equal(t, hparam.Multiplicative, wp.Spread.Kind, tc.name)
			continue
		}
		assert.Equal(t, hparam.Geometric, wp.Spread.Kind, tc.name)
		assert.InDelta(t, math.Log(1+tc.alpha), fb.Offset, 1e-12, "%s: the first update takes the best replica, not a fit", tc.name)
		wp, _ = window(t, e, 1, func(x float64) float64 { return x * x })
		assert.Equal(t, hparam.Spread{Kind: hparam.Multiplicative, Alpha: 0.5}, wp.Spread, "%s: then the regular spread", tc.name)
	}
	// A "lower" reading in the bracket window: the best replica is base/2,
	// well past the guard's 0.5 of the regular half-width (log 2), though
	// well within 0.5 of the bracket's (log 8): the next window is held.
	e, err := initBuiltin(t, LR, fmt.Sprintf(warmup, `, "auto": {"bracket": 8}`), lrSetup)
	require.NoError(t, err)
	_, fb := window(t, e, 0, func(x float64) float64 { return (x + math.Log(2)) * (x + math.Log(2)) })
	assert.InDelta(t, -math.Log(2)-math.Log(0.005/0.003), fb.Offset, 1e-12, "u moved to base/2 and absorbed window 1's rise")
	wp, _ := window(t, e, 1, func(x float64) float64 { return x * x })
	assert.Equal(t, wp.Base[0], wp.Base[9], "window 1 is held")
	for _, bad := range []struct{ kind, cfg, want string }{
		{LR, `{"schedule": {"max_lr": 0.01}, "auto": {"bracket": 0.5}}`, "auto.bracket"},
		{LR, `{"schedule": {"max_lr": 0.01}, "auto": {"bracket": 8, "commit": "continue"}}`, "commit restart"},
		{LR, `{"schedule": {"max_lr": 0.01}, "spread": {"kind": "additive", "alpha": 0.001}, "auto": {"bracket": 8}}`, "multiplicative or geometric"},
		{Dropout, `{"schedule": 0.1, "auto": {"bracket": 2}}`, "log-scale"},
	} {
		_, err := initBuiltin(t, bad.kind, bad.cfg, lrSetup)
		assert.ErrorContains(t, err, bad.want, bad.cfg)
	}
}

func TestNarrowing(t *testing.T) {
	n := Narrowing{From: 0.3, To: 0.7, AlphaEnd: 0.1}
	assert.Equal(t, 0.5, n.Alpha(0.5, 0))
	assert.Equal(t, 0.5, n.Alpha(0.5, 0.3))
	assert.InDelta(t, 0.3, n.Alpha(0.5, 0.5), 1e-15)
	assert.Equal(t, 0.1, n.Alpha(0.5, 0.7))
	assert.Equal(t, 0.1, n.Alpha(0.5, 1))
	e, err := initBuiltin(t, LR, `{"schedule": {"max_lr": 0.01}, "spread": {"alpha": 0.5, "narrow_from": 0.5, "narrow_to": 1}}`, lrSetup)
	require.NoError(t, err)
	var alphas []float64
	for k := range 10 {
		wp, _ := window(t, e, k, func(float64) float64 { return 1 })
		alphas = append(alphas, wp.Spread.Alpha)
	}
	assert.InDeltaSlice(t, []float64{0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.4, 0.3, 0.2, 0.1}, alphas, 1e-15)
}

// The probe signal: the explorer asks for it on windows that end at an
// update, and compares the ranks by it, not by their training losses.
func TestOffsetProbeSignal(t *testing.T) {
	ctx := context.Background()
	e, err := initBuiltin(t, LR, `{"schedule": {"max_lr": 0.01}, "spread": {"narrow_from": 1}, "auto": {"until": 0.5}}`, lrSetup)
	require.NoError(t, err)
	for k := range 10 {
		wp, err := e.Plan(ctx, hparam.WindowRequest{Window: k, Start: 10 * k, Steps: 10})
		require.NoError(t, err)
		require.Equal(t, k < 4, wp.Probe, "window %d: updates at boundaries 10..40, before until", k)
		values := wp.Spread.Values(wp.Base[9], 4, wp.Bounds)
		train := []float64{1, 2, 3, 4} // the lowest value looks best in training...
		probe := []float64{4, 3, 2, 1} // ...the highest on the probe
		o := hparam.Observation{Window: k, Values: values, Losses: train}
		if wp.Probe {
			o.Probe = probe
		}
		fb, err := e.Observe(ctx, o)
		require.NoError(t, err)
		if wp.Probe {
			require.Greater(t, fb.Estimate, 0.0, "window %d follows the probe", k)
		} else {
			require.Zero(t, fb.Estimate)
		}
	}
}

// The paper form is the paper's update without its old decay: this
// trajectory was recorded with `decay: none` and must not change.
func TestPaperFormPinned(t *testing.T) {
	ctx := context.Background()
	e, err := initBuiltin(t, LR, `{"schedule":{"max_lr":0.01,"pct_start":0.25},"spread":{"alpha":0.5,"narrow_from":1},"auto":{"form":"paper","sigma":0.05}}`,
		hparam.Setup{Name: "lr", Ranks: 4, TotalSteps: 400, WindowSteps: 50, Seed: 1})
	require.NoError(t, err)
	losses := [][]float64{{1, 1.1, 0.9, 1}, {0.5, 0.6, 0.55, 0.52}, {0.4, 0.3, 0.35, 0.45}, {0.3, 0.31, 0.29, 0.3},
		{0.2, 0.25, 0.22, 0.21}, {0.2, 0.19, 0.18, 0.21}, {0.1, 0.12, 0.11, 0.1}, {0.1, 0.1, 0.1, 0.1}}
	want := []float64{0.005276156626407078, 0.00997099595114813, 0.009897339913884197, 0.009839269880524477,
		0.009780079612198641, 0.009721891925506319, 0.00967296910437683, 0.009628938565360292}
	w1 := []float64{0.46008005650439415, 0.062265064758538984, 0.16925399408096198, 0.3084008846561049}
	for k := range 8 {
		wp, err := e.Plan(ctx, hparam.WindowRequest{Window: k, Start: k * 50, Steps: 50})
		require.NoError(t, err)
		assert.False(t, wp.Probe, "the paper form compares training losses")
		vals := wp.Spread.Values(wp.Base[49], 4, wp.Bounds)
		fb, err := e.Observe(ctx, hparam.Observation{Window: k, Values: vals, Losses: losses[k]})
		require.NoError(t, err)
		require.Equal(t, want[k], fb.Base, "window %d", k)
		if k == 1 {
			require.Equal(t, w1, fb.Weights)
		}
	}
}

// auto.guard scales the guard's threshold, a fraction of the spread's
// half-width (log 2 here); 0 turns it off. By default (0.01) a reading
// lower by 0.002 is noise and only a clearer one holds.
// The guard's default threshold is 0.01 with a probe, 0.5 where the ranks
// are compared by training losses (signal train, or a run without a probe).
func TestOffsetGuardThreshold(t *testing.T) {
	cfg := func(guard string, probe bool) string {
		g := `"signal": "train"`
		if probe {
			g = `"signal": "probe"`
		}
		if guard != "" {
			g += `, "guard": ` + guard
		}
		return `{"schedule": {"kind": "linear", "initial": 0.001, "peak": 0.011, "warmup_steps": 50, "final": 0.001},
		"spread": {"alpha": 0.5, "narrow_from": 1}, "auto": {` + g + `}}`
	}
	withProbe := lrSetup
	withProbe.Probe = true
	for _, tc := range []struct {
		guard  string
		probe  bool // the signal is the probe and the run has one
		vertex float64
		held   bool
	}{
		{guard: "1", vertex: -0.4}, {guard: "0.5", vertex: -0.4, held: true}, {guard: "0", vertex: -0.4},
		{vertex: -0.4, held: true}, {vertex: -0.02}, // training losses: 0.5
		{probe: true, vertex: -0.4, held: true}, {probe: true, vertex: -0.02, held: true}, {probe: true, vertex: -0.002}, // the probe: 0.01
		{guard: "0.5", probe: true, vertex: -0.02}, // as set
	} {
		s := lrSetup
		if tc.probe {
			s = withProbe
		}
		e, err := initBuiltin(t, LR, cfg(tc.guard, tc.probe), s)
		require.NoError(t, err)
		parabola := func(x float64) float64 { return (x - tc.vertex) * (x - tc.vertex) }
		window(t, e, 0, parabola)
		wp, _ := window(t, e, 1, parabola)
		assert.Equal(t, tc.held, wp.Base[0] == wp.Base[9], "guard %q, probe %v, vertex %v", tc.guard, tc.probe, tc.vertex)
	}
	e, err := initBuiltin(t, LR, cfg("", true), lrSetup) // asks for the probe, the run has none
	require.NoError(t, err)
	parabola := func(x float64) float64 { return (x + 0.02) * (x + 0.02) }
	window(t, e, 0, parabola)
	wp, _ := window(t, e, 1, parabola)
	assert.NotEqual(t, wp.Base[0], wp.Base[9], "no probe in the run: the training losses' 0.5")
	_, err = initBuiltin(t, LR, cfg("-1", false), lrSetup)
	assert.ErrorContains(t, err, "auto.guard")
}

// By default u learns through the warm-up and the first boundary after it
// (OneCycle's peak at step 30 of 100), then the spread narrows to 0 over a
// tenth of the run; a schedule without a warm-up learns all run long.
func TestOffsetDefaultUntil(t *testing.T) {
	long := lrSetup
	long.TotalSteps = 200
	for _, c := range []struct {
		name, cfg string
		s         hparam.Setup
		probes    int // windows that end with an update
		alphas    []float64
	}{
		{"a warm-up past a quarter of the run: the whole windows in the quarter", `{"schedule": {"max_lr": 0.01}}`,
			lrSetup, 1, []float64{0.5, 0.5, 0.475, 0, 0, 0, 0, 0, 0, 0}},
		{"a shorter warm-up: through its first boundary", `{"schedule": {"max_lr": 0.01, "pct_start": 0.1}}`,
			long, 2, []float64{0.5, 0.5, 0.5, 0.275, 0.025, 0, 0, 0, 0, 0}},
	} {
		e, err := initBuiltin(t, LR, c.cfg, c.s)
		require.NoError(t, err)
		var probes []bool
		var alphas []float64
		for k := range 10 {
			wp, _ := window(t, e, k, func(float64) float64 { return 1 })
			probes = append(probes, wp.Probe)
			alphas = append(alphas, wp.Spread.Alpha)
		}
		assert.Equal(t, append(slices.Repeat([]bool{true}, c.probes), make([]bool, 10-c.probes)...), probes, c.name)
		assert.InDeltaSlice(t, c.alphas, alphas, 1e-12, c.name)
	}
	dropSetup := lrSetup
	dropSetup.Name = "dropout"
	e, err := initBuiltin(t, Dropout, `{"schedule": 0.1, "auto": {"commit": "continue"}}`, dropSetup)
	require.NoError(t, err)
	for k := range 10 {
		wp, err := e.Plan(context.Background(), hparam.WindowRequest{Window: k, Start: 10 * k, Steps: 10})
		require.NoError(t, err)
		require.Equal(t, k < 9, wp.Probe, "window %d", k)
		require.Equal(t, 1.0/9, wp.Spread.Alpha)
		_, err = e.Observe(context.Background(), hparam.Observation{Window: k, Values: wp.Spread.Values(0.1, 4, wp.Bounds), Losses: []float64{1, 1, 1, 1}})
		require.NoError(t, err)
	}
}

// Step sums u over the second half of the updates; Settle makes u their
// mean, once.
func TestOffsetPolyakAverage(t *testing.T) {
	o, err := NewOffset(DefaultAutoConfig(FormOffset)) // beta 0, lambda 1: u moves by est
	require.NoError(t, err)
	o.AverageOver(5)
	var us []float64
	for _, est := range []float64{1, 1, -1, 0.5, 0.25} {
		o.Step(est)
		us = append(us, o.u)
	}
	assert.Equal(t, []float64{1, 2, 1, 1.5, 1.75}, us)
	assert.Equal(t, 3, o.count, "updates 3 to 5 of 5")
	o.Settle()
	assert.InDelta(t, (1+1.5+1.75)/3.0, o.u, 1e-15)
	o.Settle()
	assert.InDelta(t, (1+1.5+1.75)/3.0, o.u, 1e-15, "a second Settle keeps u")
	o, err = NewOffset(o.cfg)
	require.NoError(t, err)
	o.AverageOver(1)
	o.Step(0.5)
	o.Settle()
	assert.Equal(t, 0.5, o.u, "one update: its own u")
	o = &Offset{cfg: o.cfg}
	o.Settle()
	assert.Zero(t, o.u, "no update: u stays")
}

// At the first boundary after the learning updates, the explorer's offset
// becomes the mean of u over the second half of them.
func TestOffsetSettlesOnTheMean(t *testing.T) {
	e, err := initBuiltin(t, LR, `{"schedule": {"max_lr": 0.01}, "spread": {"alpha": 0.5}, "auto": {"signal": "train", "until": 0.31}}`, lrSetup)
	require.NoError(t, err)
	var offsets []float64
	for k := range 6 {
		_, fb := window(t, e, k, func(x float64) float64 { return (x - 0.3 + 0.1*float64(k)) * (x - 0.3 + 0.1*float64(k)) })
		offsets = append(offsets, fb.Offset)
	}
	// Updates at boundaries 1-3 (windows 0-2 probe); boundary 4 settles.
	require.NotEqual(t, offsets[1], offsets[2])
	assert.InDelta(t, (offsets[1]+offsets[2])/2, offsets[3], 1e-15)
	assert.Equal(t, offsets[3], offsets[5], "settled once")
}

// A mean of u values the bounds clamped is clamped too when it settles.
func TestOffsetSettleClamps(t *testing.T) {
	e, err := initBuiltin(t, LR, `{"schedule": {"max_lr": 0.01}, "spread": {"alpha": 0.5}, "auto": {"signal": "train", "until": 0.31}, "bounds": {"upper": 0.012}}`, lrSetup)
	require.NoError(t, err)
	var bases []float64
	for k := range 6 {
		_, fb := window(t, e, k, func(x float64) float64 { return -x }) // always higher
		bases = append(bases, fb.Base)
	}
	for k, b := range bases {
		assert.LessOrEqual(t, b, 0.012*(1+1e-12), "base after window %d", k)
	}
	assert.InDelta(t, 0.012, bases[3], 1e-12, "settled at the bound")
}
