package schedule

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Cos's comparison with the C library's cos, on millions of arguments, is
// internal/cref's TestCosMatchesTheCLibrary; these tests check the parts.

func TestCosSpecialValues(t *testing.T) {
	for _, x := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		assert.True(t, math.IsNaN(Cos(x)), "Cos(%v)", x)
	}
	for _, x := range []float64{0, math.Copysign(0, -1), math.SmallestNonzeroFloat64, 1e-300, 0x1p-27} {
		assert.Equal(t, 1.0, Cos(x), "Cos(%v)", x)
	}
	assert.Equal(t, 0x1.fffffffffffffp-1, Cos(0x1p-26)) // 1 - 2^-53 and a bit
	assert.Equal(t, -1.0, Cos(math.Pi))
	assert.Equal(t, 6.123233995736766e-17, Cos(math.Pi/2))
	r := rand.New(rand.NewPCG(3, 4))
	for range 1000 {
		x := math.Float64frombits(r.Uint64() &^ (1 << 63))
		if !math.IsNaN(x) {
			require.Equal(t, math.Float64bits(Cos(x)), math.Float64bits(Cos(-x)), "x = %v", x)
		}
	}
}

// The constants: pi/2 in three parts, each the double nearest to what the
// previous ones leave, and Machin's pi against its first 60 digits.
func TestCosConstants(t *testing.T) {
	pi := piBig(300)
	assert.Equal(t, "3.14159265358979323846264338327950288419716939937510582097494", pi.Text('f', 59))
	rest := new(big.Float).SetPrec(300).Quo(pi, big.NewFloat(2))
	for i, c := range pio2 {
		want, _ := rest.Float64()
		assert.Equal(t, want, c, "pio2[%d]", i)
		rest.Sub(rest, big.NewFloat(c))
	}
	assert.Less(t, math.Abs(must(rest.Float64())), 0x1p-163)
	assert.Equal(t, dd{1, 0}, sinCoefs[0])
	assert.Equal(t, dd{-0x1.5555555555555p-3, -0x1.5555555555555p-57}, sinCoefs[1])
	assert.Equal(t, dd{-0.5, 0}, cosCoefs[1])
}

func must(f float64, _ big.Accuracy) float64 { return f }

// exactCosSin returns cos(r) or sin(r) from taylorBig at 300 bits.
func exactCosSin(r dd, odd bool) *big.Float {
	b := new(big.Float).SetPrec(300).SetFloat64(r.hi)
	b.Add(b, big.NewFloat(r.lo))
	return taylorBig(b, odd, 300)
}

// The double-double series against math/big, for r over the whole reduced
// range: cosFast assumes a relative error under 2^-96; the measured one is
// below 2^-100.
func TestCosPolyError(t *testing.T) {
	rnd := rand.New(rand.NewPCG(5, 6))
	worst := [2]float64{}
	for i := range 20000 {
		r := dd{(2*rnd.Float64() - 1) * 0.786, 0}
		if i%2 == 1 { // tiny r, and r with a low part
			r = dd{math.Ldexp(0.786*rnd.Float64(), -rnd.IntN(60)), 0x1p-60 * rnd.Float64()}
			r.hi, r.lo = fastTwoSum(r.hi, r.lo*r.hi)
		}
		for odd, v := range []dd{poly(mul(r, r), cosCoefs[:], 9), mul(r, poly(mul(r, r), sinCoefs[:], 8))} {
			exact := exactCosSin(r, odd == 1)
			d := new(big.Float).Sub(exact, big.NewFloat(v.hi))
			d.Sub(d, big.NewFloat(v.lo)).Quo(d, exact)
			worst[odd] = max(worst[odd], math.Abs(must(d.Float64())))
		}
	}
	t.Logf("largest relative error: cos %.3g (2^%.1f), sin %.3g (2^%.1f)",
		worst[0], math.Log2(worst[0]), worst[1], math.Log2(worst[1]))
	assert.Less(t, worst[0], 0x1p-100)
	assert.Less(t, worst[1], 0x1p-100)
}

// reduceCW's and reduceHuge's results against math/big's reduction, within
// the error bounds they return, near multiples of pi/2 above all.
func TestCosReductionError(t *testing.T) {
	rnd := rand.New(rand.NewPCG(7, 8))
	for i := range 20000 {
		e := rnd.IntN(40)
		if i%4 == 0 {
			e = 30 + rnd.IntN(994)
		}
		ax := math.Ldexp(1+rnd.Float64(), e)
		if i%2 == 1 { // the double nearest to a multiple of pi/2
			_, rb := reduceBig(ax, 300)
			ax = must(rb.Sub(big.NewFloat(ax), rb).Float64())
		}
		reduce := reduceCW
		if ax >= cwLimit {
			reduce = reduceHuge
		}
		r, q, bound := reduce(ax)
		wantQ, want := reduceBig(ax, 300)
		require.Equal(t, wantQ, q, "x = %v", ax)
		d := new(big.Float).Sub(want, big.NewFloat(r.hi))
		d.Sub(d, big.NewFloat(r.lo))
		require.LessOrEqual(t, math.Abs(must(d.Float64())), bound, "x = %v", ax)
	}
}

// The fast path against the slow one (math/big): the same results, and the
// fast one decides nearly always.
func TestCosFastAgreesWithExact(t *testing.T) {
	rnd := rand.New(rand.NewPCG(9, 10))
	undecided := 0
	const n = 20000
	for i := range n {
		x := math.Pi * rnd.Float64()
		if i%2 == 1 {
			x = math.Float64frombits(rnd.Uint64()&^(0x7ff<<52|1<<63) | uint64(1023-60+rnd.IntN(1084))<<52)
		}
		got, ok := cosFast(x)
		want := cosExact(x, 128)
		if !ok {
			undecided++
			continue
		}
		require.Equal(t, math.Float64bits(want), math.Float64bits(got), "x = %v", x)
		if i%100 == 0 { // the slow path's loop, from a precision too low
			require.Equal(t, math.Float64bits(want), math.Float64bits(cosExact(x, 2)), "x = %v", x)
		}
	}
	assert.Less(t, undecided, 3)
}

// roundDD refuses when v±err reaches a midpoint, also the closer one
// below a power of two.
func TestRoundDD(t *testing.T) {
	const ulp = 0x1p-52
	for _, c := range []struct {
		v   dd
		err float64
		ok  bool
	}{
		{dd{1.5, 0}, 0x1p-100, true},
		{dd{1.5, ulp/2 - 0x1p-90}, 0x1p-100, true},
		{dd{1.5, ulp/2 - 0x1p-100}, 0x1p-100, false},
		{dd{1.5, -ulp / 2}, 0, false},
		{dd{-1.5, ulp/2 - 0x1p-90}, 0x1p-100, true},
		{dd{-1.5, -ulp/2 + 0x1p-100}, 0x1p-99, false},
		{dd{1, -ulp / 4}, 0x1p-100, false}, // the gap below 1 is half as wide
		{dd{1, -ulp/4 + 0x1p-80}, 0x1p-100, true},
		{dd{1, ulp/2 - 0x1p-80}, 0x1p-100, true},
		{dd{0x1p-1000, 0}, 0, false}, // outside the range of cosines
	} {
		y, ok := roundDD(c.v, c.err)
		assert.Equal(t, c.v.hi, y)
		assert.Equal(t, c.ok, ok, "%+v", c)
	}
}
