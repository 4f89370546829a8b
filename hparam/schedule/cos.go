package schedule

import (
	"math"
	"math/big"
	"math/bits"
	"sync"
)

// Cos returns the cosine of x correctly rounded: the float64 nearest to
// the exact cos(x). OneCycle uses it to reproduce PyTorch's OneCycleLR,
// which calls Python's math.cos, that is the C library's cos: that one is
// correctly rounded but for about one argument in 700 (glibc 2.36, off by
// 0.5 ulp and a hair there), while Go's math.Cos is further off, so Cos
// gives PyTorch's learning rates bit for bit at nearly every step. This is
// original code for hdet (Apache-2.0), made from the textbook method:
// reduction modulo pi/2, the Taylor series in double-double arithmetic
// with an error bound, Ziv's rounding test, and math/big when the test
// cannot decide. NaN and ±Inf give NaN.
func Cos(x float64) float64 {
	if y, ok := cosFast(x); ok {
		return y
	}
	return cosExact(math.Abs(x), 128)
}

// dd is a double-double: the unevaluated sum hi+lo, with |lo| at most
// half an ulp of hi (hi is hi+lo rounded to nearest).
type dd struct{ hi, lo float64 }

const (
	twoOverPi = 2 / math.Pi
	// Above cwLimit, reduceCW's error bound grows too loose; math/big
	// reduces instead.
	cwLimit = 0x1p30
)

// pio2 is pi/2 = pio2[0]+pio2[1]+pio2[2] + O(2^-163), each the double
// nearest to what the previous ones leave (TestCosConstants checks them).
var pio2 = [3]float64{0x1.921fb54442d18p+00, 0x1.1a62633145c07p-54, -0x1.f1976b7ed8fbcp-110}

// Taylor coefficients in z = r*r: sinCoefs[i] = (-1)^i/(2i+1)! and
// cosCoefs[i] = (-1)^i/(2i)!, enough for |r| <= 0.786, where the first
// omitted term is below 2^-107 of the sum.
var sinCoefs, cosCoefs = taylorCoefs(1), taylorCoefs(0)

// cosFast is Cos without the slow path: the double-double result rounded,
// and whether Ziv's test proves it is the correctly rounded one.
func cosFast(x float64) (float64, bool) {
	ax := math.Abs(x)
	if !(ax <= math.MaxFloat64) {
		return math.NaN(), true
	}
	var r dd
	var q int
	var errRed float64
	if ax < cwLimit {
		r, q, errRed = reduceCW(ax)
	} else {
		r, q, errRed = reduceHuge(ax)
	}
	// cos(q*pi/2 + r) for the four quadrants q.
	var v dd
	if q&1 == 0 {
		v = poly(mul(r, r), cosCoefs[:], 9)
	} else {
		v = mul(r, poly(mul(r, r), sinCoefs[:], 8))
	}
	if q == 1 || q == 2 {
		v = dd{-v.hi, -v.lo}
	}
	// The series in double-double is within 2^-100 of the sine or cosine,
	// relative (TestCosPolyError measures under 2^-104); the bound allows
	// 2^-96. An error of e in r moves the result by at most e.
	return roundDD(v, 0x1p-96*math.Abs(v.hi)+errRed)
}

// reduceCW is Cody and Waite's reduction for ax < cwLimit: ax = k*pi/2 + r
// with |r| <= pi/4 + 2^-20, k*pio2[0] and k*pio2[1] formed exactly with FMA
// and the parts summed error-free down to the last ones. It returns r,
// k mod 4 and a bound on |r - (ax - k*pi/2)|: the tail's rounding errors
// come to less than 2^-102|r| + 2^-152 k, dropping the rest of pi/2 to
// less than 2^-162 k.
func reduceCW(ax float64) (dd, int, float64) {
	k := math.Round(ax * twoOverPi)
	h0, l0 := twoProd(k, pio2[0])
	h1, l1 := twoProd(k, pio2[1])
	t, te := twoSum(ax, -h0)
	u, ue := twoSum(-l0, -h1)
	v, ve := twoSum(t, u)
	tail := te + ve + ue - l1 - k*pio2[2]
	hi, lo := twoSum(v, tail)
	return dd{hi, lo}, int(k) & 3, 0x1p-100*math.Abs(hi) + 0x1p-150*k
}

