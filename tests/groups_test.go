package tests

import (
	"bufio"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/metrics"
)

// rankLines are the JSON log lines of every rank with the given message.
func rankLines(t *testing.T, stderr, message string) []converged {
	t.Helper()
	var out []converged
	sc := bufio.NewScanner(strings.NewReader(stderr))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var c converged
		if json.Unmarshal(sc.Bytes(), &c) == nil && c.Message == message {
			out = append(out, c)
		}
	}
	return out
}

// Replica groups under real mpirun: 4 ranks, train.replica_size 2, so two
// replicas of two ranks each (ranks 0-1 and 2-3). The ranks of a replica
// apply the same values, the replicas differ, every rank holds the same
// parameters after every converge and at the end, and the controller (the
// window records) sees two replicas.
func TestReplicaGroups(t *testing.T) {
	for _, sync := range []string{"local", "gradients"} {
		t.Run(sync, func(t *testing.T) {
			r := runHDET(t, 4, cfg(sync, lrDropout), "--set", "train.replica_size=2", "--log-all-ranks", "--debug")
			require.NoError(t, r.err, r.stderr)
			byWindow := map[int][]converged{}
			for _, c := range rankLines(t, r.stderr, "converged") {
				byWindow[c.Window] = append(byWindow[c.Window], c)
			}
			require.Len(t, byWindow, 8)
			recs := r.records(t)
			start, ok := recs[0].(metrics.StartRecord)
			require.True(t, ok)
			assert.Equal(t, 2, start.Ranks, "the controller sees replicas")
			assert.Equal(t, 2, start.ReplicaSize)
			assert.Equal(t, 4, start.WorldSize)
			windows := 0
			for _, rec := range metrics.Of[metrics.WindowRecord](recs) {
				windows++
				assert.Len(t, rec.Losses, 2, "window %d", rec.Window)
				assert.Len(t, rec.Values["lr"], 2, "window %d", rec.Window)
				assert.NotEqual(t, rec.Values["lr"][0], rec.Values["lr"][1], "window %d: the replicas spread", rec.Window)
				cs := byWindow[rec.Window]
				require.Len(t, cs, 4, "window %d", rec.Window)
				before := map[int]string{}
				for _, c := range cs {
					require.NotEmpty(t, c.Before)
					if b, ok := before[c.Rank/2]; ok {
						assert.Equal(t, b, c.Before, "window %d: the ranks of replica %d differ before the converge", rec.Window, c.Rank/2)
					}
					before[c.Rank/2] = c.Before
				}
				assert.NotEqual(t, before[0], before[1], "window %d: the replicas differ before the converge", rec.Window)
				for _, c := range cs {
					assert.Equal(t, cs[0].Checksum, c.Checksum, "window %d: rank %d differs after converge", rec.Window, c.Rank)
					assert.Equal(t, float64(rec.Values["lr"][c.Rank/2]), c.Values["lr"], "window %d: rank %d applies its replica's value", rec.Window, c.Rank)
				}
			}
			assert.Equal(t, 8, windows)
			fin := rankLines(t, r.stderr, "run finished")
			require.Len(t, fin, 4)
			for _, c := range fin {
				assert.Equal(t, r.end(t).Checksum, c.Checksum, "rank %d's final parameters", c.Rank)
			}
			assert.Contains(t, r.stderr, `"replicas":2,"replica_size":2`)
		})
	}
}

// A replica with one bad rank is left out whole; the event names the
// replica and its ranks.
func TestReplicaGroupNaNRankExcludesItsReplica(t *testing.T) {
	r := runHDET(t, 4, cfg("local", lrDropout), "--set", "train.replica_size=2", hitBy("nan", "2@3"))
	require.NoError(t, r.err, r.stderr)
	unhealthy := 0
	for _, rec := range metrics.Of[metrics.WindowRecord](r.records(t)) {
		require.Len(t, rec.Healthy, 2)
		assert.True(t, rec.Healthy[0], "window %d", rec.Window)
		assert.Equal(t, rec.Window < 3, rec.Healthy[1], "window %d", rec.Window)
		for _, e := range rec.Events {
			if e.Kind == metrics.EventUnhealthy {
				require.NotNil(t, e.Rank)
				assert.Equal(t, 1, *e.Rank)
				assert.Contains(t, e.Message, "replica 1 (ranks 2-3)")
				unhealthy++
			}
		}
	}
	assert.Equal(t, 5, unhealthy, "windows 3..7")
	assert.Greater(t, float64(r.end(t).Eval.Accuracy), 0.5)
}

// Ranks that do not divide into replicas are a configuration error (exit
// 2) naming W and G.
func TestReplicaSizeMustDivideTheRanks(t *testing.T) {
	r := runHDET(t, 4, cfg("local", lrDropout), "--set", "train.replica_size=3")
	require.Error(t, r.err)
	assert.Equal(t, 2, exitCode(r.err), r.stderr)
	assert.Contains(t, r.stderr+r.stdout, "train.replica_size: 4 ranks (W) do not divide into replicas of 3 ranks (G)")
}

// A replica-groups run resumed from its window-3 checkpoint ends with the
// same parameters as the run left alone (the controller's state is per
// replica, like the plan).
func TestReplicaGroupsResume(t *testing.T) {
	conf := pinnedCfg("local", pinnedAuto) + "\n"
	r := runHDET(t, 4, conf, "--set", "train.replica_size=2")
	require.NoError(t, r.err, r.stderr)
	want := r.end(t).Checksum
	assert.Equal(t, want, resumeFrom(t, r, 30, "--set", "train.replica_size=2"))
	assert.NotEqual(t, pinnedAutoSum, want, "G=2 is another run than G=1")
}
