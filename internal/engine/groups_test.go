package engine

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/engine/enginetest"
)

// Consecutive world ranks form a replica; the ranks with the same position
// in every replica converge together.
func TestLayoutMapsRanksToReplicas(t *testing.T) {
	l, err := NewLayout(6, 2)
	require.NoError(t, err)
	assert.Equal(t, 3, l.Replicas())
	var reps, pos []int
	for r := range 6 {
		reps, pos = append(reps, l.Replica(r)), append(pos, l.Position(r))
	}
	assert.Equal(t, []int{0, 0, 1, 1, 2, 2}, reps)
	assert.Equal(t, []int{0, 1, 0, 1, 0, 1}, pos)
	assert.Equal(t, 4, l.FirstRank(2))
	assert.Equal(t, "replica 2 (ranks 4-5)", l.Name(2))
	var keys []int
	for r := range 6 {
		keys = append(keys, l.CrossKey(r))
	}
	assert.Equal(t, []int{0, 2, 1, 0, 2, 1}, keys, "position 0 led by replica 0, position 1 by replica 1")

	one, err := NewLayout(4, 1)
	require.NoError(t, err)
	assert.Equal(t, 4, one.Replicas())
	assert.Equal(t, 3, one.Replica(3))
	assert.Equal(t, 0, one.Position(3))
	assert.Equal(t, "rank 3", one.Name(3), "G = 1 keeps today's wording")

	whole, err := NewLayout(8, 8)
	require.NoError(t, err)
	assert.Equal(t, 1, whole.Replicas())
}

func TestLayoutRefusesWhatDoesNotDivide(t *testing.T) {
	_, err := NewLayout(6, 4)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "train.replica_size: 6 ranks (W) do not divide into replicas of 4 ranks (G)")
	assert.Contains(t, err.Error(), "W=6, G=4")
	_, err = NewLayout(4, 0)
	assert.ErrorContains(t, err, "train.replica_size: got 0")
	_, err = NewLayout(2, 4)
	assert.ErrorContains(t, err, "W=2, G=4")
}

// A replica's signal is its ranks' mean; it is healthy only when all its
// ranks are; a stop asked by any rank is kept; its parameters' squared
// norm is the sum of its ranks' parts.
func TestPerReplicaSignal(t *testing.T) {
	all := []rankReport{
		{loss: 1, probe: 10, healthy: true, sq: 0.5}, // replica 0: ranks 0, 1
		{loss: 3, probe: 20, healthy: true, sq: 2},
		{loss: 5, probe: 30, healthy: true}, // replica 1: rank 3 unhealthy and asking to stop
		{loss: math.NaN(), probe: 40, stop: true},
	}
	got := perReplica(all, 2)
	require.Len(t, got, 2)
	assert.Equal(t, rankReport{loss: 2, probe: 15, healthy: true, sq: 2.5}, got[0])
	assert.False(t, got[1].healthy)
	assert.True(t, got[1].stop)
	assert.Equal(t, 35.0, got[1].probe)
	assert.True(t, math.IsNaN(got[1].loss))
	assert.Equal(t, all, perReplica(all, 1), "G = 1: the ranks' own reports, untouched")
}

// A report survives its packing, the fingerprint's 64 bits included; the
// ranks are identical only when all are healthy with one fingerprint.
func TestRankReportPacking(t *testing.T) {
	r := rankReport{loss: 0.25, first: 0.5, probe: math.Inf(1), healthy: true, stop: true, print: 0xfedcba9876543211, sq: 7.5}
	buf := make([]float64, reportLen)
	r.pack(buf)
	assert.Equal(t, r, unpackReport(buf))
	a := fingerprint([]float32{1, 2, 3})
	assert.NotEqual(t, a, fingerprint([]float32{1, 2, 3.0000002}))
	assert.NotZero(t, fingerprint(nil))
	same := []rankReport{{healthy: true, print: a}, {healthy: true, print: a}}
	assert.True(t, identical(same))
	assert.False(t, identical([]rankReport{{healthy: true, print: a}, {healthy: false, print: a}}))
	assert.False(t, identical([]rankReport{{healthy: true}, {healthy: true}}), "no fingerprint taken (local mode)")
}

