package tests

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The soak's schedule (issue 42): which faults come, in which order and at
// which window, drawn from the seed before anything runs, and the run sized
// from it. Faults are placed by window, never by time: each slot of the
// schedule gets a few windows of its own before it (its gap) and the windows
// the run may train through while its fault is in force (its hold, at most
// chaosHoldCap: a fault in force longer is ended early), and the run is as
// long as the slots need, so that no seed and no fault count can run out of
// windows. Slots whose run gets ahead of them (a fault let it train on) are
// injected at once; the windows a later slot leaves unused are the slack.
//
// The run is the default path (auto.commit restart): a search pass, the
// commit, the main pass from step 0. A position counts both passes' windows
// in one line: the search pass's windows 0..S-1 are positions 0..S-1, the
// commit is S, the main pass's window w is S+1+w. The schedule puts about a
// quarter of its slots in the search pass, one at the commit (between the
// last search window and the main pass's first: armed chaosArm windows
// before, injected the moment rank 0 is there) and the rest in the main
// pass.

const (
	chaosGapMin, chaosGapMax = 3, 20 // windows a slot waits after the last one's hold, drawn
	// chaosHoldCap is the most windows a fault in force (a full disk, a slow
	// link) lets the run train before the soak ends it; a shape's quiet
	// what one that stops the run, or takes an instant, may let pass (the
	// moment of its window, an armed target's retry, the time the launch
	// takes to end).
	chaosHoldCap = 30
	chaosTail    = 10 // the run's last windows get no fault (a kill between the final checkpoint and the end record: docs/chaos.md)
	chaosArm     = 6  // the commit's fault is armed this many windows before the search pass ends
	// chaosFirst is where the search pass's first slot may come: after the
	// hold of the first launch's setup fault.
	chaosFirst = 1 + chaosHoldCap
)

// Where a fault landed.
const (
	whereSearch = "search"
	whereCommit = "commit"
	whereMain   = "main"
)

var whereName = map[string]string{whereSearch: "in the search pass", whereCommit: "at the commit", whereMain: "in the main pass"}

// chaosShape is what a workload's schedule is drawn from: its fault kinds
// and its search pass's length as a share num/den of the main pass's.
type chaosShape struct {
	kinds []*faultKind
	// first: kinds that come before the others in the schedule's
	// every-kind-once part (in random order among themselves): those most
	// at risk, for a short run that cannot hold every kind.
	first    []string
	minMain  int // main-pass windows at the least
	num, den int // the search pass is about num/den of the main pass
	quiet    int // the hold of a fault that stops the run or takes an instant
}

// searchWindows estimates the search pass of a run of main windows: the
// built-in workload's run sets auto.until 0.3 (chaosConfig); a script's
// schedule hdet does not know is searched in its first quarter. The
// reference run gives the real one.
func (sh *chaosShape) searchWindows(main int) int { return sh.num*main/sh.den + 1 }

// chaosSlot is one entry of the schedule.
type chaosSlot struct {
	kind  *faultKind
	where string // whereSearch, whereCommit or whereMain
	gap   int    // windows before it (drawn; scaled up by place to fill its pass)
	hold  int    // windows the run may train while its fault is in force
	at    int    // the position it is injected at (the commit's: where it is armed)
}

// chaosSchedule is the whole schedule and the run's size.
type chaosSchedule struct {
	shape   *chaosShape
	slots   []*chaosSlot
	nFaults int // with the first launch's, which is hit in its setup
	main    int // the run's windows (train.steps / train.window): the main pass
	search  int // the search pass's: estimated from main, then the reference's
	total   int // positions: search + 1 + main
	reserve int // positions kept free at the end for faults drawn on the way (a pair that injected one)
}

