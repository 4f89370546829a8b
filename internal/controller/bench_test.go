//go:build unix

package controller

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/hdet-dev/hdet/internal/plan"
	"github.com/stretchr/testify/require"
)

// benchController is the default trio of explorers over a run long enough
// for b.N windows of 100 steps, already in the auto phase.
func benchController(b *testing.B, n int) *Controller {
	c, err := NewController(context.Background(),
		RunShape{Ranks: n, TotalSteps: 100 * (b.N + 2), WindowSteps: 100, Seed: 1}, threeExplorers(b, 0.1, 0))
	require.NoError(b, err)
	runWindows(b, c, 0, 1, lossesFor)
	return c
}

var benchRanks = []int{64, 1024, 16384}

// BenchmarkControllerObserve is the controller's Observe alone: the values
// of every rank and three explorers' meta-updates (issue 11: < 1 ms per
// window at N = 16384).
func BenchmarkControllerObserve(b *testing.B) {
	ctx := context.Background()
	for _, n := range benchRanks {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			c := benchController(b, n)
			var cpu time.Duration
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				p, _, err := c.Plan(ctx)
				require.NoError(b, err)
				losses := lossesFor(p)
				b.StartTimer()
				t0 := cpuTime()
				if _, _, err := c.Observe(ctx, losses, nil, 0); err != nil {
					b.Fatal(err)
				}
				cpu += cpuTime() - t0
			}
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkControllerWindow is rank 0's whole per-window cost: Plan
// (explorers and permutations), encoding the plan for the broadcast, Observe.
func BenchmarkControllerWindow(b *testing.B) {
	ctx := context.Background()
	for _, n := range benchRanks {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			c := benchController(b, n)
			losses := make([]float64, n)
			for r := range losses {
				losses[r] = 1 + float64(r%7)*0.01
			}
			b.ResetTimer()
			t0 := cpuTime()
			for range b.N {
				p, _, err := c.Plan(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := p.MarshalBinary(); err != nil {
					b.Fatal(err)
				}
				if _, _, err := c.Observe(ctx, losses, nil, 0); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((cpuTime()-t0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkPlanDecode is what every other rank pays per window.
func BenchmarkPlanDecode(b *testing.B) {
	for _, n := range benchRanks {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			c := benchController(b, n)
			p, _, err := c.Plan(context.Background())
			require.NoError(b, err)
			enc, err := p.MarshalBinary()
			require.NoError(b, err)
			b.SetBytes(int64(len(enc)))
			b.ResetTimer()
			t0 := cpuTime()
			for range b.N {
				var q plan.Plan
				if err := q.UnmarshalBinary(enc); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((cpuTime()-t0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuTime is the process's user+system CPU time. The benchmarks report it
// per op beside ns/op because on a shared, loaded machine wall time
// measures the neighbours as much as the code.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
