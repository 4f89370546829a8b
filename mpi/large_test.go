package mpi

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// chunked cuts a buffer into whole elements that cover it exactly once.
func TestChunkedCoversTheBufferInPieces(t *testing.T) {
	defer func(old int) { maxChunkBytes = old }(maxChunkBytes)
	maxChunkBytes = 12 // 3 float32s, or 1 float64 (a piece holds at least one)
	buf := make([]float32, 10)
	var sizes []int
	require.NoError(t, chunked(unsafe.Pointer(&buf[0]), len(buf), 4, func(p unsafe.Pointer, n int) error {
		for i := range unsafe.Slice((*float32)(p), n) {
			unsafe.Slice((*float32)(p), n)[i]++
		}
		sizes = append(sizes, n)
		return nil
	}))
	assert.Equal(t, []int{3, 3, 3, 1}, sizes)
	for _, v := range buf {
		assert.Equal(t, float32(1), v)
	}
	sizes = nil
	require.NoError(t, chunked(unsafe.Pointer(&buf[0]), 2, 8, func(_ unsafe.Pointer, n int) error { sizes = append(sizes, n); return nil }))
	assert.Equal(t, []int{1, 1}, sizes)
}

// Through MPI, pieces change nothing: the same values and the same message.
func TestChunkedCallsThroughMPI(t *testing.T) {
	defer func(old int) { maxChunkBytes = old }(maxChunkBytes)
	maxChunkBytes = 8
	w := World()
	f := []float32{1, 2, 3, 4, 5}
	require.NoError(t, w.AllreduceFloat32(f, Sum))
	assert.Equal(t, []float32{1, 2, 3, 4, 5}, f)
	msg, err := w.BcastMessage([]byte("a message of several pieces"), 0)
	require.NoError(t, err)
	assert.Equal(t, "a message of several pieces", string(msg))
}
