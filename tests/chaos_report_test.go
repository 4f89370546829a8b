package tests

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/hdet-dev/hdet/internal/metrics"
	"github.com/hdet-dev/hdet/internal/plan"
)

// run drives the run through its schedule (c.sched): the first launch is
// hit in its setup, then each slot's fault comes when the run reaches the
// slot's position (the commit's armed there and struck at the commit), at
// once when the run is past it; faults a slot injected fewer of than its
// kind's (a pair that found one thing to hit) are drawn on the way; then
// the run is relaunched until it finishes.
func (c *chaos) run(nFaults int) {
	c.nFaults, c.start, c.holdCap = nFaults, time.Now(), chaosHoldCap
	c.startLaunch()
	c.pending = 1
	c.setupFault()
	for _, sl := range c.sched.slots {
		c.inject(sl)
	}
	quiet := func(k *faultKind) bool { return k.Soak.N == 1 && !k.Soak.Trains && k.Soak.Strikes }
	for len(c.faults)+c.pending < nFaults {
		k := drawKind(c.rng, c.sched.shape.kinds, nFaults-len(c.faults)-c.pending, quiet)
		c.extra++
		c.inject(&chaosSlot{kind: k, where: whereMain, hold: c.sched.shape.quiet, at: c.cur.pos + chaosGapMin})
	}
	for {
		if c.cur.exited() {
			if c.cur.code == 0 && c.finished() {
				c.afterLaunch(c.cur)
				break
			}
			c.relaunch()
			continue
		}
		c.tick()
	}
	c.end = time.Now()
}

// inject waits for a slot's position and injects its fault, trying again
// a window later when it found nothing to hit.
func (c *chaos) inject(sl *chaosSlot) {
	c.holdCap = sl.hold
	defer func() {
		c.holdCap, c.gate, c.gateHit, c.armed = chaosHoldCap, false, "", nil
	}()
	planned, n0 := sl.at, len(c.faults)
	if sl.where == whereCommit {
		planned = c.ref.search
	}
	for tries := 0; ; tries++ {
		c.gateHit = ""
		if sl.kind.prearm != nil && c.armed == nil {
			c.armed = sl.kind.prearm(c)
		}
		c.waitPos(sl.at)
		if c.cur.pos >= c.sched.total-chaosTail {
			c.t.Fatalf("the run reached position %d of %d with %d of %d faults injected: it outran its schedule (a bug of the soak's sizing: %s)",
				c.cur.pos, c.sched.total, len(c.faults), c.nFaults, c.sched)
		}
		if sl.where == whereCommit && sl.kind.Soak.Strikes && c.cur.pass == plan.PassSearch {
			c.gate = true // armed here, struck at the commit
		} else {
			c.sleep(time.Duration(c.rng.Float64() * float64(c.ref.window))) // a random moment of the window
		}
		if sl.kind.run(c, sl.kind.Name) {
			for _, f := range c.faults[n0:] {
				if f.pos >= 0 {
					c.late = append(c.late, f.pos-planned)
					break
				}
			}
			return
		}
		c.gate = false
		if tries > 100 {
			c.t.Fatalf("%s: found nothing to hit 100 times", sl.kind.Name)
		}
		sl.at = c.cur.pos + 1
	}
}

// kindsSeen counts the faults by kind.
func (c *chaos) kindsSeen() map[string]int {
	seen := map[string]int{}
	for _, f := range c.faults {
		seen[f.kind]++
	}
	return seen
}

// kindRow is one line of the soak's table.
type kindRow struct {
	faults, ended, pairs, setup int
	search, commit, main        int // where they landed (in setup: the pass the launch resumed in)
	exitMax                     time.Duration
	exits                       []time.Duration
	lost                        time.Duration
}