// newChaosSchedule draws the schedule of nFaults faults of a shape's
// kinds: the first launch's setup fault, every kind once in a random order
// (the shape's first kinds before the others), then kinds drawn by weight; a full disk past run.checkpoint_max_failing comes in the first
// quarter (about the search pass: its launch, training faster on a full
// disk, must have windows left to stop on it); then it sizes the run.
func newChaosSchedule(rng *rand.Rand, nFaults int, shape *chaosShape) *chaosSchedule {
	kinds := shape.kinds
	s := &chaosSchedule{shape: shape, nFaults: nFaults}
	n := 1 // the first launch's setup fault
	add := func(k *faultKind) {
		s.slots = append(s.slots, &chaosSlot{kind: k, gap: chaosGapMin + rng.IntN(chaosGapMax-chaosGapMin+1)})
		n += k.Soak.N
	}
	for _, i := range shape.firstOrder(rng.Perm(len(kinds))) {
		if n+kinds[i].Soak.N <= nFaults {
			add(kinds[i])
		}
	}
	for n < nFaults {
		add(drawKind(rng, kinds, nFaults-n, nil))
	}
	early := max(1, len(s.slots)/4)
	for i := early; i < len(s.slots); i++ {
		if s.slots[i].kind.Name != "disk-full-long" {
			continue
		}
		var others []int
		for j := range early {
			if s.slots[j].kind.Name != "disk-full-long" {
				others = append(others, j)
			}
		}
		if len(others) > 0 {
			j := others[rng.IntN(len(others))]
			s.slots[i].kind, s.slots[j].kind = s.slots[j].kind, s.slots[i].kind
		}
	}
	s.setHolds()
	s.split(rng, kinds)
	s.setHolds()
	s.size()
	return s
}

// firstOrder puts the shape's first kinds at the front of perm (a
// permutation of its kinds), keeping the order within each part.
func (sh *chaosShape) firstOrder(perm []int) []int {
	var first, rest []int
	for _, i := range perm {
		if slices.Contains(sh.first, sh.kinds[i].Name) {
			first = append(first, i)
		} else {
			rest = append(rest, i)
		}
	}
	return append(first, rest...)
}

func (s *chaosSchedule) setHolds() {
	for _, sl := range s.slots {
		sl.hold = s.shape.quiet
		if sl.kind.Soak.Trains {
			sl.hold = chaosHoldCap
		}
	}
}

// split assigns the slots to the passes: to the search pass those that
// take its share of the windows the slots need (num / (num+den): it is
// num/den of the main pass), the next to the commit, the rest to the main pass. The commit's fault must strike within a few
// milliseconds: a kind that starts a process to strike (ip, tc) swaps with
// the nearest one that does not (or, with none, is drawn again among those
// that do).
func (s *chaosSchedule) split(rng *rand.Rand, kinds []*faultKind) {
	k := len(s.slots)
	ci := -1
	switch {
	case k == 1:
		ci = 0
	case k == 2:
		ci = 1
	case k >= 3:
		total := 0
		for _, sl := range s.slots {
			total += sl.gap + sl.hold
		}
		sum := s.slots[0].gap + s.slots[0].hold
		ci = 1
		num, den := s.shape.num, s.shape.den
		for ci < k-2 && float64(sum+s.slots[ci].gap+s.slots[ci].hold) <= float64(num)/float64(num+den)*float64(total) {
			sum += s.slots[ci].gap + s.slots[ci].hold
			ci++
		}
	}
	for i, sl := range s.slots {
		switch {
		case i < ci:
			sl.where = whereSearch
		case i == ci:
			sl.where = whereCommit
		default:
			sl.where = whereMain
		}
	}
	if ci < 0 || s.slots[ci].kind.Soak.Strikes {
		return
	}
	for d := 1; d < k; d++ {
		for _, j := range []int{ci + d, ci - d} {
			if j >= 0 && j < k && s.slots[j].kind.Soak.Strikes {
				s.slots[ci].kind, s.slots[j].kind = s.slots[j].kind, s.slots[ci].kind
				return
			}
		}
	}
	n := s.slots[ci].kind.Soak.N
	s.slots[ci].kind = drawKind(rng, kinds, n, func(k *faultKind) bool { return k.Soak.Strikes && k.Soak.N == n })
}

