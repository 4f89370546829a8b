package tests

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWorkerReplicaGroupsDDP runs a DDP script as 2 replicas of 2 ranks
// (train.replica_size 2) on 4 ranks: each replica is its own torch world
// (WORLD_SIZE=2), so inside a replica the ranks hold identical parameters
// and apply their replica's rate; the replicas' rates differ in the search
// pass; after every converge all four ranks hold the average.
func TestWorkerReplicaGroupsDDP(t *testing.T) {
	r := runWorker(t, 4, "train: {replica_size: 2}\n", nil, workerScript(t),
		"--steps", "24", "--window", "4", "--explore", "lr", "--ddp")
	assertReplicaGroupsDDP(t, r)
}

// assertReplicaGroupsDDP checks a run of 4 ranks as 2 replicas of 2 under
// DDP: it ended well, the ranks of a replica apply its values and hold the
// same parameters, every rank loads the average, the replicas' rates differ.
func assertReplicaGroupsDDP(t *testing.T, r hdetRun) {
	t.Helper()
	require.NoError(t, r.err, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	assert.Contains(t, r.stdout, "committed after a search pass")
	traces := make([][]traceRecord, 4)
	for rank := range traces {
		traces[rank] = readTrace(t, filepath.Join(filepath.Dir(r.dir), "trace"), rank)
	}
	differ := false
	for rank := range traces {
		mate := rank ^ 1 // the other rank of its replica
		a, b := dones(traces[rank]), dones(traces[mate])
		require.Equal(t, len(a), len(b))
		for k := range a {
			assert.Equal(t, a[k].Applied, b[k].Applied, "ranks %d and %d apply their replica's values (done %d)", rank, mate, k)
			assert.Equal(t, a[k].SHA, b[k].SHA, "DDP keeps ranks %d and %d identical (done %d)", rank, mate, k)
		}
		other := dones(traces[(rank+2)%4])
		for k := range min(len(a), len(other)) {
			differ = differ || a[k].Applied["lr"][0] != other[k].Applied["lr"][0]
		}
		assert.Equal(t, loads(traces[0]), loads(traces[rank]), "rank %d holds the average after every converge", rank)
	}
	assert.True(t, differ, "the replicas' learning-rate multipliers differ in the search pass")
	assertDrift(t, r)
}

// assertDrift checks the drift every window record of a run with replica
// groups gives: there, a fraction of the average's norm; in the search
// pass, where the replicas train at different rates, above 0.
func assertDrift(t *testing.T, r hdetRun) {
	recs := windowRecords(t, r)
	require.NotEmpty(t, recs)
	for _, rec := range recs {
		require.NotNil(t, rec.Drift, "window %d of pass %d", rec.Window, rec.Pass)
		d := float64(*rec.Drift)
		assert.Less(t, d, 1.0, "window %d of pass %d", rec.Window, rec.Pass)
		if rec.Pass == 0 {
			assert.Greater(t, d, 0.0, "window %d of the search pass", rec.Window)
		} else {
			assert.GreaterOrEqual(t, d, 0.0, "window %d of the main pass", rec.Window)
		}
	}
}

// A script that does not make each replica one data-parallel model (no
// init_process_group) cannot run with replica groups: exit 2, saying why.
func TestWorkerReplicaGroupsNeedDDP(t *testing.T) {
	r := runWorker(t, 4, "train: {replica_size: 2}\n", nil, workerScript(t), "--steps", "8", "--window", "4", "--explore", "lr")
	require.Error(t, r.err)
	assert.Equal(t, 2, exitCode(r.err), r.stderr)
	assert.Contains(t, r.stderr, "train.replica_size is 2, so each replica's 2 ranks must train as one data-parallel model")
}

func dones(recs []traceRecord) []traceRecord {
	var out []traceRecord
	for _, rec := range recs {
		if rec.Event == "done" {
			out = append(out, rec)
		}
	}
	return out
}

func loads(recs []traceRecord) []string {
	var out []string
	for _, rec := range recs {
		if rec.Event == "load" && rec.Before != "eval" {
			out = append(out, rec.SHA)
		}
	}
	return out
}

// fsdpScript is the torchrun-style FSDP2 test script.
func fsdpScript(t testing.TB) string {
	return filepath.Join(repoRoot(t), "tests", "testdata", "fsdp_worker.py")
}

// fsdpEnd is what fsdp_worker.py writes after its loop.
type fsdpEnd struct {
	FullSHA     string `json:"full_sha256"`
	LocalFloats int    `json:"local_floats"`
	FullFloats  int    `json:"full_floats"`
}

// TestWorkerReplicaGroupsFSDP2 runs an unchanged FSDP2 (fully_shard) script
// as 2 replicas of 2 ranks: each rank hands over its own shards (uneven:
// 3 and 2 rows of the first layer), which hdet averages with the rank at
// the same position of the other replica. After every converge both
// replicas hold the mean of their shards at each position; the two shards
// of a replica make one model, which is the same in both replicas at the
// end; the replicas' rates differ in the search pass.
func TestWorkerReplicaGroupsFSDP2(t *testing.T) {
	var traceDir string
	r := runWorker(t, 4, "train: {replica_size: 2}\n", func(d string, _ *exec.Cmd) { traceDir = d }, fsdpScript(t),
		"--steps", "16", "--window", "2")
	require.NoError(t, r.err, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	assert.Contains(t, r.stdout, "committed after a search pass")
	traces := make([][]traceRecord, 4)
	ends := make([]fsdpEnd, 4)
	for rank := range traces {
		traces[rank] = readTrace(t, traceDir, rank)
		b, err := os.ReadFile(filepath.Join(traceDir, fmt.Sprintf("fsdp-rank%d.json", rank)))
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, &ends[rank]))
	}
	for pos := range 2 {
		a, b := traces[pos], traces[pos+2] // position pos of replicas 0 and 1
		assert.Equal(t, loads(a), loads(b), "position %d: both replicas load the same shards after every converge", pos)
		averages := convergedSums(t, a, b)
		assert.GreaterOrEqual(t, averages, 6, "position %d: converges checked", pos)
		assert.Equal(t, ends[pos].LocalFloats, ends[pos+2].LocalFloats, "position %d holds the same shard sizes in both replicas", pos)
	}
	assert.NotEqual(t, ends[0].LocalFloats, ends[1].LocalFloats, "uneven shards")
	for rank, e := range ends {
		assert.Equal(t, e.FullFloats, e.LocalFloats+ends[rank^1].LocalFloats, "rank %d: the replica's two shards make the model", rank)
		assert.Equal(t, ends[0].FullSHA, e.FullSHA, "rank %d gathers the same model as rank 0 at the end", rank)
	}
	differ := false
	for rank := range traces {
		a, mate, other := dones(traces[rank]), dones(traces[rank^1]), dones(traces[(rank+2)%4])
		require.Equal(t, len(a), len(mate))
		for k := range a {
			assert.Equal(t, a[k].Applied, mate[k].Applied, "ranks %d and %d apply their replica's values (done %d)", rank, rank^1, k)
		}
		for k := range min(len(a), len(other)) {
			differ = differ || a[k].Applied["lr"][0] != other[k].Applied["lr"][0]
		}
	}
	assert.True(t, differ, "the replicas' learning-rate multipliers differ in the search pass")
	assertDrift(t, r)
}

