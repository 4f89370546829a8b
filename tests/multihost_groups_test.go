package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/metrics"
)

// TestMultiHostReplicaGroups runs replica groups across the test bed's 3
// hosts x 2 ranks with train.replica_size 2, so each replica fills a host:
// the run under mpirun --hostfile equals the same run on one host, every
// replica's ranks sit on one host, `hdet sbatch --replica-size 2` output
// runs under the multi-node Slurm, and the converge of G = 1 and G = 2 is
// timed with the bytes each host sent.
func TestMultiHostReplicaGroups(t *testing.T) {
	tb := startTestbed(t, 3, true)
	conf := cfg("local", lrDropout) + "\n"
	g2 := []string{"--set", "train.steps=" + multiSteps, "--set", "train.replica_size=2"}
	ref := runHDET(t, 6, conf, g2...) // one host, 6 ranks, 3 replicas
	require.NoError(t, ref.err, ref.stderr)
	want := ref.end(t).Checksum

	t.Run("mpirun, a replica per host", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		args, runDir := hdetArgs(t, t.TempDir(), conf, append(g2, "--log-all-ranks", "--debug")...)
		r := runOn(tb.mpirun(ctx, t, 3, 2, args...), runDir)
		require.NoError(t, r.err, r.stderr)
		assert.Equal(t, want, r.end(t).Checksum, "mpirun over 3 hosts")
		hosts := replicaHosts(t, r.stderr)
		t.Logf("replica -> host: %v", hosts)
		assert.Equal(t, map[int][]string{0: {"hdnode1"}, 1: {"hdnode2"}, 2: {"hdnode3"}}, hosts)
		assert.NotContains(t, r.stderr, "span several hosts")
	})

	t.Run("hdet sbatch --replica-size 2", func(t *testing.T) {
		script, _, r := sbatchMulti(t, tb, conf, "groups", "--replica-size", "2")
		assert.Contains(t, script, "--distribution=block:block")
		assert.Equal(t, want, r.end(t).Checksum, "%s", r.stdout)
	})

	t.Run("converge G=1 vs G=2", func(t *testing.T) {
		sent := map[int][]int64{}
		for _, g := range []int{1, 2} {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			args, runDir := hdetArgs(t, t.TempDir(), conf, "--set", "train.steps="+multiSteps, "--set", "train.replica_size="+strconv.Itoa(g))
			before := tb.txBytes(t)
			r := runOn(tb.mpirun(ctx, t, 3, 2, args...), runDir)
			cancel()
			require.NoError(t, r.err, r.stderr)
			after := tb.txBytes(t)
			for i := range after {
				sent[g] = append(sent[g], after[i]-before[i])
			}
			sec, n := meanConverge(r.records(t))
			t.Logf("G=%d on 3 hosts x 2 ranks: converge %.2f ms per window (mean of %d windows); bytes sent per host (eth0) %v",
				g, 1e3*sec, n, sent[g])
		}
		// Not a fixed ratio: G=1 here is 6 replicas with no per-step traffic
		// (local mode), G=2 is 3 replicas, and Open MPI picks its allreduce
		// algorithm by size and count. The numbers go into the log.
		for _, g := range []int{1, 2} {
			assert.Positive(t, slices.Min(sent[g]), "G=%d: every host sent", g)
		}
	})
}

// replicaHosts reads the ranks' "replica group member" lines (--debug
// --log-all-ranks): replica -> the hosts its ranks ran on.
func replicaHosts(t *testing.T, stderr string) map[int][]string {
	t.Helper()
	out := map[int][]string{}
	sc := bufio.NewScanner(strings.NewReader(stderr))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m struct {
			Message, Host string
			Replica       int
		}
		if json.Unmarshal(sc.Bytes(), &m) == nil && m.Message == "replica group member" && !slices.Contains(out[m.Replica], m.Host) {
			out[m.Replica] = append(out[m.Replica], m.Host)
		}
	}
	return out
}

// txBytes is the bytes each host of the bed has sent on its eth0.
func (tb *testbed) txBytes(t *testing.T) []int64 {
	t.Helper()
	var out []int64
	for _, h := range tb.hosts {
		b, err := exec.Command("ip", "netns", "exec", h, "cat", "/sys/class/net/eth0/statistics/tx_bytes").Output()
		require.NoError(t, err, "tx_bytes of %s", h)
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		require.NoError(t, err)
		out = append(out, v)
	}
	return out
}

// meanConverge is the mean converge_seconds of a run's window records.
func meanConverge(recs []metrics.Record) (float64, int) {
	s, n := 0.0, 0
	for _, r := range metrics.Of[metrics.WindowRecord](recs) {
		s, n = s+r.ConvergeSeconds, n+1
	}
	return s / float64(max(n, 1)), n
}
