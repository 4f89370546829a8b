package tests

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/checkpoint"
	"github.com/hdet-dev/hdet/internal/engine"
	"github.com/hdet-dev/hdet/internal/metrics"
	"github.com/hdet-dev/hdet/internal/plan"
	"github.com/hdet-dev/hdet/internal/watchdog"
)

// chaos drives one run through a schedule of faults (chaos_test.go).
type chaos struct {
	t        *testing.T
	wl       *chaosWorkload
	tb       *testbed
	rng      *rand.Rand
	cfgPath  string
	windows  int
	hdet     string // the hdet binary
	explorer string // the lr explorer binary (its folder is the plugin directory)
	python   string // the worker's interpreter binary (symbolic links resolved), "" for the built-in workload
	init     string // the worker script's own file it starts from ("" for the built-in workload)
	initSum  string // its SHA-256 before the first launch
	tools    chaosToolset
	ref      chaosRef
	sched    *chaosSchedule

	runDir, fsDir, logDir string
	args                  []string // mpirun's

	cur        *launch
	launches   []*launch
	faults     []*injection
	active     []*injection // faults in force now (a full disk, a cut link): a launch started meanwhile meets them
	nFaults    int
	pending    int                         // faults a scenario has yet to inject at the next relaunch
	beforeNext []func()                    // between this launch and the next (a corrupted checkpoint)
	nextSetup  bool                        // a fault for the next launch's setup
	problems   []string                    // verdict failures found on the way
	leftovers  []string                    // processes found after a launch
	unprovoked int                         // launches that failed with no fault in them
	lastKey    string                      // rank 0's last heartbeat (window, step, phase, ops)
	lastMove   time.Time                   // when it last changed
	quietFrom  time.Time                   // when the last fault ended
	start, end time.Time                   // of the chaos run
	setupTime  time.Duration               // how long the last launch took to its first window
	expects    []chaosExpect               // what the launches' logs must show
	holdCap    int                         // windows a fault in force may let the run train (the slot's hold)
	capped     int                         // faults in force ended early for it
	gate       bool                        // the next strike waits for the commit (gateWait)
	gateHit    string                      // where the last gated strike struck ("" when it missed the commit)
	gateLaunch int                         // in which launch
	gateMisses int                         // gated strikes that found the run past the commit
	extra      int                         // faults drawn on the way (a pair that injected one)
	batches    map[string]*batch           // "host tool": ip and tc running in each host (batch)
	armed      func() (*injection, func()) // the strike of a fault inject armed before its window (prearmed)
	late       []int                       // how many windows after its slot's window each slot struck
	ours       map[int]bool                // the soak's own processes in the hosts (batch)
}

// launch is one mpirun of the run: the command an sbatch --requeue job runs
// each time.
type launch struct {
	n           int
	cmd         *exec.Cmd
	log         string
	start, end  time.Time
	done        chan struct{}
	code        int
	hang        bool
	faults      []*injection // injected while it ran, or in force when it started
	cause       *injection   // the fault it ended on (the last before its end)
	exitAfter   time.Duration
	firstWindow int
	// pass is the pass rank 0 is in: the pass of the checkpoint the launch
	// resumes from, the main pass from the commit's restart on (track);
	// lastWin its last window seen; pos and maxPos its position now and the
	// furthest, -1 before its first window.
	pass, lastWin, pos, maxPos int
	firstPos                   int // its first position, -1 before
}

// injection is one fault as injected.
type injection struct {
	kind, detail string
	launch       int
	at, until    time.Time // injected; ended (zero: instantaneous)
	dur          time.Duration
	window       int    // rank 0's window at the injection, -1 in setup or between launches
	pass         int    // and its pass
	pos          int    // its position (chaos_schedule_test.go), -1 in setup or between launches
	where        string // whereSearch, whereCommit or whereMain
	ended        bool
	recovered    time.Time // when the run was past its position again after the launch it ended
	pair         bool      // one of two faults within one window
	setup        bool      // during a launch's setup (or checkpoint read)
}

