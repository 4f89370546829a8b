package blas

// Kernels are the element-wise loops of a training step, beside the matrix
// product: the built-in workload's Go loops are the reference, and AVX2,
// where set, computes every element with the same float32 operations in the
// same order (no fused multiply-add), so results are bit for bit the same
// either way.
type Kernels struct {
	// ReluDropout applies ReLU to z, then, with p > 0, draws mask[i] = 0
	// with probability p and scale otherwise from the stream whose state is
	// state, and multiplies z by it.
	ReluDropout func(z, mask []float32, state uint64, p, scale float32)
	// BackMask zeroes prev where act <= 0 (the unit did not pass) and
	// multiplies it by mask elsewhere; mask nil means no dropout.
	BackMask func(prev, act, mask []float32)
	// BiasGrad sets gb to the column sums of the rows×len(gb) matrix delta.
	BiasGrad func(gb, delta []float32)
	// Average folds p into the running average avg of k-1 iterates:
	// avg += (p - avg)/k.
	Average func(avg, p []float32, k float32)
	AdamW   func(p, g, m, v []float32, c AdamWConsts)
	SGD     func(p, g, buf []float32, mu, lr, wd float32)
}

// AVX2 is Kernels in C with AVX2, set at start-up on a CPU that has it when
// built with cgo on amd64; nil otherwise.
var AVX2 *Kernels

// AdamWConsts are one segment's AdamW constants, in float32 as applied.
type AdamWConsts struct {
	B1, B2, Keep, Step, InvSqrtBc2, Eps float32
}
