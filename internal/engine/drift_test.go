package engine

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/engine/enginetest"
)

// relDrift from squared norms alone matches the distances worked out from
// the parameters; an unhealthy replica is left out, and rounding below 0
// is 0.
func TestRelDriftFromNorms(t *testing.T) {
	// Replicas (1, 2, 2), (3, 2, 0) and an unhealthy (100, -7, 1): θ̄ =
	// (2, 2, 1), distances² 2 and 2, RMS √2 over ||θ̄|| = 3.
	sq, healthy := []float64{9, 13, 10050}, []bool{true, true, false}
	sum := 4.0*4 + 4*4 + 2*2 // ||(4, 4, 2)||²
	assert.InDelta(t, math.Sqrt2/3, relDrift(sq, healthy, sum), 1e-15)
	assert.Equal(t, 0.0, relDrift([]float64{9, 9}, []bool{true, true}, 36+1e-12), "rounding below 0")
	assert.True(t, math.IsNaN(relDrift([]float64{1}, []bool{false}, 0)))
}

// wantDrift works the drift out from the replicas' parameters (float64).
func wantDrift(thetas [][]float32, healthy []bool) float64 {
	avg, n := make([]float64, len(thetas[0])), 0
	for _, h := range healthy {
		if h {
			n++
		}
	}
	for r, th := range thetas {
		for i, v := range th {
			if healthy[r] {
				avg[i] += float64(v) / float64(n)
			}
		}
	}
	d, a := 0.0, 0.0
	for r, th := range thetas {
		for i, v := range th {
			if healthy[r] {
				d += (float64(v) - avg[i]) * (float64(v) - avg[i]) / float64(n)
			}
		}
	}
	for _, v := range avg {
		a += v * v
	}
	return math.Sqrt(d / a)
}

// The window record's drift is the replicas' RMS distance to their average
// before the converge over the average's norm: with one rank per replica,
// with DDP replicas (each position measures its slice, the replica adds
// them up) and with sharded ones (each rank its shards), and without the
// replica that went NaN.
func TestWindowRecordsTheReplicasDrift(t *testing.T) {
	for _, c := range []struct {
		name           string
		world, g       int
		sharded        bool
		nanRank, nanAt int
	}{
		{name: "G=1, 3 replicas", world: 3, g: 1, nanRank: -1},
		{name: "DDP, 3 replicas of 2", world: 6, g: 2, nanRank: 5, nanAt: 2},
		{name: "sharded, 2 replicas of 2", world: 4, g: 2, sharded: true, nanRank: -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := ranksSpec{world: c.world, g: c.g, lr: constLR, nan: map[int][]int{c.nanRank: {c.nanAt}}}
			if c.g > 1 {
				s.tweak = func(_ int, o *Options, _ *toyReplica) {
					o.Groups.Sharded, o.Converge = c.sharded, o.Groups.Cross.(enginetest.Comm)
				}
			}
			r := runRanks(t, s)
			for rank, err := range r.errs {
				require.NoError(t, err, "rank %d: %s", rank, r.logs[rank])
			}
			recs := r.windows()
			require.Len(t, recs, 6)
			for k, rec := range recs {
				require.NotNil(t, rec.Drift, "window %d", k)
				thetas := replicaParams(r.afterCall(k), c.g, c.sharded)
				want := wantDrift(thetas, rec.Healthy)
				assert.InEpsilon(t, want, float64(*rec.Drift), 1e-4, "window %d", k)
				assert.Greater(t, want, 1e-3, "window %d: the replicas differ", k)
			}
		})
	}
}

// replicaParams are each replica's parameters, from its ranks' buffers
// after a window: a DDP replica's first rank's copy, a sharded replica's
// ranks' shards one after the other.
func replicaParams(after [][]float32, g int, sharded bool) [][]float32 {
	var out [][]float32
	for first := 0; first < len(after); first += g {
		th := append([]float32{}, after[first][:toyParams]...)
		for i := 1; sharded && i < g; i++ {
			th = append(th, after[first+i][:toyParams]...)
		}
		out = append(out, th)
	}
	return out
}
