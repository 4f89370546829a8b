package mnist

import (
	"math"

	"github.com/hdet-dev/hdet/internal/workload/internal/blas"
)

// kernels are the element-wise loops of a training step (blas.Kernels).
// goKernels is the reference; at start-up, on a CPU with AVX2 and when built
// with cgo, blas.AVX2 replaces it: C loops whose results are bit for bit the
// same (kernels_avx2_test.go checks it).
type kernels = blas.Kernels

type adamWConsts = blas.AdamWConsts

var goKernels = kernels{
	ReluDropout: goReluDropout,
	BackMask:    goBackMask,
	BiasGrad:    goBiasGrad,
	Average:     goAverage,
	AdamW:       goAdamW,
	SGD:         goSGD,
}

// kern is what training uses, kernName its name for benchmarks.
var (
	kern     = goKernels
	kernName = "go"
)

func init() {
	if blas.AVX2 != nil {
		kern, kernName = *blas.AVX2, "avx2"
	}
}

func goReluDropout(z, mask []float32, state uint64, p, scale float32) {
	for i, v := range z {
		z[i] = max(v, 0)
	}
	if p <= 0 {
		return
	}
	s := stream{s: state}
	mask = mask[:len(z)]
	for i := range z {
		m := scale
		if s.float32() < p {
			m = 0
		}
		mask[i] = m
		z[i] *= m
	}
}

func goBackMask(prev, act, mask []float32) {
	act = act[:len(prev)]
	if mask == nil {
		for i, a := range act {
			if !(a > 0) {
				prev[i] = 0
			}
		}
		return
	}
	mask = mask[:len(prev)]
	for i, a := range act {
		if a > 0 {
			prev[i] *= mask[i]
		} else {
			prev[i] = 0
		}
	}
}

func goBiasGrad(gb, delta []float32) {
	clear(gb)
	for r := 0; r < len(delta); r += len(gb) {
		for k, d := range delta[r : r+len(gb)] {
			gb[k] += d
		}
	}
}

func goAverage(avg, p []float32, k float32) {
	p = p[:len(avg)]
	for i, a := range avg {
		avg[i] = a + (p[i]-a)/k
	}
}

// minNormal32 is the smallest normal float32, 2^-126.
const minNormal32 = 0x1p-126

// flushTiny is x, or +0 when x is subnormal (or ±0). An optimizer state of
// a unit whose gradient stays 0 decays geometrically; once subnormal, every
// operation on it takes a microcode assist on x86, and the default run's
// steps went from 7 to 13 ms in the second half of training (issue 14's
// study 3). Flushing the stored state costs a comparison.
func flushTiny(x float32) float32 {
	if x > -minNormal32 && x < minNormal32 {
		return 0
	}
	return x
}

func goAdamW(p, g, m, v []float32, c adamWConsts) {
	g, m, v = g[:len(p)], m[:len(p)], v[:len(p)] // lets the compiler drop bounds checks
	for i := range p {
		gi := g[i]
		mi := flushTiny(c.B1*m[i] + (1-c.B1)*gi)
		vi := flushTiny(c.B2*v[i] + (1-c.B2)*gi*gi)
		m[i], v[i] = mi, vi
		p[i] = p[i]*c.Keep - c.Step*mi/(float32(math.Sqrt(float64(vi)))*c.InvSqrtBc2+c.Eps)
	}
}

func goSGD(p, g, buf []float32, mu, lr, wd float32) {
	g, buf = g[:len(p)], buf[:len(p)]
	for i := range p {
		b := flushTiny(mu*buf[i] + g[i] + wd*p[i])
		buf[i] = b
		p[i] -= lr * b
	}
}
