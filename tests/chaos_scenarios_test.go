package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/hdet-dev/hdet/internal/checkpoint"
	"github.com/hdet-dev/hdet/internal/plan"
	"github.com/stretchr/testify/require"
)

// The chaos soak's kinds made of several steps: a launch ended and its
// newest checkpoint damaged, a relaunch hit in its setup, two faults
// within one window.

// ender ends the current launch with a SIGKILL of a rank or a host, or
// SIGUSR1, and waits for it to exit.
func (c *chaos) ender() bool {
	names := []string{"kill-rank", "kill-host", "sigusr1"}
	ss := []starter{fired(armKillRank), fired(armKillHost), fired(armSigusr1)}
	i := c.rng.IntN(len(ss))
	if !c.single(names[i], ss[i]) {
		return false
	}
	c.waitExit()
	return true
}

// corruptScenario ends the launch and damages its newest checkpoint before
// the relaunch, which must fall back to the one before.
func (c *chaos) corruptScenario() bool {
	if !c.ender() {
		return false
	}
	c.beforeNext = append(c.beforeNext, c.corruptNewest)
	c.pending++
	return true
}

// corruptNewest flips a byte of, cuts or empties the newest checkpoint
// (when one before it is valid: the run must stay resumable).
func (c *chaos) corruptNewest() {
	dir := filepath.Join(c.runDir, "checkpoints")
	names, _ := filepath.Glob(filepath.Join(dir, "ckpt-*.hdet"))
	if len(names) < 2 {
		c.beforeNext = append(c.beforeNext, c.corruptNewest) // after the next launch, then
		return
	}
	sort.Strings(names)
	newest := names[len(names)-1]
	if _, _, _, err := checkpoint.Latest(dir); err != nil {
		c.beforeNext = append(c.beforeNext, c.corruptNewest)
		return
	}
	data, err := os.ReadFile(newest)
	require.NoError(c.t, err)
	var how string
	switch c.rng.IntN(3) {
	case 0:
		off := c.rng.IntN(len(data))
		data[off] ^= 0x5a
		how = fmt.Sprintf("byte %d of %d flipped", off, len(data))
	case 1:
		data = data[:c.rng.IntN(len(data))]
		how = fmt.Sprintf("cut to %d bytes", len(data))
	default:
		data = nil
		how = "emptied"
	}
	at := time.Now()
	require.NoError(c.t, os.WriteFile(newest, data, 0o644))
	c.pending--
	inj := &injection{kind: "corrupt-checkpoint", at: at, launch: len(c.launches) + 1, window: -1, pos: -1, detail: filepath.Base(newest) + ": " + how}
	inj.pass, inj.where = plan.PassSearch, whereSearch
	if strings.HasPrefix(filepath.Base(newest), "ckpt-main-") {
		inj.pass, inj.where = plan.PassMain, whereMain
	}
	c.faults = append(c.faults, inj)
	c.t.Logf("fault %d: %s, before launch %d: %s", len(c.faults), inj.kind, inj.launch, inj.detail)
	if c.wl.resumes { // a run that starts over reads no checkpoint, and its first one written removes the damaged file (the verdict's badCheckpoints)
		c.expect(inj.launch, false, outcome(inj.kind).Log, "a damaged newest checkpoint is skipped for the one before ("+inj.detail+")")
	}
}

// resumeScenario ends the launch; the relaunch is hit in its setup.
func (c *chaos) resumeScenario() bool {
	if !c.ender() {
		return false
	}
	c.nextSetup = true
	c.pending++
	return true
}

// setupFault hits the current launch at a random moment of its setup (MPI
// start, data, explorers, the checkpoint read, the run directory).
func (c *chaos) setupFault() {
	l := c.cur
	if c.rng.IntN(2) == 0 {
		c.sleep(time.Duration(c.rng.Float64() * float64(c.setupTime)))
	} else {
		c.waitPhase("setup: resume") // the checkpoint read
	}
	names := []string{"kill-rank", "kill-host", "sigusr1", "disk-full"}
	ss := []starter{fired(armKillRank), fired(armKillHost), fired(armSigusr1), func(c *chaos) (*injection, func()) {
		return c.fill(64<<10, c.uniform(time.Second, 5*time.Second))
	}}
	for _, i := range c.rng.Perm(len(ss)) {
		if l.exited() {
			break
		}
		if inj, stop := ss[i](c); inj != nil {
			inj.kind, inj.setup = "resume", true
			inj.detail = names[i] + ": " + inj.detail
			c.record(inj)
			c.pending--
			c.hold(inj, stop)
			return
		}
	}
	c.nextSetup = true // nothing to hit: the next launch, then
}

// waitPhase waits, polling rank 0's heartbeat every 2 ms, until the
// launch is in phase (or past its setup, or gone).
func (c *chaos) waitPhase(phase string) {
	for deadline := time.Now().Add(2*c.setupTime + 10*time.Second); time.Now().Before(deadline) && !c.cur.exited(); {
		if b := c.beat(c.cur); b != nil && (b.Phase == phase || b.Window >= 0) {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// double injects two faults within one window.
func (c *chaos) double() bool {
	names := []string{"kill-rank", "kill-host", "explorer-kill", "sigusr1", "disk-full"}
	arms := []armer{armKillRank, armKillHost, armExplorerKill, armSigusr1, armDiskFull}
	var fires []func() (*injection, func())
	var kinds []string
	for _, i := range c.rng.Perm(len(arms)) {
		if len(fires) == 2 {
			break
		}
		if f := arms[i](c); f != nil {
			fires, kinds = append(fires, f), append(kinds, names[i])
		}
	}
	if len(fires) < 2 {
		return false
	}
	var got []*injection
	var stops []func()
	if !c.gateWait() {
		return false
	}
	for i, fire := range fires {
		if i > 0 {
			time.Sleep(time.Duration(c.rng.Float64() * float64(c.ref.window) / 2))
		}
		if inj, stop := fire(); inj != nil {
			inj.kind, inj.pair = kinds[i], true
			got, stops = append(got, inj), append(stops, stop)
		}
	}
	for _, inj := range got {
		c.record(inj)
	}
	if len(got) == 2 {
		c.t.Logf("double: %s and %s %.1f ms apart", got[0].kind, got[1].kind, 1e3*got[1].at.Sub(got[0].at).Seconds())
	}
	for i, inj := range got {
		if stops[i] != nil {
			c.active = append(c.active, inj)
			c.holdUntil(inj, inj.at.Add(inj.dur))
			c.end1(inj, stops[i])
		}
	}
	return len(got) > 0
}