func TestDivergedReplicasAreNamed(t *testing.T) {
	l, err := NewLayout(6, 2)
	require.NoError(t, err)
	losses, healthy := []float64{1, 1.1, 50}, []bool{true, true, true}
	evs := markDiverged(l, divergence{losses, 0, "", "window loss", 10, "train.divergence_factor"}, healthy, 3)
	require.Len(t, evs, 1)
	assert.Equal(t, 2, *evs[0].Rank)
	assert.Contains(t, evs[0].Message, "replica 2 (ranks 4-5)'s window loss 50")
	assert.Contains(t, evs[0].Message, "healthy replicas' median")
	assert.Equal(t, []bool{true, true, false}, healthy)
}

// sizedComm is a communicator of a given size for wiring checks; its
// collectives do nothing.
type sizedComm struct {
	soloComm
	rank, size int
}

func (c sizedComm) Rank() int { return c.rank }
func (c sizedComm) Size() int { return c.size }

// With groups, `local` averages gradients inside the replica and
// `gradients` over the world; the converge runs across replicas; the
// replica index picks the plan's values.
func TestLoopWiresReplicaGroups(t *testing.T) {
	world, inside, cross := sizedComm{rank: 5, size: 6}, sizedComm{rank: 1, size: 2}, sizedComm{rank: 2, size: 3}
	lay, err := NewLayout(6, 2)
	require.NoError(t, err)
	g := &Groups{Layout: lay, Replica: inside, Cross: cross}
	rep := &lrReplica{buf: []float32{0}, nanFrom: -1}

	l, err := newLoop(Options{Comm: world, Replica: rep, Sync: SyncLocal, Groups: g})
	require.NoError(t, err)
	assert.Equal(t, 2, l.rep)
	assert.Equal(t, inside, l.grads.(*reducer).comm)
	assert.Equal(t, hostConverge{cross}, l.conv)

	l, err = newLoop(Options{Comm: world, Replica: rep, Sync: SyncGradients, Groups: g})
	require.NoError(t, err)
	assert.Equal(t, world, l.grads.(*reducer).comm)

	l, err = newLoop(Options{Comm: world, Replica: rep, Sync: SyncLocal})
	require.NoError(t, err)
	assert.Equal(t, 5, l.rep)
	assert.Nil(t, l.grads)
	assert.Equal(t, hostConverge{world}, l.conv)

	bad := &Groups{Layout: lay, Replica: inside, Cross: sizedComm{size: 2}}
	_, err = newLoop(Options{Comm: world, Replica: rep, Sync: SyncLocal, Groups: bad})
	assert.ErrorContains(t, err, "a cross-replica one of 2 (want 3)")
}

// The converge's slices cover the buffer once, in order, for any size.
func TestLayoutSlicesCoverTheBuffer(t *testing.T) {
	for _, g := range []int{1, 2, 3, 8} {
		l := Layout{World: 4 * g, Size: g}
		for _, n := range []int{0, 1, 2, 7, 8, 1001} {
			next := 0
			for p := range g {
				lo, hi := l.Slice(n, p)
				require.Equal(t, next, lo, "G=%d n=%d p=%d", g, n, p)
				require.LessOrEqual(t, lo, hi)
				require.LessOrEqual(t, hi-lo, (n+g-1)/g)
				next = hi
			}
			require.Equal(t, n, next, "G=%d n=%d", g, n)
			counts, sum := l.Counts(n), 0
			for p, c := range counts {
				lo, hi := l.Slice(n, p)
				require.Equal(t, hi-lo, c, "G=%d n=%d p=%d", g, n, p)
				sum += c
			}
			require.Equal(t, n, sum)
		}
	}
}

