package builtin

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/hparam"
)

func newTestAuto(t *testing.T) *Auto {
	t.Helper()
	a, err := NewAuto(DefaultAutoConfig(FormPaper), hparam.Bounds{Lower: 1e-8, Upper: 10})
	require.NoError(t, err)
	return a
}

func TestSoftmaxWeightsStable(t *testing.T) {
	for _, scores := range [][]float64{{1e6, -1e6, 0}, {-1e6, -1e6}, {1e6, 1e6, 1e6}, {1e300, -1e300, 0}} {
		losses := make([]float64, len(scores))
		for i, s := range scores {
			losses[i] = -s * 0.1 // s = (Lbar - L)/sigma up to a shift, sigma 0.1
		}
		w := SoftmaxWeights(losses, 0.1, nil)
		var sum float64
		for _, x := range w {
			require.False(t, math.IsNaN(x) || math.IsInf(x, 0), "%v -> %v", scores, w)
			require.GreaterOrEqual(t, x, 0.0)
			sum += x
		}
		assert.InDelta(t, 1, sum, 1e-15, "%v -> %v", scores, w)
	}
	w := SoftmaxWeights([]float64{-1e5, 1e5, 0}, 0.1, nil)
	assert.Equal(t, []float64{1, 0, 0}, w)
	w = SoftmaxWeights([]float64{1, 1, 1, 1}, 0.1, nil)
	assert.Equal(t, []float64{0.25, 0.25, 0.25, 0.25}, w)
	w = SoftmaxWeights([]float64{math.NaN(), math.Inf(1), math.Inf(-1)}, 0.1, nil)
	assert.Equal(t, []float64{0, 0, 0}, w, "no healthy rank, no weight")
}

// Property: a rank with a NaN (or Inf) loss changes nothing but its own
// weight: the others' weights are the softmax over the others alone, and
// the update equals one where that rank's loss is so bad its weight
// underflows to 0. Its value still counts in hbar.
func TestUnhealthyRankOnlyLosesItsWeight(t *testing.T) {
	values := []float64{0.09, 0.1, 0.11, 0.12}
	losses := []float64{0.50, 0.48, 0.47, 0.49}
	others := SoftmaxWeights([]float64{0.50, 0.48, 0.49}, 0.1, nil)

	var bases []float64
	for _, bad := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), 1e300} {
		l := append([]float64(nil), losses...)
		l[2] = bad
		a := newTestAuto(t)
		fb, err := a.Update(values, l, nil)
		require.NoError(t, err)
		assert.Equal(t, []float64{others[0], others[1], 0, others[2]}, fb.Weights, "loss %v", bad)
		bases = append(bases, fb.Base)
	}
	for _, b := range bases[1:] {
		assert.Equal(t, bases[0], b)
	}
	// Dropping the rank altogether gives another hbar, so another base.
	a := newTestAuto(t)
	fb, err := a.Update([]float64{0.09, 0.1, 0.12}, []float64{0.50, 0.48, 0.49}, nil)
	require.NoError(t, err)
	assert.NotEqual(t, bases[0], fb.Base)
}

// Property: permuting the ranks' (value, loss) pairs leaves the update
// unchanged (to rounding: the sums run in another order).
func TestUpdatePermutationInvariant(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for trial := range 50 {
		n := 2 + r.IntN(60)
		values, losses := make([]float64, n), make([]float64, n)
		for i := range n {
			values[i] = 0.01 * (1 + r.Float64())
			losses[i] = 1 + 0.2*r.Float64()
		}
		a, b := newTestAuto(t), newTestAuto(t)
		pi := r.Perm(n)
		pv, pl := make([]float64, n), make([]float64, n)
		for i, j := range pi {
			pv[i], pl[i] = values[j], losses[j]
		}
		for w := range 3 {
			fa, err := a.Update(values, losses, nil)
			require.NoError(t, err)
			fb, err := b.Update(pv, pl, nil)
			require.NoError(t, err)
			require.InEpsilon(t, fa.Base, fb.Base, 1e-12, "trial %d window %d", trial, w)
			require.InDelta(t, a.Velocity, b.Velocity, 1e-12*math.Abs(fa.Base))
			for i, j := range pi {
				require.InDelta(t, fa.Weights[j], fb.Weights[i], 1e-15)
			}
		}
	}
}

