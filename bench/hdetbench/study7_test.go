package main

import (
	"bytes"
	"context"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/metrics"
	"github.com/hdet-dev/hdet/internal/testenv"
)

func TestTcArguments(t *testing.T) {
	assert.Equal(t, "100mbit", tcRate(1e8))
	assert.Equal(t, "1gbit", tcRate(1e9))
	assert.Equal(t, "2500000bit", tcRate(2.5e6))
	assert.Equal(t, "200us", tcUsec(200*time.Microsecond))
	assert.Equal(t, "qdisc replace dev eth0 root tbf rate 100mbit burst 65536 latency 50ms",
		strings.Join(tbfArgs(netLink{Rate: 1e8}), " "))
	assert.Equal(t, "qdisc replace dev eth0 root tbf rate 1gbit burst 125000 latency 50ms",
		strings.Join(tbfArgs(netLink{Rate: 1e9}), " "), "a burst of 1 ms at the rate")
	assert.Equal(t, "qdisc replace dev eth0 root netem delay 1000us limit 100000 rate 100mbit",
		strings.Join(netemArgs(netLink{Rate: 1e8, Delay: time.Millisecond}), " "))
	assert.Equal(t, "unshaped", netLinkName(netLink{Name: "x"}))
	assert.Equal(t, "1gbit-200us", netLinkName(netLink{Rate: 1e9, Delay: 200 * time.Microsecond}))
}

// The ring's count: rank i sends 2(P-1)/P of the buffer to rank i+1, and
// only the hops between hosts count.
func TestRingHostBytes(t *testing.T) {
	host := func(r int) int { return r / 2 }
	got := ringHostBytes([]int{0, 1, 2, 3, 4, 5}, host, 3, 600)
	assert.Equal(t, []float64{1000, 1000, 1000}, got, "one hop per host leaves it, 2*5/6*600 each")
	got = ringHostBytes([]int{0, 2, 4}, host, 3, 300)
	assert.Equal(t, []float64{400, 400, 400}, got, "every hop crosses: 2*2/3*300")
	assert.Equal(t, []float64{0, 0, 0}, ringHostBytes([]int{2, 3}, host, 3, 300), "inside one host")
	assert.Equal(t, []float64{0, 0, 0}, ringHostBytes([]int{2}, host, 3, 300), "one rank: no allreduce")
}

func TestNetExpectedPerMode(t *testing.T) {
	s := netDefaults(false)
	grad := float64(4 * modelFloats)
	cs := map[string]netConfig{}
	for _, c := range s.configs() {
		cs[c.Name] = c
	}
	m := netMetrics{Steps: 100, Converges: 4}
	assert.Equal(t, []string{"plain", "grad-T50", "local-T10", "local-T50", "local-T200", "groups-T50"}, mapsKeysInOrder(s.configs()))
	for name, want := range map[string]float64{
		// per step the gradients over all 6 ranks, per converge the parameters
		"grad-T50": 100*2*5.0/6*grad + 4*2*5.0/6*grad,
		// per converge the parameters and both moments over all 6 ranks
		"local-T50": 4 * 2 * 5.0 / 6 * 3 * grad,
		// the gradients stay on the host; per converge both ranks of a host
		// send their half over the 3 replicas
		"groups-T50": 4 * 2 * 2 * 2.0 / 3 * 3 * grad / 2,
	} {
		got := netExpected(s, cs[name], m)
		for h := range got {
			assert.InEpsilon(t, want, got[h], 1e-12, "%s host %d", name, h)
		}
	}
}

func mapsKeysInOrder(cs []netConfig) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

func TestNetSettings(t *testing.T) {
	s := netDefaults(false)
	require.Len(t, s.Links, 3)
	assert.False(t, s.Links[0].shaped())
	assert.Equal(t, netLink{Name: "100 Mbit/s, 1 ms", Rate: 1e8, Delay: time.Millisecond}, s.Links[2])
	c := s.configs()[4] // local, T = 200
	assert.Contains(t, s.sets(c, "/d"), "train.eval_every=1")
	assert.Contains(t, s.sets(c, "/d"), "train.sync=local")
	c = s.configs()[2] // local, T = 10: every 5th window
	assert.Contains(t, s.sets(c, "/d"), "train.eval_every=5")
	assert.Contains(t, s.sets(s.configs()[5], "/d"), "train.replica_size=2")
	q := netDefaults(true)
	assert.Len(t, q.Links, 2)
	for _, c := range q.configs() {
		assert.LessOrEqual(t, c.T, 156, "%s: T fits one epoch of 6 ranks", c.Name)
	}
}

