package tests

import (
	"fmt"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hdet-dev/hdet/internal/plan"
	"github.com/hdet-dev/hdet/internal/watchdog"
)

// The faults of the chaos soak: their kinds (chaosKinds) and how one is
// injected, held and ended. The kinds themselves strike processes
// (chaos_procs_test.go), the network (chaos_links_test.go) or the disk
// (chaos_disk_test.go), or chain several steps (chaos_scenarios_test.go).
// In-process faults (a rank's losses) are internal/faults' instead.
//
// Each starter injects one fault now and
// returns it with the function that ends it (nil for an instantaneous one),
// or nil when it has nothing to hit at this moment (no rank running yet).
type starter func(c *chaos) (*injection, func())

// faultKind is one entry of the schedule: run injects at the moment the
// schedule reached and returns false when it could not (tried again later).
type faultKind struct {
	name, how string
	weight    int // in the random part of the schedule
	n         int // faults it injects
	run       func(c *chaos) bool
	// trains: the run may train on while the fault is in force (its slot
	// gets chaosHoldCap windows for it); strikes: it strikes within
	// milliseconds of its moment, everything it needs found beforehand
	// (the commit's slot takes only such a kind).
	trains, strikes bool
	prearm          armer // armed before the slot's window (prearmed)
}

// chaosKinds are the built-in workload's kinds (pytorchKinds adds the
// worker's).
func chaosKinds() []*faultKind {
	single := func(name, how string, w int, trains, strikes bool, s starter) *faultKind {
		return &faultKind{name: name, how: how, weight: w, n: 1, trains: trains, strikes: strikes, run: func(c *chaos) bool { return c.single(name, s) }}
	}
	return []*faultKind{
		single("kill-rank", "SIGKILL of one rank (any host)", 4, false, true, fired(armKillRank)),
		single("kill-host", "SIGKILL of every process on one host", 3, false, true, fired(armKillHost)),
		single("freeze-host", "SIGSTOP of every process on one host for train.watchdog + 2-5 s, then SIGCONT", 1, false, true, fired(armFreezeHost)),
		prearmed("link-down", "`ip link set eth0 down` inside one host for 2-20 s (it loses both links)", 1, false, armLinkDown),
		prearmed("partition", "the link between two hosts cut for 2-20 s (a blackhole route each way)", 1, false, armPartition),
		prearmed("slow-link", "one host's link slowed for 2-10 s (tc netem delay+loss, or tbf where the kernel has no netem)", 2, true, armSlowLink),
		single("disk-full", "the run directory's tmpfs filled to 0-400 kB free for 0.2-1.5 s", 3, true, true, fired(armDiskFull)),
		{name: "disk-full-long", how: "filled to 0-32 kB free for run.checkpoint_max_failing + 5-15 s; relaunched meanwhile", weight: 1, n: 1, trains: true, strikes: true, run: (*chaos).diskFullLong},
		single("sigusr1", "SIGUSR1 to mpirun (Slurm's warning): checkpoint and exit 3", 3, false, true, fired(armSignal(syscall.SIGUSR1))),
		single("explorer-kill", "SIGKILL of the lr explorer plugin", 4, false, true, fired(armExplorerKill)),
		{name: "corrupt-checkpoint", how: "a launch ended (kill or SIGUSR1), then its newest checkpoint damaged before the relaunch", weight: 1, n: 2, strikes: true, run: (*chaos).corruptScenario},
		{name: "resume", how: "a launch ended, then the relaunch hit at a random moment of its setup or as it reads the checkpoint: SIGKILL of a rank or host, SIGUSR1, full disk", weight: 2, n: 2, trains: true, strikes: true, run: (*chaos).resumeScenario},
		{name: "double", how: "two of kill-rank, kill-host, explorer-kill, sigusr1, disk-full within one window (both armed first)", weight: 2, n: 2, trains: true, strikes: true, run: (*chaos).double},
	}
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
func prearmed(name, how string, w int, trains bool, a armer) *faultKind {
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
	return &faultKind{name: name, how: how, weight: w, n: 1, trains: trains, prearm: a,
		run: func(c *chaos) bool { return c.single(name, strike) }}
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
