package builtin

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/hparam"
)

// With equal losses a geometric spread must not move its base: the means are
// geometric, and the geometric mean of a geometric spread is its base.
func TestGeometricSpreadDoesNotDriftWithoutSignal(t *testing.T) {
	sp := hparam.Spread{Kind: hparam.Geometric, Alpha: 2}
	bounds := hparam.Bounds{Lower: 0, Upper: 1}
	for _, logSpace := range []bool{false, true} {
		cfg := DefaultAutoConfig(FormPaper)
		cfg.LogSpace = logSpace
		a, err := NewAuto(cfg, bounds)
		require.NoError(t, err)
		base := 0.01
		for range 5 {
			fb, err := a.Update(sp.Values(base, 4, bounds), []float64{1, 1, 1, 1}, nil)
			require.NoError(t, err)
			base = fb.Base
		}
		if logSpace {
			assert.InDelta(t, 0.01, base, 1e-15)
		} else {
			assert.Greater(t, base, 0.04, "arithmetic means drift up: the bias LogSpace removes")
		}
	}
}

// Relative sigma makes the weights depend on how the losses compare, not on
// their scale.
func TestRelativeSigmaIsScaleFree(t *testing.T) {
	cfg := DefaultAutoConfig(FormPaper)
	cfg.SigmaMode = SigmaRelative
	_, err := NewAuto(cfg, hparam.Bounds{Lower: 0, Upper: 1})
	require.NoError(t, err)
	big := []float64{3.0, 3.1, 2.9, 3.05}
	small := make([]float64, 4)
	for i, l := range big {
		small[i] = l / 60
	}
	wb := SoftmaxWeights(big, sigmaFor(cfg, big), nil)
	ws := SoftmaxWeights(small, sigmaFor(cfg, small), nil)
	for i := range wb {
		assert.InDelta(t, wb[i], ws[i], 1e-12)
	}
	assert.Equal(t, cfg.Sigma, sigmaFor(cfg, []float64{1, 1, math.NaN()}), "equal losses keep sigma")

	cfg.SigmaMode = "bogus"
	_, err = NewAuto(cfg, hparam.Bounds{Lower: 0, Upper: 1})
	assert.ErrorContains(t, err, "auto.sigma_mode")
}