// printTable prints the soak's table: by kind, the faults, the launches
// they ended, how soon those exited, and the time until the run was past
// the fault's window again; then the launches and the verdict's figures.
func (c *chaos) printTable(seed uint64, nFaults int) {
	rows := map[string]*kindRow{}
	for _, f := range c.faults {
		r := rows[f.kind]
		if r == nil {
			r = &kindRow{}
			rows[f.kind] = r
		}
		r.faults++
		switch f.where {
		case whereSearch:
			r.search++
		case whereCommit:
			r.commit++
		default:
			r.main++
		}
		if f.pair {
			r.pairs++
		}
		if f.setup {
			r.setup++
		}
		if f.ended && !f.recovered.IsZero() {
			r.lost += f.recovered.Sub(f.at)
		}
	}
	for _, l := range c.launches {
		if l.code != 0 && l.cause != nil {
			r := rows[l.cause.kind]
			r.ended++
			r.exits = append(r.exits, l.exitAfter)
			r.exitMax = max(r.exitMax, l.exitAfter)
		}
	}
	how := map[string]string{}
	for _, k := range c.sched.shape.kinds {
		how[k.Name] = k.How
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Printf("chaos: %s workload, seed %d, %d faults of %d kinds on 3 hosts x %d ranks, auto.commit restart: %d search windows, the commit, %d main windows of %d steps, train.watchdog %s, run.checkpoint_max_failing %s\n",
		c.wl.name, seed, len(c.faults), len(rows), c.wl.perHost, c.ref.search, c.ref.main, chaosWindow, chaosWatchdog, chaosMaxFailing)
	fmt.Fprintln(w, "kind\tfaults\tsearch\tcommit\tmain\tin a pair\tin setup\tlaunches ended\texit after (median)\texit after (max)\ttime lost\t")
	names := make([]string, 0, len(rows))
	for n := range rows {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		r := rows[n]
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%.1f s\t\n", n, r.faults, r.search, r.commit, r.main, r.pairs, r.setup, r.ended, median(r.exits), secs(r.exitMax, r.ended), r.lost.Seconds())
	}
	_ = w.Flush()
	for _, n := range names {
		fmt.Printf("  %-19s %s\n", n, how[n])
	}
	c.printLaunches()
}

func median(d []time.Duration) string {
	if len(d) == 0 {
		return "-"
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return fmt.Sprintf("%.1f s", s[len(s)/2].Seconds())
}

func secs(d time.Duration, n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}

// printLaunches sums up the launches and the time the faults cost.
func (c *chaos) printLaunches() {
	codes := map[int]int{}
	hangs := 0
	for _, l := range c.launches {
		codes[l.code]++
		if l.hang {
			hangs++
		}
	}
	var cs []string
	keys := make([]int, 0, len(codes))
	for k := range codes {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	for _, k := range keys {
		cs = append(cs, fmt.Sprintf("%d x%d", k, codes[k]))
	}
	wall := c.end.Sub(c.start)
	fmt.Printf("launches: %d (exit codes: %s), %d with no fault in them, %d hung; bound: a failed launch exits within %s of its fault (a frozen host: of its SIGCONT)\n",
		len(c.launches), strings.Join(cs, ", "), c.unprovoked, hangs, chaosBound)
	fmt.Printf("time: %.0f s with the faults, %.1f s uninterrupted: %.0f s lost\n", wall.Seconds(), c.ref.wall.Seconds(), (wall - c.ref.wall).Seconds())
	fmt.Printf("work redone: %s\n", c.redone())
	landed := c.landed()
	fmt.Printf("schedule: %s; %d faults drawn on the way; faults in force ended early: %d; the commit's strike: %d missed; slots struck %s\n",
		c.sched, c.extra, c.capped, c.gateMisses, lateness(c.late))
	fmt.Printf("landed: %d in search windows, %d at the commit, %d in main windows (and %d in a launch's setup or between launches)\n",
		landed[whereSearch], landed[whereCommit], landed[whereMain], landed[""])
	fmt.Printf("verdict: final checksum %s (uninterrupted %s); committed %s (uninterrupted %s); %d processes left behind; %d damaged or partial checkpoint files\n",
		c.lastChecksum(), c.ref.checksum, committed(c.lastCommit()), committed(c.ref.commit), len(c.leftovers), len(c.badCheckpoints()))
}

// redone sums, by where the fault that ended a launch landed, the windows
// the relaunch trained again: from the one it resumed at (its log says from
// which checkpoint) to the furthest the ended launch reached (on a full
// disk rank 0's heartbeat may stop: at least that many).
func (c *chaos) redone() string {
	type sum struct{ launches, windows, most int }
	by := map[string]*sum{}
	for i, l := range c.launches {
		if l.code == 0 || l.cause == nil || l.maxPos < 0 {
			continue
		}
		for _, next := range c.launches[i+1:] {
			if next.firstPos < 0 {
				continue // it ended in its setup: the one after resumes
			}
			s := by[l.cause.where]
			if s == nil {
				s = &sum{}
				by[l.cause.where] = s
			}
			w := max(0, l.maxPos-c.resumedAt(next))
			s.launches, s.windows, s.most = s.launches+1, s.windows+w, max(s.most, w)
			break
		}
	}
	var parts []string
	for _, where := range []string{whereSearch, whereCommit, whereMain} {
		if s := by[where]; s != nil {
			parts = append(parts, fmt.Sprintf("faults %s ended %d launches: %d windows trained again (%.1f a launch, at most %d)",
				whereName[where], s.launches, s.windows, float64(s.windows)/float64(s.launches), s.most))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}

var resumedFrom = regexp.MustCompile(`"pass":(\d+),"step":(\d+),[^\n]*"message":"resuming from checkpoint"`)

// resumedAt is the position a launch resumed at: that of the checkpoint its
// log names, 0 for a fresh start.
func (c *chaos) resumedAt(l *launch) int {
	b, _ := os.ReadFile(l.log)
	m := resumedFrom.FindSubmatch(b)
	if m == nil {
		return 0
	}
	pass, _ := strconv.Atoi(string(m[1]))
	step, _ := strconv.Atoi(string(m[2]))
	if pass == plan.PassSearch {
		return step / chaosWindow
	}
	return c.ref.search + 1 + step/chaosWindow
}

// lateness sums up how many windows after their slot's window the faults
// struck (the moment of the window, the arming; more when an earlier fault
// let the run train past the slot).
func lateness(late []int) string {
	if len(late) == 0 {
		return "-"
	}
	s := append([]int(nil), late...)
	sort.Ints(s)
	return fmt.Sprintf("%d to %d windows after their window (median %d)", s[0], s[len(s)-1], s[len(s)/2])
}

// landed counts the faults by where they landed: in a window of the search
// or the main pass, at the commit, or ("") in a launch's setup or between
// launches.
func (c *chaos) landed() map[string]int {
	n := map[string]int{}
	for _, f := range c.faults {
		switch {
		case f.where == whereCommit:
			n[whereCommit]++
		case f.window < 0:
			n[""]++
		default:
			n[f.where]++
		}
	}
	return n
}

// lastCommit is the run's commit record, if any.
func (c *chaos) lastCommit() *metrics.CommitRecord {
	commits := metrics.Of[metrics.CommitRecord](readMetrics(c.t, c.runDir))
	if len(commits) == 0 {
		return nil
	}
	return &commits[len(commits)-1]
}

func (c *chaos) lastChecksum() string {
	switch last := lastOf(readMetrics(c.t, c.runDir)).(type) {
	case metrics.WindowRecord:
		return last.Checksum
	case metrics.EndRecord:
		return last.Checksum
	}
	return "none"
}

// checkExpects asserts what the launches' logs had to show.
func (c *chaos) checkExpects() {
	for _, e := range c.expects {
		found := false
		for _, l := range c.launches {
			if l.n == e.from || (!e.only && l.n > e.from) {
				found = found || l.logHas(e.text)
			}
		}
		assert.True(c.t, found, "%s: launch %d's log (or a later one's) shows %q", e.why, e.from, e.text)
	}
}
