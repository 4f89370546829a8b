package enginetest

import (
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/mpi/reduce"
)

// jitter makes the ranks arrive in a different order each time.
func jitter() {
	for range rand.IntN(20) {
		runtime.Gosched()
	}
}

// The sum of 1e8, 1, -1e8, 1 in float32 is 1 in rank order and 0 or 2 in
// others: every run, whatever the arrival order, gives rank order's bits
// on every rank; max and min too, in float64.
func TestReductionsRunInRankOrder(t *testing.T) {
	in := []float32{1e8, 1, -1e8, 1}
	for range 50 {
		w := NewWorld(4, 1)
		got := make([][]float32, 4)
		got64 := make([][]float64, 4)
		errs := w.Run(func(rank int) error {
			jitter()
			got[rank] = []float32{in[rank], float32(rank)}
			if err := w.Comm(rank).AllreduceFloat32(got[rank], reduce.Sum); err != nil {
				return err
			}
			jitter()
			got64[rank] = []float64{float64(rank), -float64(rank)}
			lo := []float64{float64(rank), -float64(rank)}
			if err := w.Comm(rank).AllreduceFloat64(got64[rank], reduce.Max); err != nil {
				return err
			}
			if err := w.Comm(rank).AllreduceFloat64(lo, reduce.Min); err != nil {
				return err
			}
			got64[rank] = append(got64[rank], lo...)
			return nil
		})
		for rank := range 4 {
			require.NoError(t, errs[rank])
			require.Equal(t, []float32{1, 6}, got[rank], "rank %d", rank)
			require.Equal(t, []float64{3, 0, 0, -3}, got64[rank], "rank %d", rank)
		}
		require.Equal(t, 1, w.World.Count(AllreduceFloat32))
		require.Equal(t, 2, w.World.Count(AllreduceFloat64))
	}
}

func TestAllgatherAndBcast(t *testing.T) {
	w := NewWorld(3, 1)
	all := make([][]float64, 3)
	msgs := make([][]byte, 3)
	errs := w.Run(func(rank int) error {
		all[rank] = make([]float64, 6)
		if err := w.Comm(rank).AllgatherFloat64([]float64{float64(rank), 10 * float64(rank)}, all[rank]); err != nil {
			return err
		}
		var msg []byte
		if rank == 1 {
			msg = []byte("plan")
		}
		var err error
		msgs[rank], err = w.Comm(rank).BcastMessage(msg, 1)
		return err
	})
	for rank := range 3 {
		require.NoError(t, errs[rank])
		assert.Equal(t, []float64{0, 0, 1, 10, 2, 20}, all[rank])
		assert.Equal(t, "plan", string(msgs[rank]))
	}
	msgs[0][0] = 'P'
	assert.Equal(t, "plan", string(msgs[2]), "each rank has its own copy")
}

// An injected failure fails the call on its rank and the round on its
// peers; the Net goes on.
func TestFailureInjection(t *testing.T) {
	boom := errors.New("boom")
	w := NewWorld(3, 1)
	w.Fail(func(c Call) error {
		if c.Rank == 1 && c.Kind == Converge && c.KindSeq == 1 {
			return boom
		}
		return nil
	})
	after := make([][]float32, 3)
	errs := w.Run(func(rank int) error {
		c := w.Comm(rank)
		if err := c.AllreduceSum([]float32{1}); err != nil {
			return err
		}
		err := c.AllreduceSum([]float32{1})
		after[rank] = []float32{float32(rank)}
		if err2 := c.AllreduceSum(after[rank]); err2 != nil {
			return err2
		}
		return err
	})
	assert.ErrorIs(t, errs[1], boom)
	assert.ErrorContains(t, errs[1], "world rank 1: Converge #1")
	for _, r := range []int{0, 2} {
		assert.ErrorIs(t, errs[r], ErrPeerFailed)
		assert.ErrorContains(t, errs[r], "world rank 1: Converge #1 (op sum, 1 elements, root 0): boom")
		assert.Equal(t, []float32{3}, after[r])
	}
	assert.Equal(t, 2, w.World.Count(Converge))
}

