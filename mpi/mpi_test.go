package mpi

import (
	"errors"
	"math"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The test binary runs without mpirun: MPI starts it as a world of one rank.
// MPI can be initialised once per process, so TestMain owns Init/Finalize.
func TestMain(m *testing.M) {
	if err := Init(); err != nil {
		panic(err)
	}
	code := m.Run()
	if err := Finalize(); err != nil {
		panic(err)
	}
	os.Exit(code)
}

func TestSingletonWorld(t *testing.T) {
	w := World()
	require.NotNil(t, w)
	assert.Equal(t, 0, w.Rank())
	assert.Equal(t, 1, w.Size())
	assert.Equal(t, 0, w.LocalRank())
	assert.Equal(t, 1, w.LocalSize())
	assert.Error(t, Init(), "a second Init is an error")
}

func TestAllreduceOneRankIsIdentity(t *testing.T) {
	w := World()
	f32 := []float32{1.5, -2, 3e7}
	require.NoError(t, w.AllreduceFloat32(f32, Sum))
	assert.Equal(t, []float32{1.5, -2, 3e7}, f32)
	f64 := []float64{4, 5}
	require.NoError(t, w.AllreduceFloat64(f64, Max))
	assert.Equal(t, []float64{4, 5}, f64)
	require.NoError(t, w.AllreduceFloat64(nil, Min), "empty buffers are a no-op")
}

func TestArgumentErrors(t *testing.T) {
	w := World()
	assert.ErrorIs(t, w.AllreduceFloat64([]float64{1}, Op(9)), ErrArgument)
	assert.ErrorIs(t, w.AllgatherFloat64([]float64{1}, make([]float64, 3)), ErrArgument)
	buf := make([]float64, 2*w.Size())
	err := w.AllgatherFloat64(buf[:2], buf) // aliased: a rank could send what it received
	assert.ErrorIs(t, err, ErrArgument)
	assert.ErrorContains(t, err, "overlap")
	assert.False(t, overlap(buf[:1], buf[1:]), "adjacent is not overlapping")
	assert.ErrorIs(t, w.AllgathervFloat32(make([]float32, 3), []int{2}), ErrArgument, "counts must add up to the buffer")
	assert.ErrorIs(t, w.AllgathervFloat32(nil, nil), ErrArgument, "one count per rank")
	assert.ErrorIs(t, w.AllgathervFloat32(nil, []int{-1}), ErrArgument)
	assert.ErrorIs(t, w.AllgathervFloat32(nil, []int{math.MaxInt32 + 1}), ErrArgument, "past MPI's int offsets")
}

// With one rank, the in-place allgatherv leaves the buffer as it is.
func TestAllgathervOneRankKeepsTheBuffer(t *testing.T) {
	buf := []float32{1, float32(math.Copysign(0, -1)), 3}
	require.NoError(t, World().AllgathervFloat32(buf, []int{3}))
	assert.Equal(t, []float32{1, 0, 3}, buf)
	assert.True(t, math.Signbit(float64(buf[1])), "bits kept: -0 stays -0")
	require.NoError(t, World().AllgathervFloat32(nil, []int{0}))
}

func TestBadRootIsAGoError(t *testing.T) {
	var merr *Error
	err := World().Bcast([]byte{1, 2}, 3)
	require.True(t, errors.As(err, &merr), "got %v", err)
	assert.Equal(t, "MPI_Bcast", merr.Op)
	assert.NotEmpty(t, merr.Text)
}

func TestBcastMessageAndAllgather(t *testing.T) {
	w := World()
	msg, err := w.BcastMessage([]byte("plan"), 0)
	require.NoError(t, err)
	assert.Equal(t, []byte("plan"), msg)
	recv := make([]float64, 2)
	require.NoError(t, w.AllgatherFloat64([]float64{7, 8}, recv))
	assert.Equal(t, []float64{7, 8}, recv)
	require.NoError(t, w.Barrier())
}
