package mpi

import (
	"runtime"
	"sync/atomic"
	"time"
)

// yieldEvery is how long the goroutine making MPI calls may go without
// passing through the Go scheduler. Go's sysmon preempts a goroutine that
// has run 10 ms without being rescheduled; when that goroutine is inside a
// cgo call (a collective), sysmon takes its P and wakes another thread for
// it, the goroutine is preempted as the call returns and often resumes on
// that thread, and sysmon goes back to polling every 20 µs. A loop of 4 KiB
// allreduces paid that every few calls: 10 to 20 times the futex calls of
// the same loop in C (docs/performance.md, "The MPI binding against C").
// A reschedule every yieldEvery costs one thread wake-up instead, and half
// the 10 ms leaves a collective that starts just before the next one is due
// 5 ms before sysmon looks.
const yieldEvery = 5 * time.Millisecond

var (
	epoch     = time.Now()
	lastYield atomic.Int64 // nanoseconds after epoch of the last reschedule
)

// yieldIfDue reschedules the calling goroutine if yieldEvery has passed
// since the binding last did, so that no collective starts late in the
// goroutine's 10 ms. Called before every MPI call that may block.
func yieldIfDue() {
	if due(&lastYield, int64(time.Since(epoch))) {
		runtime.Gosched()
	}
}

// due reports whether a reschedule is due at now, and records it if so.
func due(last *atomic.Int64, now int64) bool {
	l := last.Load()
	return now-l >= int64(yieldEvery) && last.CompareAndSwap(l, now)
}
