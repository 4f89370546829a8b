package mnist

import (
	"context"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/hdet-dev/hdet/internal/engine"
	"github.com/hdet-dev/hdet/internal/workload/internal/blas"
)

// benchConfig is the default 784-256-256-10 MLP at batch 64 on a synthetic
// set of MNIST's shape, so the benchmarks need no download.
func benchConfig(b *testing.B, opt string) *Replica {
	cfg := DefaultConfig()
	cfg.Optimizer = opt
	cfg.Data = &Data{Train: synthetic(2048, 784, 10, 1, 1)}
	return newReplica(b, cfg)
}

// cpuTime is the process's user+system CPU time. Benchmarks report it per
// op beside wall time because the shared dev box is often oversubscribed,
// which inflates wall time but not the CPU a step costs.
func cpuTime(b *testing.B) time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		b.Fatal(err)
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime(b)-start)/1e6/float64(b.N), "cpu-ms/op")
}

// BenchmarkForwardBackward times one forward and backward pass at batch 64
// (about 0.1 GFLOP) under each BLAS backend; run with -cpu 1, one core per rank.
func BenchmarkForwardBackward(b *testing.B) {
	for _, be := range []struct {
		name string
		g    blas.Gemm
	}{{"gonum", blas.Gonum{}}, {"default", blas.Default}} {
		b.Run(be.name, func(b *testing.B) {
			old := gemm
			gemm = be.g
			defer func() { gemm = old }()
			r := benchConfig(b, AdamW)
			idx := r.batchIndices(0)
			r.train.load(r.cfg.Data.Train, 64, func(k int) int { return int(idx[k]) })
			drop := func(l int) *stream { return newStream(1, purposeDropout, 0, 0, uint64(l)) }
			c0 := cpuTime(b)
			for b.Loop() {
				forward(r.layers, r.train, 64, 0.1, 0, drop, true)
				backward(r.layers, r.train, 64, 0.1)
			}
			reportCPU(b, c0)
		})
	}
}

// BenchmarkTrainStep times whole training steps (batch drawing, dropout,
// forward, backward, optimizer) with the default backend.
func BenchmarkTrainStep(b *testing.B) {
	for _, opt := range []string{AdamW, SGD} {
		b.Run(opt, func(b *testing.B) {
			r := benchConfig(b, opt)
			t := 0
			c0 := cpuTime(b)
			for b.Loop() {
				if _, err := r.TrainWindow(context.Background(), engine.Window{Start: t, Steps: 1}); err != nil {
					b.Fatal(err)
				}
				t++
			}
			reportCPU(b, c0)
		})
	}
}

// BenchmarkProbeWindow prices the probe signal: windows of T = 50 steps
// without and with the tail average over the last 25 iterates plus the
// eval-mode probe on 1024 examples, interleaved, in thread CPU time
// (medians; both replicas restart from their initial parameters every 200
// steps, see BenchmarkTrainerGemmShare), and the scratch memory the probe
// keeps: the tail-average buffer, and the evaluation workspace it shares
// with Evaluate.
func BenchmarkProbeWindow(b *testing.B) {
	const T, restart = 50, 200
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	plain, probing := benchConfig(b, AdamW), benchConfig(b, AdamW)
	initial := slices.Clone(plain.SyncBuffer(true))
	var tPlain, tProbe []float64
	t := 0
	for b.Loop() {
		if t == restart {
			copy(plain.SyncBuffer(true), initial)
			copy(probing.SyncBuffer(true), initial)
			t = 0
		}
		c0 := threadCPU(b)
		if _, err := plain.TrainWindow(context.Background(), engine.Window{Start: t, Steps: T}); err != nil {
			b.Fatal(err)
		}
		c1 := threadCPU(b)
		if _, err := probing.TrainWindow(context.Background(), engine.Window{Start: t, Steps: T, ProbeTail: T / 2}); err != nil {
			b.Fatal(err)
		}
		c2 := threadCPU(b)
		tPlain, tProbe = append(tPlain, float64(c1-c0)/1e6), append(tProbe, float64(c2-c1)/1e6)
		t += T
	}
	mp, mq := median(tPlain), median(tProbe)
	b.ReportMetric(mp, "plain-ms")
	b.ReportMetric(mq, "probe-ms")
	b.ReportMetric(100*(mq-mp)/mp, "extra-%")
	ws := probing.eval
	scratch := len(ws.x)*4 + len(ws.y)
	for i := range ws.act {
		scratch += 4 * (len(ws.act[i]) + len(ws.delta[i]))
	}
	for _, m := range ws.mask {
		scratch += 4 * len(m)
	}
	b.ReportMetric(float64(4*len(probing.probe.avg))/(1<<20), "avg-MiB")
	b.ReportMetric(float64(scratch)/(1<<20), "eval-ws-MiB")
}
