package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hdet-dev/hdet/internal/faults"
	"github.com/hdet-dev/hdet/internal/plan"
	"github.com/hdet-dev/hdet/internal/watchdog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The faults of the chaos soak: the rows of faults.Kinds it injects (those
// with a Soak), each with its injector here, and how one is injected,
// held and ended. The injectors strike processes (chaos_procs_test.go),
// the network (chaos_links_test.go) or the disk (chaos_disk_test.go), or
// chain several steps (chaos_scenarios_test.go). The in-process kinds are
// the fault suite's: they change the model, whose checksum the soak
// asserts.
//
// Each starter injects one fault now and
// returns it with the function that ends it (nil for an instantaneous one),
// or nil when it has nothing to hit at this moment (no rank running yet).
type starter func(c *chaos) (*injection, func())

// faultKind is one entry of the schedule: its row of faults.Kinds and its
// injector.
type faultKind struct {
	faults.Kind
	injector
}

// injector strikes a kind: run injects it at the moment the schedule
// reached and returns false when it could not (tried again later); prearm,
// when set, is armed before the slot's window (prearmed).
type injector struct {
	run    func(c *chaos, kind string) bool
	prearm armer
}

// injectors are the soak's injectors by kind: one for each row of
// faults.Kinds with a Soak (TestEveryChaosKindHasAnInjector).
func injectors() map[string]injector {
	return map[string]injector{
		"kill-rank":          struck(armKillRank),
		"kill-host":          struck(armKillHost),
		"freeze-host":        struck(armFreezeHost),
		"link-down":          prearmed(armLinkDown),
		"partition":          prearmed(armPartition),
		"slow-link":          prearmed(armSlowLink),
		"disk-full":          struck(armDiskFull),
		"disk-full-long":     scenario((*chaos).diskFullLong),
		"sigusr1":            struck(armSigusr1),
		"explorer-kill":      struck(armExplorerKill),
		"corrupt-checkpoint": scenario((*chaos).corruptScenario),
		"resume":             scenario((*chaos).resumeScenario),
		"double":             scenario((*chaos).double),
		"kill-python":        struck(armKillPython),
		"sigterm":            awaited(armSignal(syscall.SIGTERM)),
	}
}

// soakKinds are the rows of faults.Kinds the soak injects, in the table's
// order (a seed draws the same schedule), with their injectors; the
// worker-only ones (Soak.Worker) when worker.
func soakKinds(worker bool) []*faultKind {
	inj := injectors()
	var out []*faultKind
	for _, k := range faults.Kinds {
		if k.Soak == nil || (k.Soak.Worker && !worker) {
			continue
		}
		i, ok := inj[k.Name]
		if !ok {
			panic("chaos: no injector for the fault kind " + k.Name)
		}
		out = append(out, &faultKind{Kind: k, injector: i})
	}
	return out
}

// chaosKinds are the built-in workload's kinds.
func chaosKinds() []*faultKind { return soakKinds(false) }

// pytorchKinds are the worker's: the built-in workload's, a rank's Python
// killed and SIGTERM to the job.
func pytorchKinds() []*faultKind { return soakKinds(true) }

// outcome is the row of faults.Kinds of an injection's kind (a zero
// Outcome for a name not in the table).
func outcome(kind string) faults.Outcome {
	k, _ := faults.Lookup(kind)
	return k.Outcome
}

// struck injects one fault the armer finds, and ends it after its duration.
func struck(a armer) injector {
	return injector{run: func(c *chaos, kind string) bool { return c.single(kind, fired(a)) }}
}

// scenario is a kind of several steps (or one that watches the launch
// after it strikes), which records its injections itself.
func scenario(run func(c *chaos) bool) injector {
	return injector{run: func(c *chaos, _ string) bool { return run(c) }}
}

// Every kind the soak injects has its injector and a line in
// docs/chaos.md's table of kinds, and every injector its row.
func TestEveryChaosKindHasAnInjector(t *testing.T) {
	inj := injectors()
	doc, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "chaos.md"))
	require.NoError(t, err)
	n := 0
	for _, k := range faults.Kinds {
		if k.Soak == nil {
			continue
		}
		n++
		assert.Contains(t, inj, k.Name, "the injector of %s", k.Name)
		assert.True(t, strings.Contains(string(doc), "| "+k.Name+" |"), "docs/chaos.md's line of %s", k.Name)
	}
	assert.Len(t, inj, n, "an injector for each row with a Soak, no other")
}

// record logs an injection as part of the current launch, with where in
// the run it landed.
func (c *chaos) record(inj *injection) {
	l := c.cur
	inj.launch, inj.window, inj.pos = l.n, -1, -1
	b := c.beat(l)
	if b != nil {
		inj.window = b.Window
		if b.Window < 0 {
			inj.detail += " [" + b.Phase + "]"
		} else {
			c.track(l, b)
			inj.pos = l.pos
		}
	}
	inj.pass, inj.where = l.pass, c.where(l, b)
	if c.gateHit != "" && l.n == c.gateLaunch {
		inj.where = whereCommit
		inj.detail += " [at the commit: " + c.gateHit + "]"
	}
	c.faults = append(c.faults, inj)
	l.faults = append(l.faults, inj)
	c.t.Logf("fault %d: %s, launch %d, pass %d window %d (%s): %s", len(c.faults), inj.kind, inj.launch, inj.pass, inj.window, inj.where, inj.detail)
}