// writeNetRun writes a two-pass run's metrics.jsonl: a search pass of 2
// windows with a spread and the main pass of 3 without, every window
// evaluated for 1 s.
func writeNetRun(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	mw, err := metrics.OpenWriter(filepath.Join(dir, "metrics.jsonl"))
	require.NoError(t, err)
	spreadV := map[string][]metrics.Float{"lr": {1, 2}}
	flat := map[string][]metrics.Float{"lr": {1, 1}}
	ev := func(acc float64) *metrics.Eval { return &metrics.Eval{Accuracy: metrics.Float(acc)} }
	recs := []metrics.Record{
		metrics.StartRecord{Time: 100},
		metrics.WindowRecord{Time: 111, Window: 0, Step: 10, Values: spreadV, Eval: ev(0.99), EvalSeconds: 1, AllreduceSeconds: 2, ConvergeSeconds: 0.5, PlanSeconds: 0.1},
		metrics.WindowRecord{Time: 122, Window: 1, Step: 20, Values: spreadV, Eval: ev(0.99), EvalSeconds: 1, AllreduceSeconds: 2, ConvergeSeconds: 0.5, PlanSeconds: 0.1},
		metrics.CommitRecord{Time: 122, Step: 20},
		metrics.WindowRecord{Time: 133, Pass: 1, Window: 0, Step: 10, Values: flat, Eval: ev(0.9), EvalSeconds: 1},
		metrics.WindowRecord{Time: 144, Pass: 1, Window: 1, Step: 20, Values: flat, Eval: ev(0.98), EvalSeconds: 1},
		metrics.WindowRecord{Time: 155, Pass: 1, Window: 2, Step: 25, Values: flat, Eval: ev(0.985), EvalSeconds: 1},
		metrics.EndRecord{Time: 156, Eval: ev(0.985)},
	}
	for _, r := range recs {
		require.NoError(t, mw.Write(r))
	}
	require.NoError(t, mw.Close())
	return dir
}

func TestReadNetMetrics(t *testing.T) {
	dir := writeNetRun(t)
	m, err := readNetMetrics(dir, "gradients", 0.975)
	require.NoError(t, err)
	assert.Equal(t, 45, m.Steps, "both passes")
	assert.Equal(t, 20, m.SearchSteps)
	assert.Equal(t, 2, m.Converges, "the search pass's windows; the main pass's ranks are identical")
	assert.Equal(t, 5, m.Evals)
	assert.InDelta(t, 5, m.EvalSecs, 1e-9)
	assert.InDelta(t, 50, m.Wall, 1e-9, "55 s to the last window, 5 s of evaluations out")
	// The search pass's 0.99 does not count: the model is the main pass's.
	assert.InDelta(t, 40, m.ToTarget, 1e-9, "main pass window 1 at 144 s, 4 evaluations before and at it")
	assert.Equal(t, []netPoint{{30, 0.9}, {40, 0.98}, {50, 0.985}}, m.Curve)
	assert.InDelta(t, 0.985, m.Accuracy, 1e-12)
	assert.InDelta(t, 4, m.Allreduce, 1e-12)
	assert.InDelta(t, 1000*50/45.0, 1000*m.perStep(), 1e-9)

	m, err = readNetMetrics(dir, "local", 0.999)
	require.NoError(t, err)
	assert.Equal(t, 5, m.Converges, "local mode converges every window")
	assert.True(t, math.IsNaN(m.ToTarget), "never reached")

	_, err = readNetMetrics(t.TempDir(), "local", 0.9)
	assert.Error(t, err)
}