func newChaos(t *testing.T, tb *testbed, rng *rand.Rand, wl *chaosWorkload, cfgPath string, windows int) *chaos {
	hdet, plugins := hdetBinaries(t)
	return &chaos{t: t, wl: wl, tb: tb, rng: rng, cfgPath: cfgPath, windows: windows, hdet: hdet,
		explorer: filepath.Join(plugins, "hdet-explorer-lr"), logDir: chaosLogs(t)}
}

// chaosLogs is where each launch's output goes: kept when the test fails.
func chaosLogs(t *testing.T) string {
	dir, err := os.MkdirTemp("", "hdet-chaos-logs-")
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			fmt.Printf("chaos: the launches' output is in %s\n", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	return dir
}

// useDisk puts the run directory on the tmpfs at fsDir.
func (c *chaos) useDisk(fsDir string) {
	c.fsDir, c.runDir = fsDir, filepath.Join(fsDir, "run")
	c.args = c.mpirunArgs(c.runDir)
}

func (c *chaos) startLaunch() *launch {
	t := c.t
	l := &launch{n: len(c.launches) + 1, start: time.Now(), done: make(chan struct{}), firstWindow: -1,
		pass: c.resumePass(), lastWin: -1, pos: -1, maxPos: -1, firstPos: -1}
	l.log = filepath.Join(c.logDir, fmt.Sprintf("launch-%03d.log", l.n))
	f, err := os.Create(l.log)
	require.NoError(t, err)
	defer f.Close()
	l.cmd = exec.Command("mpirun", c.args...)
	l.cmd.Env = c.tb.env
	l.cmd.Stdout, l.cmd.Stderr = f, f // a file, not a pipe: Wait returns when mpirun does
	require.NoError(t, l.cmd.Start())
	go func() {
		err := l.cmd.Wait()
		l.end = time.Now()
		if err != nil {
			l.code = exitCode(err)
		}
		close(l.done)
	}()
	l.faults = append(l.faults, c.active...)
	c.launches = append(c.launches, l)
	c.cur, c.lastMove = l, l.start
	return l
}

func (l *launch) exited() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// tail is the last n lines of the launch's output.
func (l *launch) tail(n int) string {
	b, _ := os.ReadFile(l.log)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func (l *launch) logHas(s string) bool {
	b, _ := os.ReadFile(l.log)
	return bytes.Contains(b, []byte(s))
}

// logSize is the size of the launch's output so far.
func (l *launch) logSize() int64 {
	fi, err := os.Stat(l.log)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logCount counts s in the launch's output from offset off on.
func (l *launch) logCount(off int64, s string) int {
	f, err := os.Open(l.log)
	if err != nil {
		return 0
	}
	defer f.Close()
	b, _ := io.ReadAll(io.NewSectionReader(f, off, 1<<40))
	return bytes.Count(b, []byte(s))
}

// beat is rank 0's heartbeat, when this launch wrote it.
func (c *chaos) beat(l *launch) *watchdog.Beat {
	b, err := watchdog.ReadBeat(filepath.Join(c.runDir, "heartbeats", "rank-0"))
	if err != nil || b.Time < float64(l.start.UnixNano())/1e9 {
		return nil
	}
	return b
}

// poll notes the current launch's progress, its pass and position, and the
// faults it has recovered from.
func (c *chaos) poll() *watchdog.Beat {
	l := c.cur
	b := c.beat(l)
	if b == nil {
		return nil
	}
	if key := fmt.Sprint(b.Window, b.Step, b.Phase, b.Ops); key != c.lastKey {
		c.lastKey, c.lastMove = key, time.Now()
	}
	if b.Window >= 0 {
		c.track(l, b)
		if l.firstWindow < 0 {
			l.firstWindow, c.setupTime = b.Window, time.Since(l.start)
		}
		for _, f := range c.faults {
			if f.ended && f.recovered.IsZero() && f.launch < l.n && l.pos > f.pos {
				f.recovered = time.Now()
			}
		}
	}
	return b
}

// resumePass is the pass of the checkpoint the next launch resumes from:
// the newest whole one, as hdet picks it; the search pass for a run that
// starts over.
func (c *chaos) resumePass() int {
	if !c.wl.resumes {
		return plan.PassSearch
	}
	st, _, _, err := checkpoint.Latest(filepath.Join(c.runDir, "checkpoints"))
	if err != nil {
		return plan.PassSearch
	}
	return st.Pass
}

// track follows a launch's pass and position from rank 0's heartbeat
// (window >= 0): it is in the main pass once rank 0 restores the step-0
// state (phase restart) or its window goes back (the main pass counts its
// windows from 0 again).
func (c *chaos) track(l *launch, b *watchdog.Beat) {
	if l.pass == plan.PassSearch && (b.Phase == engine.PhaseRestart || b.Window < l.lastWin) {
		l.pass = plan.PassMain
	}
	l.lastWin = b.Window
	l.pos = c.position(l, b)
	if l.firstPos < 0 {
		l.firstPos = l.pos
	}
	l.maxPos = max(l.maxPos, l.pos)
}

// position is where rank 0 is in the run: the search pass's window w is w,
// the commit S (the search pass's window count), the main pass's window w
// S+1+w.
func (c *chaos) position(l *launch, b *watchdog.Beat) int {
	s := c.ref.search
	switch {
	case l.pass == plan.PassSearch:
		return min(b.Window, s) // window S: the main pass's first plan
	case c.atCommit(l, b):
		return s
	}
	return s + 1 + b.Window
}

// atCommit reports whether rank 0 is between the last search window and
// the main pass's first: the last search window's observe (the commit
// record) and checkpoint, the main pass's first plan, the restart to the
// step-0 state and the main pass's step-0 checkpoint.
func (c *chaos) atCommit(l *launch, b *watchdog.Beat) bool {
	s := c.ref.search
	if l.pass == plan.PassSearch {
		return b.Window >= s || (b.Window == s-1 && (b.Phase == engine.PhaseObserve || b.Phase == engine.PhaseCheckpoint))
	}
	return b.Window == 0 && (b.Phase == engine.PhaseRestart || (b.Phase == engine.PhaseCheckpoint && b.Step == 0))
}

// where is the part of the run a beat is in; in setup, the pass the launch
// resumes in.
func (c *chaos) where(l *launch, b *watchdog.Beat) string {
	switch {
	case b != nil && b.Window >= 0 && c.atCommit(l, b):
		return whereCommit
	case l.pass == plan.PassSearch:
		return whereSearch
	}
	return whereMain
}

// checkHang ends a launch that neither moved nor exited for chaosBound
// after the later of its start, its last progress and the last fault's end
// (and the workload's slowStart more while it starts its worker script: in
// setup or at the commit's restart).
func (c *chaos) checkHang() {
	l := c.cur
	if l.exited() {
		return
	}
	from := l.start
	for _, t := range []time.Time{c.lastMove, c.quietFrom} {
		if t.After(from) {
			from = t
		}
	}
	bound := chaosBound
	if time.Since(from) <= bound {
		return
	}
	if b := c.beat(l); b == nil || b.Window < 0 || b.Phase == engine.PhaseRestart {
		bound += c.wl.slowStart // starting the worker's script
	}
	if time.Since(from) <= bound {
		return
	}
	l.hang = true
	c.problems = append(c.problems, fmt.Sprintf("launch %d: no progress and no exit for %s: hung (killed)", l.n, bound))
	c.killEverything()
	select {
	case <-l.done:
	case <-time.After(30 * time.Second):
		c.t.Fatalf("launch %d: mpirun survives SIGKILL", l.n)
	}
}

// tick is one step of every wait: progress, hang, 10 ms.
func (c *chaos) tick() *watchdog.Beat {
	b := c.poll()
	c.checkHang()
	time.Sleep(10 * time.Millisecond)
	return b
}

// sleep waits d, watching the launch, without relaunching it.
func (c *chaos) sleep(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
		c.tick()
	}
}

// waitPos waits until a launch is at position p or past it, relaunching
// every launch that ends meanwhile.
func (c *chaos) waitPos(p int) {
	for {
		if c.cur.exited() {
			c.relaunch()
			continue
		}
		if b := c.tick(); b != nil && b.Window >= 0 && c.cur.pos >= p {
			return
		}
	}
}

// waitExit waits until the current launch has exited.
func (c *chaos) waitExit() {
	for !c.cur.exited() {
		c.tick()
	}
}

// relaunch checks the launch that ended, does what was queued for between
// two launches and starts the next one, with a fault in its setup when one
// was queued.
func (c *chaos) relaunch() {
	prev := c.cur
	c.afterLaunch(prev)
	if prev.code == 0 {
		if c.finished() {
			c.t.Fatalf("the run finished at launch %d after %d of %d faults: it outran its schedule (a bug of the soak's sizing: %s)", prev.n, len(c.faults), c.nFaults, c.sched)
		}
		c.problems = append(c.problems, fmt.Sprintf("launch %d exited 0 without finishing the run:\n%s", prev.n, prev.tail(20)))
	}
	c.stuck()
	for _, f := range c.beforeNext {
		f()
	}
	c.beforeNext = nil
	c.startLaunch()
	if c.nextSetup {
		c.nextSetup = false
		c.setupFault()
	}
}

// finished reports whether metrics.jsonl ends with the end record.
func (c *chaos) finished() bool {
	recs, _, err := metrics.ReadFile(filepath.Join(c.runDir, "metrics.jsonl"))
	return err == nil && len(recs) > 0 && recs[len(recs)-1].Type() == metrics.TypeEnd
}

// stuck fails the test when launches keep failing with no fault in them: a
// run the same command cannot resume.
func (c *chaos) stuck() {
	n := 0
	for i := len(c.launches) - 1; i >= 0 && len(c.launches[i].faults) == 0 && c.launches[i].code != 0; i-- {
		n++
	}
	if n >= 4 {
		c.t.Fatalf("%d launches in a row failed with no fault in them: the run cannot be resumed; the last one:\n%s", n, c.cur.tail(30))
	}
}

// afterLaunch records how a launch ended and what ended it, and checks that
// nothing of it is left on any host.
func (c *chaos) afterLaunch(l *launch) {
	<-l.done
	for _, f := range l.faults { // the last fault before the end, one that ends launches first
		if !f.at.After(l.end) && (l.cause == nil || !outcome(f.kind).Lives || outcome(l.cause.kind).Lives) {
			l.cause = f
		}
	}
	what := "no fault"
	if l.code != 0 && l.cause != nil {
		from := later(l.cause.at, l.start) // a fault in force when it started: from its start
		if u := l.cause.until; outcome(l.cause.kind).FromEnd && !u.IsZero() && u.Before(l.end) {
			from = later(u, l.start) // a frozen host: from its SIGCONT
		}
		l.exitAfter = l.end.Sub(from)
		l.cause.ended = true
		what = fmt.Sprintf("%s, %.1f s after it", l.cause.kind, l.exitAfter.Seconds())
	} else if l.code != 0 {
		c.unprovoked++
	}
	c.t.Logf("launch %d: exit %d after %.1f s (%s)", l.n, l.code, l.end.Sub(l.start).Seconds(), what)
	c.checkLeftovers(l)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// checkLeftovers waits up to 15 s for every process of a launch to be gone
// from every host (ranks whose job was aborted leave by themselves within
// 5 s), then records and kills what is left.
func (c *chaos) checkLeftovers(l *launch) {
	deadline := time.Now().Add(15 * time.Second)
	for {
		left := c.processesLeft()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			c.leftovers = append(c.leftovers, fmt.Sprintf("after launch %d: %s", l.n, strings.Join(left, ", ")))
			c.killEverything()
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// processesLeft lists every process inside the bed's hosts (none but a
// launch's run there) and any hdet, explorer or worker script process
// outside them.
func (c *chaos) processesLeft() []string {
	var left []string
	for _, h := range c.tb.hosts {
		for _, pid := range c.hostPIDs(h) {
			left = append(left, fmt.Sprintf("%s (pid %d) on %s", procName(pid), pid, h))
		}
	}
	for _, pid := range c.strays() {
		left = append(left, fmt.Sprintf("%s (pid %d) outside the bed's hosts", procName(pid), pid))
	}
	return left
}

// netnsPIDs lists the processes in a bed host's network namespace, as `ip
// netns pids` does, without starting a process (a double fault's two
// injections must fit in one window).
func netnsPIDs(host string) []int {
	var st syscall.Stat_t
	if syscall.Stat("/run/netns/"+host, &st) != nil {
		return nil
	}
	want := fmt.Sprintf("net:[%d]", st.Ino)
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", p)); err == nil && ns == want {
			pids = append(pids, p)
		}
	}
	return pids
}

// hostPIDs is the run's processes on a host: every one in its network
// namespace but the soak's own (an armed fault's batch).
func (c *chaos) hostPIDs(host string) []int {
	var pids []int
	for _, p := range netnsPIDs(host) {
		if !c.ours[p] {
			pids = append(pids, p)
		}
	}
	return pids
}

func procName(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return strings.TrimSpace(string(b))
}

// pidsOf lists the processes running one of the binaries, on host (in its
// network namespace) or, with host "", outside every host of the bed.
func (c *chaos) pidsOf(host string, binaries ...string) []int {
	candidates := netnsPIDs(host)
	if host == "" {
		in := map[int]bool{}
		for _, h := range c.tb.hosts {
			for _, p := range netnsPIDs(h) {
				in[p] = true
			}
		}
		candidates = nil
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			if p, err := strconv.Atoi(e.Name()); err == nil && !in[p] {
				candidates = append(candidates, p)
			}
		}
	}
	var pids []int
	for _, p := range candidates {
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", p))
		if err != nil {
			continue
		}
		for _, b := range binaries {
			if strings.TrimSuffix(exe, " (deleted)") == b {
				pids = append(pids, p)
			}
		}
	}
	return pids
}

// killEverything kills the current mpirun and every process on the bed's
// hosts (stopped ones too), and any hdet, explorer or worker script outside
// them.
func (c *chaos) killEverything() {
	if c.cur != nil && !c.cur.exited() {
		_ = c.cur.cmd.Process.Kill()
	}
	for _, h := range c.tb.hosts {
		for _, p := range netnsPIDs(h) {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
	}
	for _, p := range c.strays() {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
}

// badCheckpoints lists what in checkpoints/ is not a whole checkpoint (a
// temporary or torn file, a damaged one), and temporary files in run.dir.
func (c *chaos) badCheckpoints() []string {
	var bad []string
	dir := filepath.Join(c.runDir, "checkpoints")
	entries, err := os.ReadDir(dir)
	require.NoError(c.t, err)
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, "ckpt-") || !strings.HasSuffix(name, ".hdet") {
			bad = append(bad, name+": not a checkpoint's name (a temporary file left behind?)")
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err == nil {
			_, err = checkpoint.Decode(data)
		}
		if err != nil {
			bad = append(bad, name+": "+err.Error())
		}
	}
	top, _ := os.ReadDir(c.runDir)
	for _, e := range top {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			bad = append(bad, "run.dir/"+e.Name()+": a temporary file left behind")
		}
	}
	sort.Strings(bad)
	return bad
}