// size sets the run's length: enough main-pass windows for the main pass's
// slots, the commit's hold, the reserve and the tail, and enough for a
// search pass (about num/den of them) that holds its slots before the
// commit is armed.
func (s *chaosSchedule) size() {
	s.reserve = (2 + s.nFaults/20) * (chaosGapMin + s.shape.quiet)
	needSearch, needMain := chaosFirst+chaosArm+2, s.reserve+chaosTail
	for _, sl := range s.slots {
		switch sl.where {
		case whereSearch:
			needSearch += sl.gap + sl.hold
		case whereCommit:
			needMain += sl.hold
		default:
			needMain += sl.gap + sl.hold
		}
	}
	sh := s.shape
	main := max(sh.minMain, needMain, (needSearch*sh.den+sh.num-1)/sh.num)
	s.main = (main + 9) / 10 * 10
	s.setSearch(sh.searchWindows(s.main))
}

func (s *chaosSchedule) setSearch(search int) {
	s.search, s.total = search, search+1+s.main
}

// place puts the slots at their positions once the reference run has told
// the search pass's length: each pass's slots spread over it, their drawn
// gaps scaled up by the same factor. It returns why they do not fit, if
// they do not (a bug of size).
func (s *chaosSchedule) place(search int) error {
	s.setSearch(search)
	var in [3][]*chaosSlot
	for _, sl := range s.slots {
		switch sl.where {
		case whereSearch:
			in[0] = append(in[0], sl)
		case whereCommit:
			in[1] = append(in[1], sl)
			sl.at = search - chaosArm
		default:
			in[2] = append(in[2], sl)
		}
	}
	commitHold := 0
	for _, sl := range in[1] {
		commitHold = sl.hold
	}
	// The search pass's slots after the first launch's setup fault's hold,
	// before the commit's arming;
	// the main pass's after the commit's hold, before the reserve and the
	// tail.
	if err := spread(in[0], chaosFirst, search-chaosArm-1, "the search pass"); err != nil {
		return err
	}
	return spread(in[2], search+1+commitHold, s.total-chaosTail-s.reserve, "the main pass")
}

// spread places slots between positions from and to: gap, slot, its hold,
// gap, ..., the gaps scaled so that the last hold ends at to.
func spread(slots []*chaosSlot, from, to int, what string) error {
	if len(slots) == 0 {
		return nil
	}
	gaps, holds := 0, 0
	for _, sl := range slots {
		gaps, holds = gaps+sl.gap, holds+sl.hold
	}
	f := float64(to-from-holds) / float64(gaps)
	if f < 1 {
		return fmt.Errorf("%s has %d windows for %d slots that need %d: the run is sized too short", what, to-from, len(slots), gaps+holds)
	}
	p := float64(from)
	for _, sl := range slots {
		p += float64(sl.gap) * f
		sl.at = int(p)
		p += float64(sl.hold)
	}
	return nil
}

// count is the slots of each pass.
func (s *chaosSchedule) count(where string) int {
	n := 0
	for _, sl := range s.slots {
		if sl.where == where {
			n++
		}
	}
	return n
}

// String is the schedule's line in the report.
func (s *chaosSchedule) String() string {
	var commit string
	for _, sl := range s.slots {
		if sl.where == whereCommit {
			commit = " (" + sl.kind.Name + ")"
		}
	}
	return fmt.Sprintf("%d slots after the first launch's setup fault: %d in the search pass, %d at the commit%s, %d in the main pass; "+
		"run sized from them: %d search + %d main windows of %d steps (gaps %d-%d windows, a fault in force ended after %d windows of training)",
		len(s.slots), s.count(whereSearch), s.count(whereCommit), commit, s.count(whereMain),
		s.search, s.main, chaosWindow, chaosGapMin, chaosGapMax, chaosHoldCap)
}

// positions is the schedule's slots as "kind@position" (the test's log).
func (s *chaosSchedule) positions() string {
	var b strings.Builder
	for i, sl := range s.slots {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s@%d", sl.kind.Name, sl.at)
	}
	return b.String()
}