// convergedSums checks every converge that two ranks at one position (a, b:
// their traces) went through: the shards each loaded after it sum to the
// mean of what the two handed over. It returns how many it checked.
func convergedSums(t *testing.T, a, b []traceRecord) int {
	t.Helper()
	require.Equal(t, len(a), len(b))
	n := 0
	for i := 0; i+1 < len(a); i++ {
		done, load := a[i], a[i+1]
		if done.Event != "done" || load.Event != "load" || (load.Before != "stop" && load.Window != done.Window+1) {
			continue // not a converge: the main pass's restart loads step 0
		}
		want := (done.Sum + b[i].Sum) / 2
		assert.InDelta(t, want, load.Sum, 1e-5*(1+math.Abs(want)), "window %d: the loaded shards are the mean of the two handed over", done.Window)
		n++
	}
	return n
}

// A script whose parameters hdet cannot average as shards (here FSDP2 on
// one layer only: sharded and plain parameters mixed) is refused with exit
// 2, saying what to do.
func TestWorkerReplicaGroupsFSDP2Refused(t *testing.T) {
	r := runWorker(t, 4, "train: {replica_size: 2}\n", nil, fsdpScript(t), "--steps", "8", "--window", "2", "--mixed")
	require.Error(t, r.err)
	assert.Equal(t, 2, exitCode(r.err), r.stderr)
	assert.Contains(t, r.stdout+r.stderr, "of the optimizer's 4 parameters are sharded DTensors and the others are not")
}

// A rank killed mid-run under FSDP2 ends the run (a worker run has no
// rollback: the script's state is not in hdet's checkpoints), naming the
// rank, and leaves no process behind: not its replica's other rank, blocked
// in a collective with it, nor any hdet rank or explorer.
func TestWorkerReplicaGroupsFSDP2RankKilled(t *testing.T) {
	var traceDir string
	r := runWorker(t, 4, "train: {replica_size: 2}\n", func(d string, _ *exec.Cmd) { traceDir = d }, fsdpScript(t),
		"--steps", "16", "--window", "2", "--die-at-step", "3", "--fail-rank", "1")
	require.Error(t, r.err)
	assert.NotEqual(t, 2, exitCode(r.err), "a fault, not a usage error")
	assert.Regexp(t, regexp.MustCompile(`rank 1: worker \(pid \d+\) training window \d+ \(steps \d+-\d+\): worker process exited \(killed by signal 9`), r.stdout+r.stderr)
	requireNoRankLeft(t, r.dir, 4, traceDir)
}
