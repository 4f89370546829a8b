package cuda

import (
	"errors"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLoadMissingLibrary(t *testing.T) {
	err := load("libhdet-no-such-driver.so.1")
	require.ErrorIs(t, err, ErrNoDriver)
	assert.Contains(t, err.Error(), "libhdet-no-such-driver.so.1")
}

// A library that loads but is not the CUDA driver must be refused by name,
// not crash later on a nil function pointer.
func TestLoadWrongLibrary(t *testing.T) {
	err := load("libc.so.6")
	require.Error(t, err)
	assert.False(t, errors.Is(err, ErrNoDriver))
	assert.Contains(t, err.Error(), "no symbol cuInit")
}

// On this machine's real driver, if any: without one every entry point
// answers ErrNoDriver; with one, memory round-trips through the first GPU.
func TestSystemDriver(t *testing.T) {
	if err := Load(); err != nil {
		require.ErrorIs(t, err, ErrNoDriver)
		_, err = DeviceCount()
		require.ErrorIs(t, err, ErrNoDriver)
		_, err = Open(0)
		require.ErrorIs(t, err, ErrNoDriver)
		t.Log("no CUDA driver here: checked that every entry point says so")
		return
	}
	n, err := DeviceCount()
	require.NoError(t, err)
	if n == 0 {
		return
	}
	c, err := Open(0)
	require.NoError(t, err)
	defer c.Close()
	in := []float32{1, 2, 3, 4.5}
	d, err := c.Alloc(16)
	require.NoError(t, err)
	defer c.Free(d)
	pin, err := c.AllocHost(16)
	require.NoError(t, err)
	defer c.FreeHost(pin)
	require.NoError(t, c.CopyHtoD(d, unsafe.Pointer(&in[0]), 16))
	require.NoError(t, c.CopyDtoH(pin, d, 16))
	assert.Equal(t, in, unsafe.Slice((*float32)(pin), 4))
}
