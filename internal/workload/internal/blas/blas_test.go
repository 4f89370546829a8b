package blas

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// naive is the textbook triple loop in float64, the reference both backends
// must match to float32 rounding.
func naive(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int,
	b []float32, ldb int, beta float32, c []float32, ldc int) []float64 {
	at := func(i, p int) float64 {
		if transA {
			return float64(a[p*lda+i])
		}
		return float64(a[i*lda+p])
	}
	bt := func(p, j int) float64 {
		if transB {
			return float64(b[j*ldb+p])
		}
		return float64(b[p*ldb+j])
	}
	out := make([]float64, m*n)
	for i := range m {
		for j := range n {
			var s float64
			for p := range k {
				s += at(i, p) * bt(p, j)
			}
			out[i*n+j] = float64(alpha)*s + float64(beta)*float64(c[i*ldc+j])
		}
	}
	return out
}

func filled(n int, seed float32) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(math.Sin(float64(seed) + float64(i)*0.37))
	}
	return x
}

func TestBackendsMatchReference(t *testing.T) {
	backends := map[string]Gemm{"gonum": Gonum{}, "default": Default}
	const m, n, k, pad = 7, 5, 9, 3 // odd sizes and padded strides catch ld mix-ups
	for name, g := range backends {
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/ta=%v/tb=%v", name, ta, tb), func(t *testing.T) {
					ar, ac := m, k
					if ta {
						ar, ac = k, m
					}
					br, bc := k, n
					if tb {
						br, bc = n, k
					}
					lda, ldb, ldc := ac+pad, bc+pad, n+pad
					a, b, c := filled(ar*lda, 1), filled(br*ldb, 2), filled(m*ldc, 3)
					want := naive(ta, tb, m, n, k, 0.5, a, lda, b, ldb, -2, c, ldc)
					g.Sgemm(ta, tb, m, n, k, 0.5, a, lda, b, ldb, -2, c, ldc)
					for i := range m {
						for j := range n {
							require.InDelta(t, want[i*n+j], c[i*ldc+j], 1e-5, "C[%d,%d]", i, j)
						}
						for j := n; j < ldc; j++ { // padding untouched
							require.Equal(t, filled(m*ldc, 3)[i*ldc+j], c[i*ldc+j])
						}
					}
				})
			}
		}
	}
}

// The shapes of one forward+backward step of the 784-256-256-10 MLP at batch
// 64 (the workload's BenchmarkStep times the whole step).
var shapes = []struct {
	name    string
	ta, tb  bool
	m, n, k int
}{
	{"fwd_64x256x784", false, false, 64, 256, 784},
	{"fwd_64x256x256", false, false, 64, 256, 256},
	{"dW_784x256x64", true, false, 784, 256, 64},
	{"dX_64x256x256", false, true, 64, 256, 256},
}

func BenchmarkSgemm(b *testing.B) {
	for _, be := range []struct {
		name string
		g    Gemm
	}{{"gonum", Gonum{}}, {"default", Default}} {
		for _, s := range shapes {
			b.Run(be.name+"/"+s.name, func(b *testing.B) {
				lda, ldb := s.k, s.n
				if s.ta {
					lda = s.m
				}
				if s.tb {
					ldb = s.k
				}
				x, y, z := filled(s.m*s.k, 1), filled(s.k*s.n, 2), make([]float32, s.m*s.n)
				b.ReportAllocs()
				for b.Loop() {
					be.g.Sgemm(s.ta, s.tb, s.m, s.n, s.k, 1, x, lda, y, ldb, 0, z, s.n)
				}
				b.ReportMetric(2*float64(s.m*s.n*s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOPS")
			})
		}
	}
}

type missingLib struct{ Gonum }

func (missingLib) Load() error { return errors.New("no libopenblas.so.0") }

// Ready passes a loader's error on and accepts a backend with nothing to load.
func TestReady(t *testing.T) {
	require.NoError(t, Ready(Gonum{}))
	require.ErrorContains(t, Ready(missingLib{}), "libopenblas.so.0")
}