// reduceHuge reduces ax >= cwLimit with math/big (reduceBig's error is
// under 2^-164; the double-double adds 2^-106 |r|).
func reduceHuge(ax float64) (dd, int, float64) {
	q, r := reduceBig(ax, 160)
	hi, _ := r.Float64()
	lo, _ := r.Sub(r, new(big.Float).SetFloat64(hi)).Float64() // exact
	return dd{hi, lo}, q, 0x1p-100*math.Abs(hi) + 0x1p-150
}

// roundDD returns v.hi, the float64 nearest to v, and whether it is also
// nearest to everything within err of v: whether v.lo±err stays short of
// half the gap from v.hi to either neighbour. Those half gaps are powers
// of two and floating-point addition is monotonic, so a rounded v.lo±err
// that is short of one proves the exact sum is too.
func roundDD(v dd, err float64) (float64, bool) {
	a, lo := v.hi, v.lo
	if a < 0 {
		a, lo = -a, -lo
	}
	b := math.Float64bits(a)
	half := math.Float64frombits(b&(0x7ff<<52) - 53<<52) // ulp(a)/2
	below := half
	if b&(1<<52-1) == 0 { // a power of two: the gap below is half as wide
		below /= 2
	}
	return v.hi, a >= 0x1p-960 && lo+err < half && lo-err > -below
}

// poly returns the sum of c[i]*z^i, the terms from split on in double
// precision (they are below 2^-53 of the sum) and the others by Horner's
// rule in double-double. Each coefficient is over three times the rest of
// the sum after it, so no step cancels much: every step adds an error of
// about 2^-104 relative, and the later steps shrink those of the earlier
// ones.
func poly(z dd, c []dd, split int) dd {
	t := 0.0
	for i := len(c) - 1; i >= split; i-- {
		t = t*z.hi + c[i].hi
	}
	p := dd{t, 0}
	for i := split - 1; i >= 0; i-- {
		h, l := twoProd(p.hi, z.hi)
		l += p.hi*z.lo + p.lo*z.hi
		s, e := fastTwoSum(c[i].hi, h)
		p.hi, p.lo = fastTwoSum(s, e+(c[i].lo+l))
	}
	return p
}

// mul returns a*b in double-double (relative error about 2^-104).
func mul(a, b dd) dd {
	h, l := twoProd(a.hi, b.hi)
	l += a.hi*b.lo + a.lo*b.hi
	h, l = fastTwoSum(h, l)
	return dd{h, l}
}

// twoSum returns s = a+b rounded and the exact error e: a+b = s+e.
func twoSum(a, b float64) (s, e float64) {
	s = a + b
	bb := s - a
	return s, (a - (s - bb)) + (b - bb)
}

// fastTwoSum is twoSum for |a| >= |b| (or a = 0).
func fastTwoSum(a, b float64) (s, e float64) {
	s = a + b
	return s, b - (s - a)
}

// twoProd returns p = a*b rounded and the exact error e: a*b = p+e.
func twoProd(a, b float64) (p, e float64) {
	p = a * b
	return p, math.FMA(a, b, -p)
}

// taylorCoefs returns the 14 coefficients (-1)^i/(2i+off)! of the sine
// (off 1) or cosine (off 0) series in z = r*r, each the nearest
// double-double, computed exactly with math/big.
func taylorCoefs(off int64) [14]dd {
	var c [14]dd
	f := big.NewRat(1, 1)
	for i := range int64(len(c)) {
		if i > 0 {
			f.Quo(f, big.NewRat(-(2*i+off-1)*(2*i+off), 1))
		}
		hi, _ := f.Float64()
		lo, _ := new(big.Rat).Sub(f, new(big.Rat).SetFloat64(hi)).Float64()
		c[i] = dd{hi, lo}
	}
	return c
}

// cosExact is the slow path, for the arguments Ziv's test cannot decide:
// cos(ax) with math/big at prec bits and more, doubling the precision
// until the result, within its error bound, rounds to a single float64.
// The cosine of a nonzero float64 is irrational, never a midpoint between
// two of them, so the loop ends (in practice at the first precision,
// which settles every cosine farther than 2^-176 from a midpoint).
func cosExact(ax float64, prec uint) float64 {
	for ; ; prec *= 2 {
		w := prec + 64
		q, r := reduceBig(ax, w)
		v := taylorBig(r, q&1 == 1, w)
		if q == 1 || q == 2 {
			v.Neg(v)
		}
		// reduceBig's error is under 2^-(w+4), taylorBig's under
		// w*2^-w: eps bounds both.
		eps := new(big.Float).SetMantExp(big.NewFloat(1), bits.Len(w)+8-int(w))
		lo := new(big.Float).SetPrec(w).SetMode(big.ToNegativeInf).Sub(v, eps)
		hi := new(big.Float).SetPrec(w).SetMode(big.ToPositiveInf).Add(v, eps)
		a, _ := lo.Float64()
		b, _ := hi.Float64()
		if a == b {
			return a
		}
	}
}

