package tests

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/checkpoint"
	"github.com/hdet-dev/hdet/internal/plan"
	"github.com/hdet-dev/hdet/internal/testenv"
	"github.com/hdet-dev/hdet/internal/watchdog"
)

// The faults of the chaos soak. Each starter injects one fault now and
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

func armKillRank(c *chaos) func() (*injection, func()) {
	ranks := c.rankPIDs()
	if len(ranks) == 0 {
		return nil
	}
	pids := make([]int, 0, len(ranks))
	for p := range ranks {
		pids = append(pids, p)
	}
	sort.Ints(pids)
	pid := pids[c.rng.IntN(len(pids))]
	return func() (*injection, func()) {
		at := time.Now()
		if syscall.Kill(pid, syscall.SIGKILL) != nil {
			return nil, nil
		}
		return &injection{at: at, detail: ranks[pid]}, nil
	}
}

func armKillHost(c *chaos) func() (*injection, func()) {
	h := c.host()
	pids := c.hostPIDs(h)
	if len(pids) == 0 {
		return nil
	}
	return func() (*injection, func()) {
		at := time.Now()
		signalAll(pids, syscall.SIGKILL)
		return &injection{at: at, detail: fmt.Sprintf("%s: %d processes", h, len(pids))}, nil
	}
}

func signalAll(pids []int, sig syscall.Signal) {
	for _, p := range pids {
		_ = syscall.Kill(p, sig)
	}
}

func armFreezeHost(c *chaos) func() (*injection, func()) {
	h := c.host()
	pids := c.hostPIDs(h)
	if len(pids) == 0 {
		return nil
	}
	d := chaosWatchdog + c.uniform(2*time.Second, 5*time.Second)
	return func() (*injection, func()) {
		at := time.Now()
		signalAll(pids, syscall.SIGSTOP)
		return &injection{at: at, dur: d, detail: fmt.Sprintf("%s: %d processes stopped for %.1f s", h, len(pids), d.Seconds())},
			func() { signalAll(pids, syscall.SIGCONT) }
	}
}

// batch is `ip -batch -` or `tc -batch -` running inside a host for the
// whole soak (startBatches: before the first launch), so that striking
// (and ending) a link fault is a line written to it: `ip netns exec` takes
// seconds on a loaded machine (a mount namespace and /sys each time), while
// the run trains on. Started when a fault was armed, it once took so long
// at a load of 10 on the 2 cores that the run trained 400 windows
// meanwhile, to its end, with 20 faults left.
type batch struct {
	cmd          *exec.Cmd
	in           io.WriteCloser
	out          testenv.SyncBuffer
	what         string
	show, answer string        // a command that prints, and what its answer holds
	done         chan struct{} // closed when the tool has exited
}

// startBatches starts ip and tc in every host.
func (c *chaos) startBatches() {
	for _, h := range c.tb.hosts {
		for _, tool := range []string{"ip", "tc"} {
			c.batch(h, tool)
		}
	}
}

// batch is host's tool (ip or tc), started again when it is not running
// (killEverything kills it with the rest of the host after a hang).
func (c *chaos) batch(host, tool string) *batch {
	key := host + " " + tool
	if b := c.batches[key]; b != nil && !b.exited() {
		return b
	}
	b := &batch{what: tool + " on " + host, show: "link show dev lo", answer: "lo:", done: make(chan struct{})}
	if tool == "tc" {
		b.show, b.answer = "qdisc show dev lo", "qdisc"
	}
	b.cmd = exec.Command("ip", "netns", "exec", host, tool, "-batch", "-")
	in, err := b.cmd.StdinPipe()
	require.NoError(c.t, err)
	b.in = in
	b.cmd.Stdout, b.cmd.Stderr = &b.out, &b.out
	require.NoError(c.t, b.cmd.Start())
	go func() { _ = b.cmd.Wait(); close(b.done) }()
	if c.ours == nil {
		c.ours, c.batches = map[int]bool{}, map[string]*batch{}
	}
	c.ours[b.cmd.Process.Pid] = true // ip netns exec execs the tool: not the run's, not a leftover
	c.batches[key] = b
	c.syncBatch(b)
	return b
}

func (b *batch) exited() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