// drawKind picks a kind by weight among those that inject at most left
// faults (and that ok accepts, when given).
func drawKind(rng *rand.Rand, kinds []*faultKind, left int, ok func(*faultKind) bool) *faultKind {
	fits := func(k *faultKind) bool { return k.Soak.N <= left && (ok == nil || ok(k)) }
	total := 0
	for _, k := range kinds {
		if fits(k) {
			total += k.Soak.Weight
		}
	}
	r := rng.IntN(total)
	for _, k := range kinds {
		if fits(k) {
			if r -= k.Soak.Weight; r < 0 {
				return k
			}
		}
	}
	panic("unreachable")
}

// The schedule fits its run for any seed and fault count, for each
// workload: every fault counted, the slots placed in both passes with
// their gaps and holds, a full disk past run.checkpoint_max_failing in the
// first half, the commit's slot a kind that strikes at once, the shape's
// first kinds first. (No test bed: it runs with the unit tests.)
func TestChaosScheduleFits(t *testing.T) {
	for _, shape := range []*chaosShape{builtinChaos.shape(), pytorchChaos.shape()} {
		scheduleFits(t, shape)
	}
}

func scheduleFits(t *testing.T, shape *chaosShape) {
	sizes := map[int][2]int{}
	for _, n := range []int{1, 2, 3, 4, 5, 8, 13, 25, 30, 31, 77, 200, 500} {
		for seed := range uint64(200) {
			s := newChaosSchedule(rand.New(rand.NewPCG(seed, 0x68646574)), n, shape)
			faults, firstN := 1, 1
			seen := map[string]bool{}
			for _, sl := range s.slots {
				faults += sl.kind.Soak.N
				seen[sl.kind.Name] = true
			}
			require.Equal(t, n, faults, "seed %d, %d faults: the slots' faults", seed, n)
			for _, k := range shape.kinds {
				if slices.Contains(shape.first, k.Name) {
					firstN += k.Soak.N
				}
			}
			for _, name := range shape.first {
				if firstN <= n {
					require.True(t, seen[name], "seed %d, %d faults: the first kind %s is in the schedule", seed, n, name)
				}
			}
			search := shape.searchWindows(s.main)
			require.NoError(t, s.place(search), "seed %d, %d faults: %s", seed, n, s)
			last := -1
			for i, sl := range s.slots {
				require.Greater(t, sl.at, last, "seed %d, %d faults: slot %d after the one before", seed, n, i)
				last = sl.at
				switch sl.where {
				case whereSearch:
					require.Less(t, sl.at+sl.hold, search-chaosArm, "seed %d, %d faults: slot %d", seed, n, i)
				case whereCommit:
					require.Equal(t, search-chaosArm, sl.at)
					require.True(t, sl.kind.Soak.Strikes, "seed %d, %d faults: the commit's kind %s strikes", seed, n, sl.kind.Name)
				default:
					require.Greater(t, sl.at, search, "seed %d, %d faults: slot %d", seed, n, i)
					require.LessOrEqual(t, sl.at+sl.hold, s.total-chaosTail-s.reserve, "seed %d, %d faults: slot %d", seed, n, i)
				}
				if sl.kind.Name == "disk-full-long" && len(s.slots) >= 4 {
					require.Less(t, sl.at, s.total/2, "seed %d, %d faults: a long full disk in the run's first half", seed, n)
				}
			}
			if len(s.slots) >= 3 {
				for _, w := range []string{whereSearch, whereCommit, whereMain} {
					require.Positive(t, s.count(w), "seed %d, %d faults: a slot in %s", seed, n, w)
				}
			}
			r := sizes[n]
			if r[0] == 0 || s.main < r[0] {
				r[0] = s.main
			}
			r[1] = max(r[1], s.main)
			sizes[n] = r
		}
	}
	t.Logf("%d kinds: main-pass windows by fault count (min, max over 200 seeds): %v", len(shape.kinds), sizes)
}
