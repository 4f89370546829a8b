package mpi

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// A reschedule is due once yieldEvery has passed since the last one, and
// only one caller takes it.
func TestDueEveryYieldEvery(t *testing.T) {
	var last atomic.Int64
	ms := int64(time.Millisecond)
	assert.False(t, due(&last, 1*ms), "1 ms after the start")
	assert.True(t, due(&last, 5*ms), "5 ms after the start")
	assert.False(t, due(&last, 9*ms), "4 ms after the last")
	assert.True(t, due(&last, 10*ms), "5 ms after the last")
	assert.Equal(t, 10*ms, last.Load())
	assert.True(t, due(&last, 60*ms), "long after: one reschedule, not one per missed period")
	assert.False(t, due(&last, 61*ms))
}

// Every blocking MPI call goes through the scheduler when one is due, so a
// loop of collectives never runs 10 ms without a reschedule.
func TestCollectivesReschedule(t *testing.T) {
	w := World()
	for _, f := range []func() error{
		w.Barrier,
		func() error { return w.AllreduceFloat32([]float32{1}, Sum) },
		func() error { _, err := w.BcastMessage([]byte("m"), 0); return err },
	} {
		lastYield.Store(-int64(time.Hour))
		assert.NoError(t, f())
		assert.Greater(t, lastYield.Load(), -int64(time.Hour), "a due reschedule was taken")
	}
}
