package tests

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/stretchr/testify/assert"
)

// run drives the run through nFaults faults: the first launch is hit in its
// setup, then every kind comes once in a random order, then kinds drawn by
// weight, each a random number of windows after the last; then the run is
// relaunched until it finishes.
func (c *chaos) run(nFaults int) {
	c.nFaults, c.start = nFaults, time.Now()
	c.startLaunch()
	c.pending = 1
	c.setupFault()
	kinds := chaosKinds()
	queue := c.rng.Perm(len(kinds))
	// A full disk past run.checkpoint_max_failing must stop a launch before
	// the run ends (it otherwise ends on the full disk): early in the run.
	for i, k := range queue {
		if kinds[k].name == "disk-full-long" {
			j := c.rng.IntN(len(queue) / 2)
			queue[i], queue[j] = queue[j], queue[i]
		}
	}
	// The last fault comes before the last quarter of the run, so that the
	// launch after it has windows left to be hit in.
	last := c.windows * 3 / 4
	for len(c.faults)+c.pending < nFaults {
		left := nFaults - len(c.faults) - c.pending
		var k *faultKind
		for len(queue) > 0 && k == nil {
			if kinds[queue[0]].n <= left {
				k = kinds[queue[0]]
			}
			queue = queue[1:]
		}
		if k == nil {
			k = c.draw(kinds, left)
		}
		// The windows left shared among the faults left (a kind injects 1.3
		// on average): the next one a random number of windows on.
		gap := float64(last-c.maxWindow) * 1.3 / float64(left)
		target := c.maxWindow + 1 + c.rng.IntN(max(1, int(2*gap)))
		if c.maxWindow < last {
			target = min(last, target)
		}
		for tries := 0; ; tries++ {
			c.waitWindow(target)
			if c.maxWindow > c.windows-5 {
				c.t.Fatalf("the run reached window %d of %d with %d of %d faults injected: make it longer", c.maxWindow, c.windows, len(c.faults), nFaults)
			}
			c.sleep(time.Duration(c.rng.Float64() * float64(c.ref.window))) // a random moment of the window
			if k.run(c) {
				break
			}
			if tries > 100 {
				c.t.Fatalf("%s: found nothing to hit 100 times", k.name)
			}
		}
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

// draw picks a kind by weight among those that inject at most left faults.
func (c *chaos) draw(kinds []*faultKind, left int) *faultKind {
	total := 0
	for _, k := range kinds {
		if k.n <= left {
			total += k.weight
		}
	}
	r := c.rng.IntN(total)
	for _, k := range kinds {
		if k.n <= left {
			if r -= k.weight; r < 0 {
				return k
			}
		}
	}
	panic("unreachable")
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
	for _, k := range chaosKinds() {
		how[k.name] = k.how
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Printf("chaos: seed %d, %d faults of %d kinds on 3 hosts x 2 ranks, %d windows of %d steps, train.watchdog %s, run.checkpoint_max_failing %s\n",
		seed, len(c.faults), len(rows), c.windows, chaosWindow, chaosWatchdog, chaosMaxFailing)
	fmt.Fprintln(w, "kind\tfaults\tin a pair\tin setup\tlaunches ended\texit after (median)\texit after (max)\ttime lost\t")
	names := make([]string, 0, len(rows))
	for n := range rows {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		r := rows[n]
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%s\t%s\t%.1f s\t\n", n, r.faults, r.pairs, r.setup, r.ended, median(r.exits), secs(r.exitMax, r.ended), r.lost.Seconds())
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
	fmt.Printf("verdict: final checksum %s (uninterrupted %s); %d processes left behind; %d damaged or partial checkpoint files\n",
		c.lastChecksum(), c.ref.checksum, len(c.leftovers), len(c.badCheckpoints()))
}

func (c *chaos) lastChecksum() string {
	recs := readMetrics(c.t, c.runDir)
	if len(recs) == 0 {
		return "none"
	}
	return recs[len(recs)-1].Checksum
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