// Property: when replicas with larger values have lower losses the base
// rises window after window; in the mirror case it falls.
func TestUpdateFollowsTheSignal(t *testing.T) {
	for _, larger := range []bool{true, false} {
		a := newTestAuto(t)
		base := 0.01
		rho := hparam.Spread{Kind: hparam.Multiplicative, Alpha: 1.0 / 9}.Multipliers(4)
		for w := range 20 {
			values, losses := make([]float64, 4), make([]float64, 4)
			for j := range 4 {
				values[j] = base * rho[j]
				losses[j] = 1 - 0.05*float64(j) // larger value, lower loss
				if !larger {
					losses[j] = 1 + 0.05*float64(j)
				}
			}
			fb, err := a.Update(values, losses, nil)
			require.NoError(t, err)
			if larger {
				require.Greater(t, fb.Base, base, "window %d", w)
			} else {
				require.Less(t, fb.Base, base, "window %d", w)
			}
			base = fb.Base
		}
	}
}

func TestUpdateBoundsAndErrors(t *testing.T) {
	c := DefaultAutoConfig(FormPaper)
	c.Lambda = 1e6
	a, err := NewAuto(c, hparam.Bounds{Lower: 0.001, Upper: 0.02})
	require.NoError(t, err)
	fb, err := a.Update([]float64{0.01, 0.011}, []float64{1, 0.5}, nil)
	require.NoError(t, err)
	assert.Equal(t, 0.02, fb.Base, "clamped to the upper bound")

	_, err = a.Update([]float64{0.01}, []float64{1, 2}, nil)
	assert.ErrorIs(t, err, hparam.ErrInvalid)
	_, err = a.Update([]float64{math.NaN(), 1}, []float64{1, 2}, nil)
	assert.ErrorIs(t, err, hparam.ErrInvalid)

	for _, mod := range []func(*AutoConfig){
		func(c *AutoConfig) { c.Sigma = 0 },
		func(c *AutoConfig) { c.Beta = 1 },
		func(c *AutoConfig) { c.Lambda = -1 },
		func(c *AutoConfig) { c.Form = "absolute" },
		func(c *AutoConfig) { c.Signal = "eval" },
		func(c *AutoConfig) { c.Estimator = "cubic" },
		func(c *AutoConfig) { c.Estimator = EstimatorQuadratic }, // paper form: softmax only
		func(c *AutoConfig) { c.Clip = 0 },
		func(c *AutoConfig) { c.Until = 0 },
		func(c *AutoConfig) { c.Until = 1.5 },
	} {
		c := DefaultAutoConfig(FormPaper)
		mod(&c)
		assert.ErrorIs(t, c.Validate(), hparam.ErrInvalid)
	}
}

func TestAutoStateRoundTrip(t *testing.T) {
	a := newTestAuto(t)
	values, losses := []float64{0.01, 0.02, 0.03}, []float64{1, 0.9, 0.95}
	for range 3 {
		_, err := a.Update(values, losses, nil)
		require.NoError(t, err)
	}
	st, err := a.MarshalBinary()
	require.NoError(t, err)
	b := newTestAuto(t)
	require.NoError(t, b.UnmarshalBinary(st))
	assert.Equal(t, *a, *b)
	for range 3 {
		fa, err := a.Update(values, losses, nil)
		require.NoError(t, err)
		fb, err := b.Update(values, losses, nil)
		require.NoError(t, err)
		require.Equal(t, math.Float64bits(fa.Base), math.Float64bits(fb.Base))
	}
	assert.ErrorIs(t, b.UnmarshalBinary(st[:10]), hparam.ErrDecode)
}