// reduceBig returns k mod 4 and r = ax - k*pi/2, k the integer nearest to
// ax*2/pi or next to it (|r| < 0.7855), with an absolute error below
// 2^-(w+4): pi is carried to w bits past the units of ax.
func reduceBig(ax float64, w uint) (int, *big.Float) {
	x := new(big.Float).SetFloat64(ax)
	e := uint(max(x.MantExp(nil), 0)) // ax < 2^e
	p := w + e + 8
	pi := piBig(p)
	// k = floor(ax*2/pi + 1/2), from a quotient good to 2^-15.
	kf := new(big.Float).SetPrec(e+16).Quo(x, pi)
	kf.SetMantExp(kf, 1).Add(kf, big.NewFloat(0.5))
	k, _ := kf.Int(nil)
	r := new(big.Float).SetPrec(p).SetInt(k)
	r.Mul(r, pi)
	r.SetMantExp(r, -1).Sub(x, r)
	q := new(big.Int).And(k, big.NewInt(3))
	return int(q.Int64()), r
}

// taylorBig returns sin(r) (odd) or cos(r) for |r| < 0.8 by its Taylor
// series at w bits, stopping at the first term under 2^-(w+8): fewer than
// w/4 terms, each adding rounding errors of about 2^-w.
func taylorBig(r *big.Float, odd bool, w uint) *big.Float {
	r2 := new(big.Float).SetPrec(w).Mul(r, r)
	term := new(big.Float).SetPrec(w).SetInt64(1)
	n := int64(0)
	if odd {
		term.Set(r)
		n = 1
	}
	sum := new(big.Float).SetPrec(w).Set(term)
	for term.Sign() != 0 && term.MantExp(nil) > -int(w)-8 {
		term.Mul(term, r2)
		term.Quo(term, new(big.Float).SetInt64(-(n+1)*(n+2)))
		n += 2
		sum.Add(sum, term)
	}
	return sum
}

// piCache holds pi at the highest precision asked for so far.
var piCache struct {
	sync.Mutex
	v *big.Float
}

// piBig returns pi with a relative error below 2^-prec (and at least
// 1280 bits, enough for every float64 at the precisions Cos uses). The
// result is shared: callers must not modify it.
func piBig(prec uint) *big.Float {
	piCache.Lock()
	defer piCache.Unlock()
	if piCache.v == nil || piCache.v.Prec() < prec+2 {
		piCache.v = machinPi(max(prec, 1280))
	}
	return piCache.v
}

// machinPi returns pi at prec+2 bits, within 2^-prec relative, by Machin's
// formula pi = 16 atan(1/5) - 4 atan(1/239) in fixed point with 32 guard
// bits (the truncations add up to less than 8g units of 2^-g).
func machinPi(prec uint) *big.Float {
	g := prec + 32
	pi := atanInv(5, g)
	pi.Lsh(pi, 2).Sub(pi, atanInv(239, g)).Lsh(pi, 2)
	return new(big.Float).SetPrec(prec+2).SetMantExp(new(big.Float).SetInt(pi), -int(g))
}

// atanInv returns atan(1/n)*2^g truncated, from the series
// 1/n - 1/(3n^3) + 1/(5n^5) - ..., within two units per term.
func atanInv(n int64, g uint) *big.Int {
	term := new(big.Int).Lsh(big.NewInt(1), g)
	n2 := big.NewInt(n * n)
	term.Quo(term, big.NewInt(n))
	sum := new(big.Int).Set(term)
	var t big.Int
	for k := int64(3); term.Sign() != 0; k += 2 {
		term.Quo(term, n2)
		t.Quo(term, big.NewInt(k))
		if k&2 != 0 {
			sum.Sub(sum, &t)
		} else {
			sum.Add(sum, &t)
		}
	}
	return sum
}
