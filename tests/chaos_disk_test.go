package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/stretchr/testify/require"
)

// The chaos soak's faults on the run directory's disk: filled for a moment,
// or past run.checkpoint_max_failing.

// fill leaves at most leave bytes free on the run directory's file system
// for d.
func (c *chaos) fill(leave int64, d time.Duration) (*injection, func()) {
	return c.armFill(leave, d)()
}

// armFill draws how much a fill will leave free (at most leave bytes) on
// the run directory's file system for d; the strike fills it.
func (c *chaos) armFill(leave int64, d time.Duration) func() (*injection, func()) {
	left := c.rng.Int64N(leave + 1)
	return func() (*injection, func()) {
		path := filepath.Join(c.fsDir, fmt.Sprintf("fill-%d", time.Now().UnixNano()))
		f, err := os.Create(path)
		require.NoError(c.t, err)
		defer f.Close()
		var st syscall.Statfs_t
		require.NoError(c.t, syscall.Statfs(c.fsDir, &st))
		at := time.Now()
		for size := int64(st.Bavail)*st.Bsize - left; size > 0; size -= 64 << 10 { // the run may write meanwhile: shrink until it fits
			if syscall.Fallocate(int(f.Fd()), 0, 0, size) == nil {
				break
			}
		}
		require.NoError(c.t, syscall.Statfs(c.fsDir, &st))
		return &injection{at: at, dur: d, detail: fmt.Sprintf("%d kB free of %d MiB for %.1f s", int64(st.Bavail)*st.Bsize>>10, int64(st.Blocks)*st.Bsize>>20, d.Seconds())},
			func() { require.NoError(c.t, os.Remove(path)) }
	}
}

func armDiskFull(c *chaos) func() (*injection, func()) {
	return c.armFill(400<<10, c.uniform(200*time.Millisecond, 1500*time.Millisecond))
}

// diskFullLong fills the disk past run.checkpoint_max_failing: the launch
// must stop with that error (not train on unprotected), and relaunches meet
// the full disk in their setup until it is freed.
func (c *chaos) diskFullLong() bool {
	fire := c.armFill(32<<10, chaosMaxFailing+c.uniform(5*time.Second, 15*time.Second))
	if !c.gateWait() {
		return false
	}
	inj, stop := fire()
	inj.kind = "disk-full-long"
	c.record(inj)
	l := c.cur
	c.active = append(c.active, inj)
	for time.Now().Before(inj.at.Add(inj.dur)) {
		if c.cur.exited() {
			c.relaunch()
		}
		c.tick()
	}
	c.end1(inj, stop)
	// A launch struck in its training must stop on it, unless it trained to
	// the run's end while the disk was full (nothing left to train
	// unprotected: it fails on the model or the end record, and the relaunch
	// runs the last windows again) or another fault (a SIGUSR1 in the same
	// window, a kill) ended it first.
	want := inj.pos >= 0 && !l.logHas(`"message":"run finished"`)
	if want && !(l.exited() && l.end.Before(inj.at.Add(chaosMaxFailing))) {
		c.expect(l.n, true, outcome("disk-full-long").Log+chaosMaxFailing.String()+")", "checkpoints failing past run.checkpoint_max_failing stop the run")
		c.expect(l.n, true, "no space left on device (the file system of "+c.runDir, "the disk-full message names the path and its free space")
	}
	return true
}
