package mnist

import (
	"context"
	"runtime"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hdet-dev/hdet/internal/engine"
)

// threadCPU is the calling thread's CPU time: on the shared, oversubscribed
// dev box it prices a step without the time the thread spent waiting.
func threadCPU(b *testing.B) time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ts.Nano())
}

// stepGemms runs the matrix products of one training step of r, on the same
// shapes and buffers and in the same order as forward and backward.
func stepGemms(r *Replica, n int) {
	ws, in := r.train, r.train.x
	for li, l := range r.layers {
		gemm.Sgemm(false, false, n, l.out, l.in, 1, in, l.in, l.w, l.out, 1, ws.act[li][:n*l.out], l.out)
		in = ws.act[li]
	}
	for li := len(r.layers) - 1; li >= 0; li-- {
		l := r.layers[li]
		in := ws.x
		if li > 0 {
			in = ws.act[li-1]
		}
		gemm.Sgemm(true, false, l.in, l.out, n, 1, in, l.in, ws.delta[li][:n*l.out], l.out, 0, l.gw, l.out)
		if li > 0 {
			gemm.Sgemm(false, true, n, l.in, l.out, 1, ws.delta[li][:n*l.out], l.out, l.w, l.out, 0, ws.delta[li-1][:n*l.in], l.in)
		}
	}
}

// BenchmarkTrainerGemmShare (make bench-trainer) measures, in one go and
// interleaved in blocks, a whole training step of the default MLP (batch 64)
// and the step's matrix products alone, in thread CPU time, and reports
// gemm-share: the GEMMs' time over the step's, the fraction of what the BLAS
// reaches at these shapes that the trainer keeps. Medians over the blocks,
// for each optimizer, with the kernels training uses and, where those are
// not the Go ones, with the Go ones for comparison.
//
// Every restart steps the replica goes back to its initial parameters: on
// the synthetic set the model fits, AdamW's second moments of vanishing
// gradients turn subnormal after about 500 steps, and arithmetic on
// subnormals costs the CPU microcode assists that real MNIST training does
// not see.
func BenchmarkTrainerGemmShare(b *testing.B) {
	sets := []string{kernName}
	if kernName != "go" {
		sets = append(sets, "go")
	}
	fast := kern
	for _, opt := range []string{AdamW, SGD} {
		for _, set := range sets {
			b.Run(opt+"/kernels="+set, func(b *testing.B) {
				defer func() { kern = fast }()
				if set == "go" {
					kern = goKernels
				}
				step, gm := stepAndGemms(b, opt)
				b.ReportMetric(step, "step-ms")
				b.ReportMetric(gm, "gemm-ms")
				b.ReportMetric(100*gm/step, "gemm-share-%")
			})
		}
	}
}

// stepAndGemms returns the median thread CPU milliseconds of a step and of
// its GEMMs alone.
func stepAndGemms(b *testing.B, opt string) (step, gemms float64) {
	const block, restart = 25, 200
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r := benchConfig(b, opt)
	initial := slices.Clone(r.SyncBuffer(true))
	var steps, gms []float64
	t := 0
	for b.Loop() {
		if t == restart {
			copy(r.SyncBuffer(true), initial)
			t = 0
		}
		c0 := threadCPU(b)
		if _, err := r.TrainWindow(context.Background(), engine.Window{Start: t, Steps: block}); err != nil {
			b.Fatal(err)
		}
		t += block
		c1 := threadCPU(b)
		for range block {
			stepGemms(r, r.cfg.BatchSize)
		}
		c2 := threadCPU(b)
		steps = append(steps, float64(c1-c0)/1e6/block)
		gms = append(gms, float64(c2-c1)/1e6/block)
	}
	return median(steps), median(gms)
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