func TestNetTablesAndPlot(t *testing.T) {
	s := netDefaults(true)
	m, err := readNetMetrics(writeNetRun(t), "gradients", s.Target)
	require.NoError(t, err)
	var res []netResult
	for _, l := range s.Links {
		for _, c := range s.configs() {
			res = append(res, netResult{Link: l, Config: c, Qdisc: "qdisc tbf 8001: root rate 100Mbit", DelayApplied: false,
				Check: linkCheck{Bytes: 1, Mbits: 95, RTT: time.Millisecond}, Sent: []int64{450e6, 450e6, 450e6}, ThroughQdisc: []int64{450e6, 450e6, 450e6}, netMetrics: m})
		}
	}
	res[1].Failed = "boom"
	b := &bench{}
	tb := netTable(s)
	b.netTables(tb, s, res)
	var out bytes.Buffer
	tb.text(&out)
	text := out.String()
	assert.Contains(t, text, "FAILED: boom")
	assert.Contains(t, text, "no: no sch_netem in this kernel")
	assert.Contains(t, text, "100 Mbit/s, 1 ms: the delay was NOT applied")
	assert.NotContains(t, text, "unshaped: the delay was NOT applied")
	assert.Contains(t, text, "10.000 / 10.000 / 10.000", "450 MB over 45 steps")
	assert.Contains(t, text, "40.0 s", "to the quick variant's 95 %")
	path := filepath.Join(t.TempDir(), "net.png")
	require.NoError(t, plotNet(path, s, res))
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.True(t, bytes.HasPrefix(data, []byte("\x89PNG")))
}

func TestStudySevenFlags(t *testing.T) {
	var errb bytes.Buffer
	o, err := parseFlags(nil, &errb)
	require.NoError(t, err)
	assert.True(t, o.want[7], "study 7 is part of make bench")
	_, err = parseFlags([]string{"-studies", "6"}, &errb)
	assert.ErrorContains(t, err, "1..5, 7 or 8")
}

// A veth pair between two private namespaces, one side shaped with tbf:
// the link check measures the rate, and the qdisc counts what eth0 sent.
func TestShapedLinkIsMeasured(t *testing.T) {
	testenv.NeedRoot(t, "network namespaces and tc")
	for _, tool := range []string{"ip", "tc"} {
		testenv.NeedTool(t, tool)
	}
	ctx := context.Background()
	hosts := []string{"hdnettest1", "hdnettest2"}
	run := func(args ...string) {
		out, err := exec.Command("ip", args...).CombinedOutput()
		require.NoError(t, err, "ip %v: %s", args, out)
	}
	cleanup := func() {
		for _, h := range hosts {
			_ = exec.Command("ip", "netns", "del", h).Run()
		}
	}
	cleanup()
	t.Cleanup(cleanup)
	for _, h := range hosts {
		run("netns", "add", h)
	}
	run("link", "add", "hdnt1", "netns", hosts[0], "type", "veth", "peer", "name", "hdnt2", "netns", hosts[1])
	for i, h := range hosts {
		run("-n", h, "link", "set", []string{"hdnt1", "hdnt2"}[i], "name", "eth0")
		run("-n", h, "addr", "add", []string{"10.218.99.1/24", "10.218.99.2/24"}[i], "dev", "eth0")
		run("-n", h, "link", "set", "eth0", "up")
		run("-n", h, "link", "set", "lo", "up")
	}
	bd := &bed{hosts: hosts}
	qd, delayed, err := bd.shape(ctx, netLink{Rate: 50e6})
	require.NoError(t, err)
	assert.Contains(t, qd, "tbf")
	assert.Contains(t, qd, "50Mbit")
	assert.True(t, delayed, "no delay asked")
	before, err := bd.counter(ctx, "tx_bytes")
	require.NoError(t, err)
	c, err := checkLink(hosts[0], hosts[1], "10.218.99.2", 4<<20)
	require.NoError(t, err)
	after, err := bd.counter(ctx, "tx_bytes")
	require.NoError(t, err)
	q, err := bd.qdiscBytes(ctx)
	require.NoError(t, err)
	t.Logf("50 Mbit/s tbf: transfer %.1f Mbit/s, connect %v, sent %v, qdisc %v", c.Mbits, c.RTT, deltas(after, before), q)
	assert.InDelta(t, 48, c.Mbits, 8, "tbf's rate, less TCP/IP headers")
	assert.Greater(t, deltas(after, before)[0], int64(4<<20), "the transfer left eth0")
	assert.GreaterOrEqual(t, q[0], int64(4<<20), "through the tbf")
}