// single injects one fault, and ends it after its duration.
func (c *chaos) single(kind string, s starter) bool {
	inj, stop := s(c)
	if inj == nil {
		return false
	}
	inj.kind = kind
	c.record(inj)
	c.hold(inj, stop)
	return true
}

// hold keeps a fault with a duration in force for it, then ends it.
func (c *chaos) hold(inj *injection, stop func()) {
	if stop == nil {
		return
	}
	c.active = append(c.active, inj)
	c.holdUntil(inj, inj.at.Add(inj.dur))
	c.end1(inj, stop)
}

// holdUntil waits until end, watching the launch, or until the run has
// trained c.holdCap windows past the fault's position (its first window
// after a fault in its setup): the fault is then ended early, so that no
// fault lets the run train through more windows than its slot has.
//
// On a full disk rank 0 may not write its heartbeat either (a page is all
// it needs); the windows whose records it could not write, one warning
// each in the launch's output, count then.
func (c *chaos) holdUntil(inj *injection, end time.Time) {
	l, from := c.cur, inj.pos
	off := l.logSize()
	for i := 0; time.Now().Before(end); i++ {
		c.tick()
		if l != c.cur {
			continue
		}
		if from < 0 {
			from = l.pos
		}
		trained := 0
		if from >= 0 {
			trained = l.pos - from
		}
		if i%5 == 0 {
			trained = max(trained, l.logCount(off, chaosRecordFailed))
		}
		if trained >= c.holdCap {
			c.capped++
			inj.detail += fmt.Sprintf(" (ended after %.1f s: the run trained %d windows meanwhile)", time.Since(inj.at).Seconds(), trained)
			return
		}
	}
}

// chaosRecordFailed is hdet's warning for a metrics record a full disk
// refused: one a window.
const chaosRecordFailed = "metrics.jsonl write failed"

func (c *chaos) end1(inj *injection, stop func()) {
	stop()
	inj.until, c.quietFrom = time.Now(), time.Now()
	for i, a := range c.active {
		if a == inj {
			c.active = append(c.active[:i], c.active[i+1:]...)
			break
		}
	}
}

func (c *chaos) uniform(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(c.rng.Int64N(int64(hi-lo)+1))
}

func (c *chaos) host() string { return c.tb.hosts[c.rng.IntN(len(c.tb.hosts))] }

// rankPIDs maps every running hdet rank on the bed to "rank R on host".
func (c *chaos) rankPIDs() map[int]string {
	ranks := map[int]int{}
	beats, _ := filepath.Glob(filepath.Join(c.runDir, "heartbeats", "rank-*[0-9]"))
	for _, p := range beats {
		if b, err := watchdog.ReadBeat(p); err == nil {
			ranks[b.PID] = b.Rank
		}
	}
	out := map[int]string{}
	for _, h := range c.tb.hosts {
		for _, pid := range c.pidsOf(h, c.hdet) {
			r, ok := ranks[pid]
			if ok {
				out[pid] = fmt.Sprintf("rank %d (pid %d) on %s", r, pid, h)
			} else {
				out[pid] = fmt.Sprintf("a rank (pid %d) on %s", pid, h)
			}
		}
	}
	return out
}

// An armer finds what a fault will hit and returns the function that hits
// it (nil when there is nothing to hit now): a double fault arms both
// first, so that its two faults land within one window.
type armer func(c *chaos) func() (*injection, func())

// fired is an armer used as a starter: armed, then struck (at the commit
// when the slot is the commit's).
func fired(a armer) starter {
	return func(c *chaos) (*injection, func()) {
		if fire := a(c); fire != nil && c.gateWait() {
			return fire()
		}
		return nil, nil
	}
}

// prearmed is a kind whose arming may take long (it starts its host's
// batch again if that is not running, seconds on a loaded machine): inject
// arms it (c.armed) before it waits for the slot's window, so that the run
// does not train on meanwhile.
func prearmed(a armer) injector {
	strike := func(c *chaos) (*injection, func()) {
		fire := c.armed
		c.armed = nil
		if fire == nil {
			fire = a(c)
		}
		if fire != nil && c.gateWait() {
			return fire()
		}
		return nil, nil
	}
	return injector{prearm: a, run: func(c *chaos, kind string) bool { return c.single(kind, strike) }}
}

// gateWait, when the strike is the commit slot's (c.gate), waits polling
// rank 0's heartbeat every 100 µs until the run is at the commit (atCommit)
// and notes where in gateHit; it returns at once, gateHit empty, when the
// launch is past the commit (strike now), and false when it ended or hung
// before (no strike: the slot is tried again in the next launch).
func (c *chaos) gateWait() bool {
	if !c.gate {
		return true
	}
	c.gate, c.gateHit = false, ""
	l := c.cur
	for !l.exited() && !l.hang {
		if b := c.poll(); b != nil && b.Window >= 0 {
			if c.atCommit(l, b) {
				c.gateHit, c.gateLaunch = fmt.Sprintf("pass %d window %d, phase %s", l.pass, b.Window, b.Phase), l.n
				return true
			}
			if l.pass == plan.PassMain {
				c.gateMisses++
				c.t.Logf("the commit's strike found launch %d past the commit: it strikes now", l.n)
				return true
			}
		}
		c.checkHang()
		time.Sleep(100 * time.Microsecond)
	}
	c.t.Logf("launch %d ended before the commit: the commit's strike is tried again in the next one", l.n)
	return false
}