// syncBatch waits, watching the launch, until the tool has run every
// command handed to it (it answers one more that prints), and checks that
// each one succeeded (ip and tc -batch stop at the first that fails).
func (c *chaos) syncBatch(b *batch) {
	n := strings.Count(b.out.String(), b.answer)
	b.run(c.t, b.show)
	for start := time.Now(); strings.Count(b.out.String(), b.answer) <= n; {
		require.False(c.t, b.exited(), "%s exited: %s", b.what, b.out.String())
		require.Less(c.t, time.Since(start), 30*time.Second, "%s does not answer: %s", b.what, b.out.String())
		c.tick()
	}
}

// run hands the tool one command (it runs it as it reads it).
func (b *batch) run(t *testing.T, line string) {
	_, err := io.WriteString(b.in, line+"\n")
	require.NoError(t, err, "%s: %s: %s", b.what, line, b.out.String())
}

func armLinkDown(c *chaos) func() (*injection, func()) {
	h := c.host()
	ip := c.batch(h, "ip")
	d := c.uniform(2*time.Second, 20*time.Second)
	return func() (*injection, func()) {
		at := time.Now()
		ip.run(c.t, "link set eth0 down")
		return &injection{at: at, dur: d, detail: fmt.Sprintf("%s's link down for %.1f s", h, d.Seconds())}, func() {
			ip.run(c.t, "link set eth0 up")
			c.syncBatch(ip)
			c.waitBack(h)
		}
	}
}

// waitBack waits, watching the launch, until a host whose link came back
// reaches the launcher (waitBack's probe), or until the run has trained 2
// windows since (its ranks reach the other hosts again): the run trains
// on meanwhile, and its windows are the schedule's.
func (c *chaos) waitBack(host string) {
	env, err := os.ReadFile(filepath.Join(c.tb.state, "cluster.env"))
	require.NoError(c.t, err)
	m := regexp.MustCompile(`(?m)^NC_BR_IP=(\S+)$`).FindSubmatch(env)
	require.NotNil(c.t, m, "no NC_BR_IP in cluster.env:\n%s", env)
	ln, err := net.Listen("tcp", string(m[1])+":0")
	require.NoError(c.t, err)
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_ = conn.Close()
		}
	}()
	probe := "exec 3<>/dev/tcp/" + strings.Replace(ln.Addr().String(), ":", "/", 1)
	l, from, start := c.cur, c.cur.pos, time.Now()
	for {
		done := make(chan error, 1)
		go func() { done <- exec.Command("ip", "netns", "exec", host, "timeout", "2", "bash", "-c", probe).Run() }()
		for waiting := true; waiting; {
			select {
			case err := <-done:
				if err == nil {
					c.t.Logf("%s reached the launcher %.1f s after its link came back", host, time.Since(start).Seconds())
					return
				}
				waiting = false
			default:
				c.tick()
				if from >= 0 && l == c.cur && !l.exited() && l.pos >= from+2 {
					c.t.Logf("%s is back: the run trained 2 windows %.1f s after its link came back", host, time.Since(start).Seconds())
					return
				}
			}
		}
		require.Less(c.t, time.Since(start), 30*time.Second, "%s did not reach %s within 30 s", host, ln.Addr())
		c.sleep(200 * time.Millisecond)
	}
}

var clusterBase = regexp.MustCompile(`(?m)^NC_BASE=(\S+)$`)

// hostIP is a bed host's address.
func (c *chaos) hostIP(host string) string {
	env, err := os.ReadFile(filepath.Join(c.tb.state, "cluster.env"))
	require.NoError(c.t, err)
	m := clusterBase.FindSubmatch(env)
	require.NotNil(c.t, m, "no NC_BASE in cluster.env")
	return string(m[1]) + "." + strings.TrimPrefix(host, "hdnode")
}

func armPartition(c *chaos) func() (*injection, func()) {
	i := c.rng.IntN(len(c.tb.hosts))
	a, b := c.tb.hosts[i], c.tb.hosts[(i+1+c.rng.IntN(len(c.tb.hosts)-1))%len(c.tb.hosts)]
	ipA, ipB := c.batch(a, "ip"), c.batch(b, "ip")
	toA, toB := c.hostIP(a)+"/32", c.hostIP(b)+"/32"
	d := c.uniform(2*time.Second, 20*time.Second)
	return func() (*injection, func()) {
		at := time.Now()
		ipA.run(c.t, "route add blackhole "+toB)
		ipB.run(c.t, "route add blackhole "+toA)
		return &injection{at: at, dur: d, detail: fmt.Sprintf("%s <-> %s cut for %.1f s", a, b, d.Seconds())}, func() {
			ipA.run(c.t, "route del blackhole "+toB)
			ipB.run(c.t, "route del blackhole "+toA)
			c.syncBatch(ipA)
			c.syncBatch(ipB)
		}
	}
}