func TestMismatchedCollectivesFailEveryRank(t *testing.T) {
	w := NewWorld(2, 1)
	errs := w.Run(func(rank int) error {
		if rank == 0 {
			return w.Comm(0).AllreduceFloat32([]float32{1}, reduce.Sum)
		}
		_, err := w.Comm(1).BcastMessage(nil, 0)
		return err
	})
	for _, err := range errs {
		assert.ErrorIs(t, err, ErrMismatch)
		assert.ErrorContains(t, err, "AllreduceFloat32 #0")
		assert.ErrorContains(t, err, "BcastMessage #0")
	}
	w = NewWorld(2, 1)
	errs = w.Run(func(rank int) error { return w.Comm(rank).AllreduceFloat32(make([]float32, rank+1), reduce.Sum) })
	assert.ErrorIs(t, errs[0], ErrMismatch, "lengths differ")
}

// A rank that returned fails the collectives it will never join instead of
// hanging them; one that never comes fails them after the timeout.
func TestGoneAndLateRanksDoNotHang(t *testing.T) {
	w := NewWorld(3, 1)
	errs := w.Run(func(rank int) error {
		if rank == 2 {
			return nil
		}
		return w.Comm(rank).AllreduceFloat64([]float64{1}, reduce.Sum)
	})
	assert.NoError(t, errs[2])
	for _, err := range errs[:2] {
		assert.ErrorIs(t, err, ErrRankGone)
		assert.ErrorContains(t, err, "world rank 2 left after 0 collectives, before round 0")
	}

	n := NewNet("slow", 2)
	n.Timeout = 20 * time.Millisecond
	err := n.Comm(0).AllreduceFloat32([]float32{1}, reduce.Sum)
	assert.ErrorIs(t, err, ErrTimeout)
	assert.ErrorContains(t, err, "waits for ranks [1]")
	assert.ErrorIs(t, n.Comm(1).AllreduceFloat32([]float32{1}, reduce.Sum), ErrTimeout, "a late rank finds the round failed")
}

// Bad arguments fail the call like an injected failure.
func TestBadArgumentsFailTheCall(t *testing.T) {
	w := NewWorld(2, 1)
	errs := w.Run(func(rank int) error {
		if rank == 0 {
			return w.Comm(0).AllgatherFloat64([]float64{1}, make([]float64, 3))
		}
		return w.Comm(1).AllgatherFloat64([]float64{1}, make([]float64, 2))
	})
	assert.ErrorContains(t, errs[0], "recv holds 3 values, want 2 ranks times 1")
	assert.ErrorIs(t, errs[1], ErrPeerFailed)
	assert.Panics(t, func() { w.Run(func(int) error { return nil }) }, "a World runs once")
	w = NewWorld(2, 1)
	errs = w.Run(func(rank int) error {
		return w.Comm(rank).AllreduceFloat64([]float64{math.Pi}, reduce.Op(9))
	})
	assert.ErrorContains(t, errs[0], "reduction Op(9)")
}

// Replica r is world ranks r*G..r*G+G-1; the cross Nets hold one position
// of every replica, ranked by replica.
func TestWorldGroups(t *testing.T) {
	w := NewWorld(6, 2)
	require.Len(t, w.Replicas, 3)
	require.Len(t, w.Cross, 2)
	assert.Equal(t, 1, w.ReplicaComm(5).Rank())
	assert.Equal(t, 2, w.ReplicaComm(5).Size())
	assert.Equal(t, 2, w.CrossComm(5).Rank())
	assert.Equal(t, 3, w.CrossComm(5).Size())
	sums := make([][]float32, 6)
	errs := w.Run(func(rank int) error {
		sums[rank] = []float32{float32(rank), 1}
		if err := w.CrossComm(rank).AllreduceSum(sums[rank][:1]); err != nil {
			return err
		}
		return w.ReplicaComm(rank).AllreduceFloat32(sums[rank][1:], reduce.Sum)
	})
	for rank := range 6 {
		require.NoError(t, errs[rank])
		assert.Equal(t, []float32{float32(6 + 3*(rank%2)), 2}, sums[rank], "rank %d", rank)
	}
	assert.Panics(t, func() { NewWorld(6, 4) })
	assert.Panics(t, func() { w.World.Comm(6) })

	w = NewWorld(2, 1)
	panicked := w.Run(func(rank int) error {
		if rank == 0 {
			panic("bug")
		}
		return w.Comm(rank).AllreduceFloat32([]float32{1}, reduce.Sum)
	})
	assert.ErrorContains(t, panicked[0], "rank 0 panicked: bug")
	assert.ErrorIs(t, panicked[1], ErrRankGone)
}
