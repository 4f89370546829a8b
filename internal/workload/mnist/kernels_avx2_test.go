//go:build cgo && amd64

package mnist

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/cpu"

	"github.com/hdet-dev/hdet/internal/engine"
	"github.com/hdet-dev/hdet/internal/workload/internal/blas"
)

func needAVX2(t *testing.T) {
	if !cpu.X86.HasAVX2 {
		t.Skip("this CPU has no AVX2: training runs the Go kernels only")
	}
}

// sameBits fails unless a and b are bit-identical, NaNs aside (any NaN
// matches any NaN: a NaN parameter makes its rank unhealthy whatever its bits).
func sameBits(t *testing.T, what string, a, b []float32) {
	t.Helper()
	require.Len(t, b, len(a), what)
	for i := range a {
		if math.IsNaN(float64(a[i])) && math.IsNaN(float64(b[i])) {
			continue
		}
		require.Equal(t, math.Float32bits(a[i]), math.Float32bits(b[i]), "%s[%d]: %g vs %g", what, i, a[i], b[i])
	}
}

// specials are values where a vector loop could part from the scalar one.
var specials = []float32{0, float32(math.Copysign(0, -1)), 1e-40, -1e-40, float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 3e38, -3e38, 1, -1}

// randomVec is n values from s, a few of them specials.
func randomVec(s *stream, n int, scale float32) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = (2*s.float32() - 1) * scale
		if s.intn(16) == 0 {
			x[i] = specials[s.intn(len(specials))]
		}
	}
	return x
}

func clone(xs ...[]float32) [][]float32 {
	out := make([][]float32, len(xs))
	for i, x := range xs {
		out[i] = append([]float32(nil), x...)
	}
	return out
}

func TestAVX2KernelsMatchGoBitForBit(t *testing.T) {
	needAVX2(t)
	s := newStream(7)
	for _, n := range []int{0, 1, 7, 8, 9, 31, 256, 1000, 4099} {
		z, mask := randomVec(s, n, 3), make([]float32, n)
		for _, p := range []float32{0, 0.1, 0.5} {
			a, b := clone(z, mask), clone(z, mask)
			goKernels.ReluDropout(a[0], a[1], 12345+uint64(n), p, 1/(1-p))
			blas.AVX2.ReluDropout(b[0], b[1], 12345+uint64(n), p, 1/(1-p))
			sameBits(t, "reluDropout z", a[0], b[0])
			if p > 0 {
				sameBits(t, "reluDropout mask", a[1], b[1])
			}
		}
		prev, act, m := randomVec(s, n, 1), randomVec(s, n, 1), randomVec(s, n, 2)
		for _, mk := range [][]float32{nil, m} {
			a, b := clone(prev), clone(prev)
			goKernels.BackMask(a[0], act, mk)
			blas.AVX2.BackMask(b[0], act, mk)
			sameBits(t, "backMask", a[0], b[0])
		}
		for _, cols := range []int{1, 10, 13, 256} {
			delta := randomVec(s, cols*(n%70), 1)
			ga, gb := randomVec(s, cols, 1), randomVec(s, cols, 1) // overwritten
			goKernels.BiasGrad(ga, delta)
			blas.AVX2.BiasGrad(gb, delta)
			sameBits(t, "biasGrad", ga, gb)
		}
		avg, it := randomVec(s, n, 1), randomVec(s, n, 1)
		a, b := clone(avg), clone(avg)
		goKernels.Average(a[0], it, 3)
		blas.AVX2.Average(b[0], it, 3)
		sameBits(t, "average", a[0], b[0])
		p, g, m1, v := randomVec(s, n, 1), randomVec(s, n, 1), randomVec(s, n, 0.1), randomVec(s, n, 0.01)
		for i := range v {
			v[i] = float32(math.Abs(float64(v[i])))
		}
		c := adamWConsts{B1: 0.9, B2: 0.999, Keep: 0.99999, Step: 1.3e-3, InvSqrtBc2: 3.2, Eps: 1e-8}
		a, b = clone(p, m1, v), clone(p, m1, v)
		goKernels.AdamW(a[0], g, a[1], a[2], c)
		blas.AVX2.AdamW(b[0], g, b[1], b[2], c)
		for i, what := range []string{"adamW p", "adamW m", "adamW v"} {
			sameBits(t, what, a[i], b[i])
		}
		a, b = clone(p, m1), clone(p, m1)
		goKernels.SGD(a[0], g, a[1], 0.9, 0.05, 1e-4)
		blas.AVX2.SGD(b[0], g, b[1], 0.9, 0.05, 1e-4)
		sameBits(t, "sgd p", a[0], b[0])
		sameBits(t, "sgd buf", a[1], b[1])
	}
}

// An optimizer state that decays below the smallest normal float32 is
// stored as +0 by both kernel sets: subnormals cost a microcode assist per
// operation on x86.
func TestOptimizerStateFlushesSubnormals(t *testing.T) {
	const n = 11             // a vector of 8 and a scalar tail
	tiny := float32(1.2e-38) // normal; times 0.9 or 0.5 it is subnormal
	c := adamWConsts{B1: 0.9, B2: 0.5, Keep: 1, Step: 1e-3, InvSqrtBc2: 1, Eps: 1e-8}
	sets := map[string]kernels{"go": goKernels}
	if cpu.X86.HasAVX2 { // without it training runs the Go kernels only
		sets["avx2"] = *blas.AVX2
	}
	for name, k := range sets {
		p, g, m, v := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
		for i := range m {
			m[i], v[i], p[i] = tiny, tiny, 1
		}
		k.AdamW(p, g, m, v, c)
		buf := make([]float32, n)
		for i := range buf {
			buf[i] = -tiny
		}
		k.SGD(make([]float32, n), g, buf, 0.9, 0.1, 0)
		for i := range n {
			require.Equal(t, uint32(0), math.Float32bits(m[i]), "%s: m[%d]", name, i)
			require.Equal(t, uint32(0), math.Float32bits(v[i]), "%s: v[%d]", name, i)
			require.Equal(t, uint32(0), math.Float32bits(buf[i]), "%s: buf[%d]", name, i)
		}
	}
}

// Whole windows trained with either kernel set end with the same slab and
// the same losses, with dropout and with every optimizer.
func TestTrainingIsTheSameWithEitherKernels(t *testing.T) {
	needAVX2(t)
	for _, opt := range []string{AdamW, SGD} {
		t.Run(opt, func(t *testing.T) {
			var slabs [][]float32
			var losses [][]float64
			for _, k := range []kernels{goKernels, *blas.AVX2} {
				old := kern
				kern = k
				cfg := smallConfig(opt)
				cfg.Dropout, cfg.LabelSmoothing = 0.3, 0.1
				r := newReplica(t, cfg)
				res, err := r.TrainWindow(context.Background(), engine.Window{Steps: 60, V: lrRamp(0, 60), ProbeTail: 10})
				kern = old
				require.NoError(t, err)
				slabs, losses = append(slabs, r.SyncBuffer(true)), append(losses, append(res.Losses, res.Probe))
			}
			sameBits(t, "slab", slabs[0], slabs[1])
			require.Equal(t, losses[0], losses[1])
		})
	}
}
