//go:build unix

package schedule

import (
	"math"
	"syscall"
	"testing"
	"time"
)

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

// BenchmarkCos is Cos's fast path on OneCycle's arguments, beside
// BenchmarkMathCos (Go's math.Cos, not correctly rounded).
func BenchmarkCos(b *testing.B)     { benchCos(b, Cos) }
func BenchmarkMathCos(b *testing.B) { benchCos(b, math.Cos) }

func benchCos(b *testing.B, cos func(float64) float64) {
	sum := 0.0
	t0 := cpuTime()
	for i := range b.N {
		sum += cos(math.Pi * (float64(i%1000) / 999))
	}
	b.ReportMetric(float64((cpuTime()-t0).Nanoseconds())/float64(b.N), "cpu-ns/op")
	if math.IsNaN(sum) {
		b.Fatal(sum)
	}
}
