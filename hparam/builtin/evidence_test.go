package builtin

import (
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/hparam"
)

// noisyWindows pools k windows of n replicas at offsets spread over
// [-0.7, 0.4] around centre c (the default lr spread's log-multipliers),
// each window's losses a shared level that falls with training, plus
// slope*z, plus independent noise of standard deviation sd per replica.
func noisyWindows(rng *rand.Rand, n, k int, c, slope, sd float64) *Evidence {
	var e Evidence
	z, l := make([]float64, n), make([]float64, n)
	for w := range k {
		level := 0.5 / float64(w+1)
		for r := range n {
			z[r] = c + math.Log(0.5+float64(r)/float64(max(n-1, 1)))
			l[r] = level + slope*z[r] + sd*rng.NormFloat64()
		}
		e.Add(z, l, false, 0)
	}
	return &e
}

func TestEvidenceKeepsOnNoise(t *testing.T) {
	// Losses that do not depend on the value: a move shows as better in
	// about 5 % of the draws (the test's level), whatever its direction,
	// the replicas' count and the windows'.
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct{ n, k int }{{2, 3}, {2, 6}, {4, 3}, {4, 8}} {
		shown := 0
		const trials = 4000
		for i := range trials {
			e := noisyWindows(rng, c.n, c.k, 0, 0, 0.03)
			u := 0.7 * float64(1-2*(i%2)) // down by half, up by 2, in turn
			if e.Judge(u).Shown {
				shown++
			}
		}
		rate := float64(shown) / trials
		assert.InDelta(t, 0.025, rate, 0.01, "n %d, k %d: the rate a noise-only move of a fixed direction is shown", c.n, c.k)
	}
}

func TestEvidenceMovesOnAClearGradient(t *testing.T) {
	// The noise (same-rate replicas 0.459 against 0.504) under a
	// slope that costs 0.1 per unit of log-rate: going lower is shown in
	// nearly every draw with 4 replicas and 4 windows, going higher never.
	rng := rand.New(rand.NewPCG(3, 4))
	down, up := 0, 0
	const trials = 1000
	for range trials {
		e := noisyWindows(rng, 4, 4, 0, 0.1, 0.03)
		if e.Judge(-0.5).Shown {
			down++
		}
		if e.Judge(0.5).Shown {
			up++
		}
	}
	assert.Greater(t, down, 980, "a clear gradient moves the value")
	assert.Zero(t, up, "never against the gradient")

	// Two replicas see a steeper gradient over a few more windows.
	moved := 0
	for range trials {
		if noisyWindows(rng, 2, 5, 0, 0.2, 0.03).Judge(-1).Shown {
			moved++
		}
	}
	assert.Greater(t, moved, 950)
}

func TestEvidenceEdgeCases(t *testing.T) {
	var e Evidence
	assert.True(t, e.Judge(0).Shown, "no move needs no evidence")
	assert.False(t, e.Judge(1).Shown, "no windows show nothing")
	e.Add([]float64{-0.1, 0.1}, []float64{1, 3}, false, 0)
	v := e.Judge(-1)
	assert.False(t, v.Shown, "one window of two replicas leaves no degree of freedom for the noise")
	assert.Zero(t, v.DF)
	// Unhealthy replicas and a window of one value are left out.
	e.Add([]float64{0.2, math.NaN(), 0.2}, []float64{1, 1, math.Inf(1)}, false, 0)
	e.Add([]float64{0.3, 0.3}, []float64{1, 2}, false, 0)
	assert.Len(t, e.wins, 1)
	// Exact data on a line: no scatter, the slope is shown.
	e.Add([]float64{-0.2, 0.0}, []float64{3, 5}, false, 0)
	e.Add([]float64{0.5, 1.5}, []float64{0, 10}, false, 0)
	v = e.Judge(-1)
	assert.True(t, v.Shown)
	assert.InDelta(t, 10, v.Gain, 1e-12, "the line's slope, 10 per unit of z")
	assert.False(t, e.Judge(1).Shown, "against the slope")

	assert.InDelta(t, 2.042, studentT975(30), 1e-12)
	assert.InDelta(t, 2.0395, studentT975(31), 5e-4)
	assert.InDelta(t, 1.9840, studentT975(100), 5e-4)
}