// sumOnly hides a communicator's allgather, so SumGrouped puts the slices
// together by its sum instead.
type sumOnly struct{ Comm }

// SumGrouped's allgather of the slices gives every rank the same bits as
// the sum it replaces, for buffers that G does not divide (short and empty
// last slices) and slices of uneven length.
func TestSumGroupedAllgatherMatchesTheSum(t *testing.T) {
	for _, c := range []struct{ world, g, n int }{{4, 2, 1001}, {6, 3, 7}, {8, 4, 2}, {6, 2, 0}} {
		lay := Layout{World: c.world, Size: c.g}
		bufs := func() [][]float32 { // each replica's copy, the same on its ranks
			rng := rand.New(rand.NewPCG(uint64(c.n), uint64(c.g)))
			out := make([][]float32, c.world)
			for r := range lay.Replicas() {
				b := make([]float32, c.n)
				for i := range b {
					b[i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(12)-6)))
				}
				for p := range c.g {
					out[r*c.g+p] = slices.Clone(b)
				}
			}
			return out
		}
		var results [2][][]float32
		for k, hide := range []bool{false, true} {
			w, got := enginetest.NewWorld(c.world, c.g), bufs()
			errs := w.Run(func(rank int) error {
				var inside Comm = w.ReplicaComm(rank)
				if hide {
					inside = sumOnly{inside}
				}
				return SumGrouped(got[rank], lay, rank, w.CrossComm(rank), inside)
			})
			for rank, err := range errs {
				require.NoError(t, err, "%+v rank %d", c, rank)
			}
			for r, n := range w.Replicas {
				assert.Equal(t, !hide, n.Count(enginetest.AllgathervF32) == 1, "%+v replica %d: gathered once, or summed", c, r)
			}
			results[k] = got
		}
		for rank := range c.world {
			require.Len(t, results[0][rank], c.n)
			for i := range c.n {
				require.Equal(t, math.Float32bits(results[1][rank][i]), math.Float32bits(results[0][rank][i]), "%+v rank %d element %d", c, rank, i)
				require.Equal(t, math.Float32bits(results[0][0][i]), math.Float32bits(results[0][rank][i]), "%+v: every rank the same", c)
			}
		}
	}
}

// Replicas planned different values that report the same window loss to
// the bit stop the run; a plan without spread, a single replica or an
// unhealthy one do not. The same first-step loss everywhere is the
// same-batches case.
func TestTrainedAlikeAndSameBatches(t *testing.T) {
	same := []rankReport{{loss: 1.5, first: 2, healthy: true}, {loss: 1.5, first: 2, healthy: true}}
	err := trainedAlike(3, true, same)
	assert.ErrorIs(t, err, ErrTrainedAlike)
	assert.ErrorContains(t, err, "in window 3 every replica reported the window loss 1.5")
	assert.NoError(t, trainedAlike(3, false, same), "no spread: alike is right")
	assert.NoError(t, trainedAlike(3, true, same[:1]), "one replica")
	assert.NoError(t, trainedAlike(3, true, []rankReport{same[0], {loss: 1.5000001, healthy: true}}))
	assert.NoError(t, trainedAlike(3, true, []rankReport{same[0], {loss: 1.5}}), "an unhealthy replica")
	assert.True(t, sameBatches(same))
	assert.False(t, sameBatches([]rankReport{same[0], {loss: 1.5, first: 2.5, healthy: true}}))
	assert.False(t, sameBatches(same[:1]))
	assert.Contains(t, sameDataAdvice(1), "a DistributedSampler, or a data order seeded with hdet.rank()")
	assert.Contains(t, sameDataAdvice(2), "RANK is a rank's position in its replica", "replica groups: RANK does not tell the replicas apart")
	assert.Contains(t, sameDataAdvice(2), "hdet.rank() // G")
}
