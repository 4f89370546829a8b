//go:build cgo && amd64

package blas

/*
#cgo CFLAGS: -O2 -std=c11
#include "kernels_avx2.h"
*/
import "C"

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// avx2Kernels run kernels_avx2.c's loops. cgo costs tens of nanoseconds a
// call; every call here covers at least a layer's bias (hundreds of
// elements), most a whole activation or parameter segment.
var avx2Kernels = Kernels{
	ReluDropout: func(z, mask []float32, state uint64, p, scale float32) {
		if len(z) == 0 {
			return
		}
		var mp *C.float
		if p > 0 {
			mask = mask[:len(z)]
			mp = f32p(mask)
		}
		C.hdet_relu_dropout(f32p(z), mp, C.int64_t(len(z)), C.uint64_t(state), C.float(p), C.float(scale))
	},
	BackMask: func(prev, act, mask []float32) {
		if len(prev) == 0 {
			return
		}
		act = act[:len(prev)]
		var mp *C.float
		if mask != nil {
			mask = mask[:len(prev)]
			mp = f32p(mask)
		}
		C.hdet_back_mask(f32p(prev), f32p(act), mp, C.int64_t(len(prev)))
	},
	BiasGrad: func(gb, delta []float32) {
		if len(gb) == 0 || len(delta) == 0 {
			clear(gb)
			return
		}
		rows := len(delta) / len(gb)
		_ = delta[rows*len(gb)-1]
		C.hdet_bias_grad(f32p(gb), f32p(delta), C.int64_t(len(gb)), C.int64_t(rows))
	},
	Average: func(avg, p []float32, k float32) {
		if len(avg) == 0 {
			return
		}
		p = p[:len(avg)]
		C.hdet_average(f32p(avg), f32p(p), C.int64_t(len(avg)), C.float(k))
	},
	AdamW: func(p, g, m, v []float32, c AdamWConsts) {
		if len(p) == 0 {
			return
		}
		g, m, v = g[:len(p)], m[:len(p)], v[:len(p)]
		cc := C.hdet_adamw_consts{b1: C.float(c.B1), b2: C.float(c.B2), keep: C.float(c.Keep),
			step: C.float(c.Step), inv_sqrt_bc2: C.float(c.InvSqrtBc2), eps: C.float(c.Eps)}
		C.hdet_adamw(f32p(p), f32p(g), f32p(m), f32p(v), C.int64_t(len(p)), &cc)
	},
	SGD: func(p, g, buf []float32, mu, lr, wd float32) {
		if len(p) == 0 {
			return
		}
		g, buf = g[:len(p)], buf[:len(p)]
		C.hdet_sgd(f32p(p), f32p(g), f32p(buf), C.int64_t(len(p)), C.float(mu), C.float(lr), C.float(wd))
	},
}

// f32p is the address of x's first element; the slicing above has checked
// that the C loop stays within x.
func f32p(x []float32) *C.float { return (*C.float)(unsafe.Pointer(&x[0])) }

func init() {
	if cpu.X86.HasAVX2 {
		AVX2 = &avx2Kernels
	}
}
