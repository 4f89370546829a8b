package cref

import (
	"fmt"
	"math"
	"math/big"
	"sync"
)

// The oracle is a cosine in math/big that shares nothing with schedule.Cos
// but the idea: pi by the Gauss-Legendre iteration (schedule.Cos's comes from
// Machin's formula), the reduction with 600 bits past the units of x and
// the Taylor series at 600 bits, far more than any float64 argument needs.
const (
	oraclePiPrec = 1600
	oraclePrec   = 600
)

var oraclePi = sync.OnceValue(func() *big.Float {
	f := func() *big.Float { return new(big.Float).SetPrec(oraclePiPrec + 64) }
	a, b, t, p := f().SetInt64(1), f().SetFloat64(0.5), f().SetFloat64(0.25), f().SetInt64(1)
	b.Sqrt(b)
	next, d := f(), f()
	for range 12 { // the correct digits double each time
		next.Add(a, b).Quo(next, f().SetInt64(2))
		b.Sqrt(b.Mul(a, b))
		d.Sub(a, next)
		t.Sub(t, d.Mul(d, d).Mul(d, p))
		p.Add(p, p)
		a.Set(next)
	}
	pi := f().Add(a, b)
	pi.Mul(pi, pi)
	return pi.Quo(pi, t.Mul(t, f().SetInt64(4)))
})

// oracleBig returns cos(x) to about 600 bits.
func oracleBig(x float64) *big.Float {
	ax := new(big.Float).SetFloat64(math.Abs(x))
	prec := uint(oraclePrec + 64 + max(ax.MantExp(nil), 0))
	f := func() *big.Float { return new(big.Float).SetPrec(prec) }
	halfPi := f().Quo(oraclePi(), f().SetInt64(2))
	k, _ := f().Add(f().Quo(ax, halfPi), f().SetFloat64(0.5)).Int(nil)
	r := f().Sub(ax, f().Mul(f().SetInt(k), halfPi))
	quadrant := new(big.Int).And(k, big.NewInt(3)).Int64()
	// cos(r), -sin(r), -cos(r), sin(r): the series of cos(r + q*pi/2).
	r2 := new(big.Float).SetPrec(oraclePrec).Mul(r, r)
	term := new(big.Float).SetPrec(oraclePrec).SetInt64(1)
	n := int64(0)
	if quadrant&1 == 1 {
		term.Set(r)
		n = 1
	}
	if quadrant == 1 || quadrant == 2 {
		term.Neg(term)
	}
	sum := new(big.Float).SetPrec(oraclePrec).Set(term)
	for term.Sign() != 0 && term.MantExp(nil) > -oraclePrec-10 {
		term.Mul(term, r2).Quo(term, big.NewFloat(float64(-(n+1)*(n+2))))
		n += 2
		sum.Add(sum, term)
	}
	return sum
}

// oracleCos returns cos(x) rounded to nearest, or an error if the oracle's
// precision does not settle the rounding.
func oracleCos(x float64) (float64, error) {
	v := oracleBig(x)
	eps := new(big.Float).SetMantExp(big.NewFloat(1), -oraclePrec+32)
	lo, _ := new(big.Float).Sub(v, eps).Float64()
	hi, _ := new(big.Float).Add(v, eps).Float64()
	if lo != hi {
		return 0, fmt.Errorf("oracle: cos(%v) is too close to a midpoint for %d bits", x, oraclePrec)
	}
	return lo, nil
}

// ulpsFrom returns |cos(x) - y| in ulps of y (toward cos(x)); a correctly
// rounded y is under 0.5.
func ulpsFrom(x, y float64) float64 {
	d := new(big.Float).SetPrec(oraclePrec).Sub(oracleBig(x), big.NewFloat(y))
	ulp := math.Abs(math.Nextafter(y, math.Inf(d.Sign())) - y)
	v, _ := d.Quo(d, big.NewFloat(ulp)).Float64()
	return math.Abs(v)
}