func armSlowLink(c *chaos) func() (*injection, func()) {
	h := c.host()
	var qdisc string
	if c.tools.netem {
		qdisc = fmt.Sprintf("netem delay %dms 10ms loss %d%%", 10+c.rng.IntN(50), 1+c.rng.IntN(5))
	} else {
		qdisc = fmt.Sprintf("tbf rate %dmbit burst 32kb latency 50ms", 4+c.rng.IntN(13))
	}
	tc := c.batch(h, "tc")
	d := c.uniform(2*time.Second, 10*time.Second)
	return func() (*injection, func()) {
		at := time.Now()
		tc.run(c.t, "qdisc add dev eth0 root "+qdisc)
		return &injection{at: at, dur: d, detail: fmt.Sprintf("%s: %s for %.1f s", h, qdisc, d.Seconds())}, func() {
			tc.run(c.t, "qdisc del dev eth0 root")
			c.syncBatch(tc)
		}
	}
}

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
		c.expect(l.n, true, "(run.checkpoint_max_failing "+chaosMaxFailing.String()+")", "checkpoints failing past run.checkpoint_max_failing stop the run")
		c.expect(l.n, true, "no space left on device (the file system of "+c.runDir, "the disk-full message names the path and its free space")
	}
	return true
}

// chaosExpect is what a launch's log must show: launch from's, or (only
// false) that of one launch from it on.
type chaosExpect struct {
	from      int
	only      bool
	text, why string
}

func (c *chaos) expect(from int, only bool, text, why string) {
	c.expects = append(c.expects, chaosExpect{from: from, only: only, text: text, why: why})
}

// armSignal arms SIGUSR1 or SIGTERM to mpirun (it forwards them to every
// rank), once mpirun has started every rank: signalled while it still
// starts them, Open MPI 4.1's mpirun can end with "ORTE does not know how
// to route a message" and exit 0 having run nothing (or drop the signal),
// which is the launcher's doing, not hdet's (docs/chaos.md).
func armSignal(sig syscall.Signal) armer {
	return func(c *chaos) func() (*injection, func()) {
		l := c.cur
		if l.exited() || len(c.rankPIDs()) < c.ranks() {
			return nil
		}
		return func() (*injection, func()) {
			at := time.Now()
			if l.cmd.Process.Signal(sig) != nil {
				return nil, nil
			}
			return &injection{at: at, detail: "to mpirun"}, nil
		}
	}
}

// armSigusr1 is armSignal of SIGUSR1.
var armSigusr1 = armSignal(syscall.SIGUSR1)

func armExplorerKill(c *chaos) func() (*injection, func()) {
	for _, h := range c.tb.hosts {
		if pids := c.pidsOf(h, c.explorer); len(pids) > 0 {
			return func() (*injection, func()) {
				at := time.Now()
				signalAll(pids, syscall.SIGKILL)
				return &injection{at: at, detail: fmt.Sprintf("pid %d on %s", pids[0], h)}, nil
			}
		}
	}
	return nil
}

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
	if c.wl.resumes { // a worker run starts over: it reads no checkpoint, and its first one written removes the damaged file (the verdict's badCheckpoints)
		c.expect(inj.launch, false, "skipping a damaged checkpoint", "a damaged newest checkpoint is skipped for the one before ("+inj.detail+")")
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

// chaosToolset is what the bed's kernel offers.
type chaosToolset struct{ netem bool }

// chaosTools checks for tc and whether the kernel has netem (this one has
// no CONFIG_NET_SCH_NETEM: tbf stands in).
func chaosTools(t *testing.T, tb *testbed) chaosToolset {
	t.Helper()
	testenv.NeedTool(t, "tc")
	h := tb.hosts[0]
	err := exec.Command("ip", "netns", "exec", h, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms").Run()
	if err == nil {
		_ = exec.Command("ip", "netns", "exec", h, "tc", "qdisc", "del", "dev", "lo", "root").Run()
	}
	return chaosToolset{netem: err == nil}
}