func TestEvidenceStateRoundTrip(t *testing.T) {
	e := noisyWindows(rand.New(rand.NewPCG(5, 6)), 4, 3, 0.2, 0.05, 0.02)
	e.wins[0].probe, e.wins[0].level, e.wins[1].level = true, 0.001, 0.01
	b, err := e.MarshalBinary()
	require.NoError(t, err)
	var f Evidence
	require.NoError(t, f.UnmarshalBinary(b))
	assert.Equal(t, e.Judge(-0.3), f.Judge(-0.3))
	assert.Equal(t, e.keptNote(hparam.Log, 0.3, e.Judge(0.3)), f.keptNote(hparam.Log, 0.3, f.Judge(0.3)))
	assert.Contains(t, f.keptNote(hparam.Log, 0.3, f.Judge(0.3)), "(1 earlier windows, read below 1/8 of the highest learning rate, left out)")
	assert.ErrorIs(t, f.UnmarshalBinary(b[1:]), hparam.ErrDecode)
	assert.ErrorIs(t, f.UnmarshalBinary(b[:len(b)-1]), hparam.ErrDecode)
	bad := append([]byte(nil), b...)
	bad[1+48] = 1 // a window of one reading
	assert.ErrorIs(t, f.UnmarshalBinary(bad), hparam.ErrDecode)
}

// A version-5 state (the windows' sums pooled as they came) judges as
// the windows did.
func TestEvidenceReadsVersion5(t *testing.T) {
	e := noisyWindows(rand.New(rand.NewPCG(7, 8)), 4, 5, 0.1, 0.05, 0.02)
	p := e.pooled()
	var b []byte
	for _, v := range []float64{p.szz, p.szq, p.sqq, p.szl, p.sql, p.sll} {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
	}
	b = binary.LittleEndian.AppendUint64(b, uint64(p.readings))
	b = binary.LittleEndian.AppendUint64(b, uint64(p.windows))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(p.lo))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(p.hi))
	b = append(b, 0)
	var f Evidence
	require.NoError(t, f.unmarshalV5(b))
	want, got := e.Judge(-0.4), f.Judge(-0.4)
	assert.InDelta(t, want.T, got.T, 1e-9)
	assert.Equal(t, want.DF, got.DF)
	assert.ErrorIs(t, f.unmarshalV5(b[1:]), hparam.ErrDecode)
}

// Windows read in a warm-up's first part, below 1/8 of the search's highest
// learning rate, are left out: there a larger rate always gains, and
// pooled with the windows near the peak, which favour a smaller one, the
// two read as noise and a clear move down is refused.
func TestEvidenceLeavesOutTheWarmupsFirstPart(t *testing.T) {
	judge := func(levels bool) Verdict {
		e := walkEvidence(rand.New(rand.NewPCG(11, 12)), 0.02, levels, func(w int) (float64, float64, float64) {
			if w < 3 { // the warm-up's first part: a larger rate does better
				return -0.3, 0.0004 * float64(w+1), -0.15 * float64(w)
			}
			return 0.15, 0.01, -0.15 * float64(w) // near the peak: a smaller one; the walk goes down
		})
		return e.Judge(-0.9)
	}
	assert.False(t, judge(false).Shown, "every window pooled: the two parts read as noise")
	v := judge(true)
	assert.True(t, v.Shown, "the first part left out: t %.2f, %.2f needed", v.T, v.Need)
	assert.Greater(t, v.T, 2*v.Need, "well past the noise")
}

// A warm-up's middle favours a larger rate; the windows near the peak
// favour a little less. The walk went up; weighed by their levels, the
// windows near the peak keep x1, where pooled alike the middle shows
// the move (a ConvNet's probe search at the best start committed x2.4,
// +27 % trained plain: issue 51's notebook).
func TestEvidenceWeighsWindowsByTheirLevel(t *testing.T) {
	shown := func(levels bool) int {
		rng := rand.New(rand.NewPCG(3, 4))
		n := 0
		for range 100 {
			e := walkEvidence(rng, 0.01, levels, func(w int) (float64, float64, float64) {
				c := 0.15 * float64(min(w, 5)) // the walk goes up
				if w < 4 {                     // the warm-up's middle
					return -0.3, 0.15 + 0.08*float64(w), c
				}
				return 0.1, 0.7 + 0.1*float64(w-4), c // near the peak
			})
			if e.Judge(0.7).Shown {
				n++
			}
		}
		return n
	}
	assert.Greater(t, shown(false), 90, "pooled alike, the warm-up's middle shows the move")
	assert.Less(t, shown(true), 10, "weighed by level, the windows near the peak keep x1")
}

// walkEvidence is 8 windows of 4 probe readings around a walk: window w's
// slope of the loss in z, its level (0 when !levels: unknown) and the
// walk's centre come from at(w); noise sd.
func walkEvidence(rng *rand.Rand, sd float64, levels bool, at func(w int) (slope, level, centre float64)) *Evidence {
	var e Evidence
	z, l := make([]float64, 4), make([]float64, 4)
	for w := range 8 {
		slope, level, c := at(w)
		for r := range 4 {
			z[r] = c + math.Log(0.5+float64(r)/3)
			l[r] = 1/float64(w+1) + slope*z[r] + sd*rng.NormFloat64()
		}
		if !levels {
			level = 0
		}
		e.Add(z, l, true, level)
	}
	return &e
}

