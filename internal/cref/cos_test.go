package cref

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"golang.org/x/sys/cpu"

	"github.com/hdet-dev/hdet/hparam"
)

// hparam.Cos, the pure-Go port of glibc's cos, against the C library's on
// a few million arguments: OneCycle's whole domain [0, pi] densely, every
// branch of __cos (tiny, table, near pi/2, the four-part reduction and
// branred's for huge arguments) by random bit patterns, and the specials.
// glibc on an x86-64 CPU without FMA runs another build of cos, which may
// differ in the last bit for a few arguments: the port follows the FMA
// build, the one every current x86-64 CPU runs.
func TestCosMatchesTheCLibrary(t *testing.T) {
	if runtime.GOARCH == "amd64" && !cpu.X86.HasFMA {
		t.Skip("no FMA: the C library runs its other build of cos here")
	}
	check := func(x float64) {
		t.Helper()
		got, want := hparam.Cos(x), Cos(x)
		if math.Float64bits(got) != math.Float64bits(want) && !(math.IsNaN(got) && math.IsNaN(want)) {
			t.Fatalf("cos(%v = %#x): port %v (%#x), C %v (%#x)", x, math.Float64bits(x), got, math.Float64bits(got), want, math.Float64bits(want))
		}
	}
	for _, x := range []float64{0, 1e-300, 0x1p-27, 0x1p-27 - 0x1p-80, 0.855469, 2.426265, math.Pi / 2, math.Pi,
		105414350, 105414351, 1e22, math.MaxFloat64, math.SmallestNonzeroFloat64, math.Inf(1), math.NaN()} {
		check(x)
		check(-x)
	}
	const n = 1 << 19
	for i := range n { // OneCycle's arguments, pi*pct
		check(math.Pi * float64(i) / n)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2 * n { // uniform in [-8, 8]: the table, near pi/2 and the reduction
		check(16*r.Float64() - 8)
	}
	for range n { // random exponents from 2^-123 to 2^1023: every branch
		check(math.Float64frombits(r.Uint64()&^(0x7ff<<52) | uint64(900+r.IntN(2047-900))<<52))
	}
}
