package cref

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/hdet-dev/hdet/hparam/schedule"
)

// cosDiffs compares schedule.Cos with the C library's cos. Where they
// differ, schedule.Cos must be the correctly rounded result (the oracle's);
// the C library's is then a misrounding, which is counted and kept.
type cosDiffs struct {
	n    int       // arguments compared
	diff []float64 // those where the C library's cos is misrounded
}

// check compares at x, and reports false after an error.
func (d *cosDiffs) check(t testing.TB, x float64) bool {
	t.Helper()
	d.n++
	got, c := schedule.Cos(x), Cos(x)
	if math.Float64bits(got) == math.Float64bits(c) || math.IsNaN(got) && math.IsNaN(c) {
		return true
	}
	want, err := oracleCos(x)
	if err != nil || math.Float64bits(got) != math.Float64bits(want) {
		t.Errorf("schedule.Cos(%v = %#x) = %v, the correctly rounded cosine is %v (C: %v, oracle error: %v)",
			x, math.Float64bits(x), got, want, c, err)
		return false
	}
	d.diff = append(d.diff, x)
	return true
}

func (d *cosDiffs) add(e cosDiffs) {
	d.n += e.n
	d.diff = append(d.diff, e.diff...)
}

// report logs the counts and the first ten distinct misroundings, with
// the distance of each result from the exact cosine.
func (d *cosDiffs) report(t testing.TB, what string) {
	t.Helper()
	distinct := map[float64]bool{}
	for _, x := range d.diff {
		distinct[x] = true
	}
	t.Logf("%s: %d arguments, %d where the C library's cos is not correctly rounded (%d distinct)",
		what, d.n, len(d.diff), len(distinct))
	shown := map[float64]bool{}
	for _, x := range d.diff {
		if shown[x] {
			continue
		}
		if shown[x] = true; len(shown) > 10 {
			break
		}
		got, c := schedule.Cos(x), Cos(x)
		t.Logf("  x = %v (%#x): schedule.Cos %v (%.4f ulp off), C %v (%.4f ulp off)",
			x, math.Float64bits(x), got, ulpsFrom(x, got), c, ulpsFrom(x, c))
	}
}

// mixedSets are five sets of deterministic arguments, 400,000 each.
var mixedSets = []struct {
	name string
	gen  func(r *rand.Rand, i, n int, pio2 [2]float64) float64
}{
	{"uniform in [0, pi]", func(r *rand.Rand, _, _ int, _ [2]float64) float64 { return math.Pi * r.Float64() }},
	{"uniform in [-10, 10]", func(r *rand.Rand, _, _ int, _ [2]float64) float64 { return 20*r.Float64() - 10 }},
	{"either sign, exponents 2^-60 to 2^1023", func(r *rand.Rand, _, _ int, _ [2]float64) float64 {
		return math.Float64frombits(r.Uint64()&^(0x7ff<<52) | uint64(1023-60+r.IntN(1024+60))<<52)
	}},
	// |r| < 2^-20 after the reduction; cwLimit is 2^30 < 2^30*pi/2.
	{"within 8 ulps of k*pi/2, 0 < k < 2^30", func(r *rand.Rand, _, _ int, pio2 [2]float64) float64 {
		e := r.IntN(30)
		k := float64(1<<e + r.Uint64N(1<<e))
		x := math.FMA(k, pio2[0], k*pio2[1]) // k*pi/2 within an ulp
		return math.Float64frombits(math.Float64bits(x) + uint64(r.IntN(17)) - 8)
	}},
	// Cosine annealing's float64(math.Pi * pct), pct = i/(n-1).
	{"pi*(i/(n-1)), i = 0..n-1", func(_ *rand.Rand, i, n int, _ [2]float64) float64 {
		return math.Pi * (float64(i) / float64(n-1))
	}},
}

// schedule.Cos against the C library's cos, bit for bit, on the specials and
// two million arguments (a tenth under -race): OneCycle's domain [0, pi],
// small ones, every exponent, the hardest reductions (near multiples of
// pi/2) and cosine annealing's arguments. The C library's cos need not be
// correctly rounded (glibc 2.36's misrounds about one argument in 700);
// where it differs, schedule.Cos must be the oracle's correctly rounded
// result.
func TestCosMatchesTheCLibrary(t *testing.T) {
	var d cosDiffs
	for _, x := range []float64{0, 0x1p-1074, 1e-300, 0x1p-27, 0x1p-26, 1e-8, 0.5, 0.785, math.Pi / 4, 1, math.Pi / 2, 2, math.Pi,
		1e9, 0x1p30 - 1, 0x1p30, 0x1p30 + 1, 1e22, 0x1p1023, math.MaxFloat64, math.Inf(1), math.NaN()} {
		if !d.check(t, x) || !d.check(t, -x) {
			return
		}
	}
	hp := new(big.Float).SetPrec(200).Quo(oraclePi(), big.NewFloat(2))
	var pio2 [2]float64
	pio2[0], _ = hp.Float64()
	pio2[1], _ = hp.Sub(hp, big.NewFloat(pio2[0])).Float64()
	n := 400_000
	if raceEnabled { // a tenth: the detector makes it ten times slower
		n /= 10
	}
	for i, set := range mixedSets {
		var s cosDiffs
		r := rand.New(rand.NewPCG(uint64(i), 31))
		for j := range n {
			if !s.check(t, set.gen(r, j, n, pio2)) {
				return
			}
		}
		s.report(t, set.name)
		d.add(s)
	}
	t.Logf("in all: %d arguments, %d where the C library's cos is not correctly rounded", d.n, len(d.diff))
}
