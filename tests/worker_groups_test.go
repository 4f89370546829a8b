package tests

import (
	"path/filepath"
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
