package tests

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hdet-dev/hdet/internal/testenv"
	"github.com/stretchr/testify/require"
)

// The chaos soak's faults on the bed's network: a host's link down, two
// hosts cut apart, a slow link, each a line to ip or tc running inside the
// host (batch).

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