// constRestart is a constant lr of 0.01 searched over the first half of a
// 100-step run of windows of 10 (4 updates), then committed.
const constRestart = `{"schedule": {"kind": "onecycle", "max_lr": 0.01, "pct_start": 0, "div_factor": 1, "final_div_factor": 1},
	"auto": {"signal": "%s", "until": 0.5}}`

// search runs e's search pass with each replica's loss the shared level
// of its window plus g of its value's log-offset from 0.01 plus noise
// (probe losses when probe), and commits.
func search(t *testing.T, e hparam.Explorer, n int, probe bool, g func(z float64) float64, rng *rand.Rand, sd float64) hparam.Commitment {
	t.Helper()
	ctx := context.Background()
	for k := 0; ; k++ {
		wp, err := e.Plan(ctx, hparam.WindowRequest{Window: k, Start: 10 * k, Steps: 10})
		require.NoError(t, err)
		values := wp.Spread.Values(wp.Base[9], n, wp.Bounds)
		losses := make([]float64, n)
		for r, v := range values {
			losses[r] = 0.5/float64(k+1) + g(math.Log(v/0.01)) + sd*rng.NormFloat64()
		}
		o := hparam.Observation{Window: k, Values: values, Losses: losses}
		if probe {
			o.Probe = losses
		}
		fb, err := e.Observe(ctx, o)
		require.NoError(t, err)
		if fb.Search == hparam.SearchDone {
			break
		}
	}
	c, err := e.Commit(ctx)
	require.NoError(t, err)
	return c
}

func TestBuiltinKeepsTheScriptsValueOnNoise(t *testing.T) {
	// The regression MLP: two replicas whose window losses differ
	// by noise alone (0.483 against 0.524, 0.500 against 0.513): the
	// quadratic estimate walks, the commit keeps x1 and says why.
	rng := rand.New(rand.NewPCG(7, 8))
	s := lrSetup
	s.Ranks = 2
	walked, kept := 0, 0
	for range 200 {
		e, err := initBuiltin(t, LR, fmtCfg(constRestart, "train"), s)
		require.NoError(t, err)
		c := search(t, e, 2, false, func(float64) float64 { return 0 }, rng, 0.02)
		if c.Offset == 0 && c.Note != "" {
			walked++
			assert.Contains(t, c.Note, "kept: the training loss could not tell x0.")
			assert.Contains(t, c.Note, "a probe lets hdet see held-out loss: docs/pytorch.md#probe")
		}
		if c.Offset == 0 {
			kept++
			assert.Equal(t, 0.01, c.Value, "the script's own value")
		}
	}
	assert.Greater(t, walked, 150, "the search walked away on noise")
	assert.Greater(t, kept, 185, "and the commit kept x1 nearly every time")

	// With a probe the note names it and does not suggest one.
	e, err := initBuiltin(t, LR, fmtCfg(constRestart, "probe"), lrSetup)
	require.NoError(t, err)
	for {
		c := search(t, e, 4, true, func(float64) float64 { return 0 }, rng, 0.02)
		if c.Offset == 0 && c.Note != "" {
			assert.Contains(t, c.Note, "kept: the probe loss could not tell")
			assert.NotContains(t, c.Note, "a probe lets")
			break
		}
		e, err = initBuiltin(t, LR, fmtCfg(constRestart, "probe"), lrSetup)
		require.NoError(t, err)
	}
}

func TestBuiltinMovesOnAClearGradient(t *testing.T) {
	// 10x too high: the loss grows with the rate well past the noise;
	// the commit moves down, by probe and by training loss, 2 replicas or 4.
	rng := rand.New(rand.NewPCG(9, 10))
	tooHigh := func(z float64) float64 { return 0.05 * (z + 2.3) * (z + 2.3) }
	for _, c := range []struct {
		n     int
		probe bool
	}{{2, false}, {4, false}, {4, true}} {
		s := lrSetup
		s.Ranks = c.n
		signal := map[bool]string{false: "train", true: "probe"}[c.probe]
		moved := 0
		for range 50 {
			e, err := initBuiltin(t, LR, fmtCfg(constRestart, signal), s)
			require.NoError(t, err)
			cm := search(t, e, c.n, c.probe, tooHigh, rng, 0.01)
			if cm.Offset < -0.5 {
				moved++
				// The closing line carries the move's evidence.
				assert.Regexp(t, `^shown: the `+map[bool]string{false: "training", true: "probe"}[c.probe]+
					` loss scored the move t [0-9.]+ over \d+ windows, [0-9.]+ needed$`, cm.Note)
			}
		}
		assert.GreaterOrEqual(t, moved, 48, "n %d probe %v: moved down", c.n, c.probe)
	}
}
