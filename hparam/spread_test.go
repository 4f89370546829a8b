package hparam

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMultipliersMatchDesign(t *testing.T) {
	a := 0.3
	s := Spread{Multiplicative, a}
	assert.Equal(t, []float64{1}, s.Multipliers(1))
	assert.Equal(t, []float64{1 - a, 1 + a}, s.Multipliers(2))
	m := s.Multipliers(4)
	for i, want := range []float64{1 - a, 1 - a/3, 1 + a/3, 1 + a} {
		assert.InDelta(t, want, m[i], 1e-15)
	}
	assert.Equal(t, 1+a, m[3])
}

func TestMultipliersMeanExactlyOne(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := 1; n <= 300; n++ {
		alpha := r.Float64() * 0.999
		rho := Spread{Multiplicative, alpha}.Multipliers(n)
		var sum float64
		for j := 0; j < n/2; j++ {
			require.Equal(t, 2.0, rho[j]+rho[n-1-j], "n=%d alpha=%v pair %d", n, alpha, j)
			sum += rho[j] + rho[n-1-j]
		}
		if n%2 == 1 {
			require.Equal(t, 1.0, rho[n/2])
			sum += rho[n/2]
		}
		require.Equal(t, 1.0, sum/float64(n), "n=%d", n)
		for j := 1; j < n; j++ {
			require.Greater(t, rho[j], rho[j-1])
		}
		require.Greater(t, rho[0], 0.0)
	}
}

func TestSpreadKinds(t *testing.T) {
	b := Bounds{-100, 100}
	add := Spread{Additive, 0.1}.Values(0.5, 3, b)
	assert.InDeltaSlice(t, []float64{0.4, 0.5, 0.6}, add, 1e-15)
	geo := Spread{Geometric, 1}.Values(1, 3, b)
	assert.InDeltaSlice(t, []float64{0.5, 1, 2}, geo, 1e-15)

	// Clamping.
	clamped := Spread{Additive, 0.2}.Values(0.05, 2, Bounds{0, 0.9})
	assert.Equal(t, 0.0, clamped[0])
	assert.InDelta(t, 0.25, clamped[1], 1e-15)

	// Value and Values agree bit for bit for every kind.
	for _, s := range []Spread{{Multiplicative, 1.0 / 9}, {Additive, 0.07}, {Geometric, 3}} {
		for _, n := range []int{1, 2, 5, 64} {
			all := s.Values(0.37, n, Bounds{-10, 10})
			for j := range n {
				require.Equal(t, all[j], Bounds{-10, 10}.Clamp(s.Value(0.37, j, n)), "%v n=%d j=%d", s, n, j)
			}
		}
	}
}

func TestSpreadAlphaZeroIsBase(t *testing.T) {
	for _, k := range []SpreadKind{Multiplicative, Additive, Geometric} {
		for _, n := range []int{1, 2, 3, 8, 1000} {
			for _, v := range (Spread{k, 0}).Values(0.123456789, n, Bounds{0, 1}) {
				require.Equal(t, 0.123456789, v, "%s n=%d", k, n)
			}
		}
	}
}

func TestSpreadValidate(t *testing.T) {
	for _, tc := range []struct {
		s     Spread
		field string
	}{
		{Spread{Multiplicative, 1}, "spread.alpha"},
		{Spread{Multiplicative, 1.5}, "spread.alpha"},
		{Spread{Additive, -0.1}, "spread.alpha"},
		{Spread{Geometric, math.NaN()}, "spread.alpha"},
		{Spread{"log", 0.1}, "spread.kind"},
	} {
		err := tc.s.Validate()
		require.ErrorIs(t, err, ErrInvalid)
		var fe *FieldError
		require.True(t, errors.As(err, &fe))
		assert.Equal(t, tc.field, fe.Field)
	}
	assert.NoError(t, Spread{Additive, 5}.Validate())
	assert.NoError(t, Spread{Multiplicative, 0.999}.Validate())
	assert.Error(t, Bounds{1, 0}.Validate())
	assert.Error(t, Bounds{math.Inf(-1), 0}.Validate())
}
