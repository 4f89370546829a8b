package tests

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/testenv"
)

// TestMultiHostWorkerReplicaGroups runs an unchanged DDP script as 3
// replicas of 2 ranks on the test bed's 3 hosts (mpirun --hostfile, 2 slots
// a host, so each replica fills a host and its torch world rendezvouses
// there): inside a replica the ranks hold identical parameters, after every
// converge all six hold the average, the replicas' rates differ, exit 0;
// then a rank killed on the second host ends the run, nothing left behind.
func TestMultiHostWorkerReplicaGroups(t *testing.T) {
	testenv.NeedTorch(t)
	tb := startTestbed(t, 3, false)
	hdet, plugins := hdetBinaries(t)
	dir := t.TempDir()
	runDir, traceDir, conf := filepath.Join(dir, "run"), filepath.Join(dir, "trace"), filepath.Join(dir, "config.yaml")
	require.NoError(t, os.Mkdir(traceDir, 0o755))
	require.NoError(t, os.WriteFile(conf, []byte("train: {replica_size: 2}\n"), 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r := runOn(tb.mpirun(ctx, t, 3, 2, "-x", "HDET_TRACE_DIR="+traceDir,
		hdet, "run", conf, "--run-dir", runDir, "--plugin-dir", plugins, "--progress", "none", "--debug", "--log-all-ranks",
		"--worker", "--", testenv.Python, workerScript(t), "--steps", "24", "--window", "4", "--explore", "lr", "--ddp"), runDir)
	require.NoError(t, r.err, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	assert.Contains(t, r.stdout, "committed after a search pass")
	assert.Equal(t, map[int][]string{0: {"hdnode1"}, 1: {"hdnode2"}, 2: {"hdnode3"}}, replicaHosts(t, r.stderr))
	traces := make([][]traceRecord, 6)
	for rank := range traces {
		traces[rank] = readTrace(t, traceDir, rank)
		require.NotEmpty(t, dones(traces[rank]), "rank %d traced its windows", rank)
	}
	differ := false
	for rank := range traces {
		a, mate := dones(traces[rank]), dones(traces[rank^1]) // the other rank of its replica
		require.Equal(t, len(a), len(mate))
		for k := range a {
			assert.Equal(t, a[k].SHA, mate[k].SHA, "DDP keeps ranks %d and %d identical (done %d)", rank, rank^1, k)
			assert.Equal(t, a[k].Applied, mate[k].Applied, "ranks %d and %d apply their replica's values (done %d)", rank, rank^1, k)
		}
		other := dones(traces[(rank+2)%6])
		for k := range min(len(a), len(other)) {
			differ = differ || a[k].Applied["lr"][0] != other[k].Applied["lr"][0]
		}
		assert.Equal(t, loads(traces[0]), loads(traces[rank]), "rank %d holds the average after every converge", rank)
	}
	assert.True(t, differ, "the replicas' learning-rate multipliers differ in the search pass")

	// A rank's Python killed on the second host (world rank 3, position 1
	// of replica 1) ends the run naming it: its replica's other rank is
	// blocked in a DDP collective with it, and nothing is left on any host.
	runDir = filepath.Join(dir, "killed")
	start := time.Now()
	r = runOn(tb.mpirun(ctx, t, 3, 2, "-x", "HDET_TRACE_DIR="+traceDir,
		hdet, "run", conf, "--run-dir", runDir, "--plugin-dir", plugins, "--progress", "none",
		"--worker", "--", testenv.Python, workerScript(t), "--steps", "24", "--window", "4", "--explore", "lr", "--ddp",
		"--die-at-step", "10", "--fail-rank", "3"), runDir)
	t.Logf("the run with a killed rank ended after %.1f s", time.Since(start).Seconds())
	require.Error(t, r.err)
	assert.NotEqual(t, 2, exitCode(r.err), "a fault, not a usage error")
	assert.Regexp(t, `rank 3: worker \(pid \d+\) training window \d+ \(steps \d+-\d+\): worker process exited \(killed by signal 9`, r.stdout+r.stderr)
	requireNoRankLeft(t, runDir, 6, traceDir)
}
