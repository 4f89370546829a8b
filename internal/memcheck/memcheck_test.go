package memcheck

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMLPBytesCountsEveryLayer(t *testing.T) {
	// 784*32+32 + 32*10+10 parameters, 42 units, batch 1.
	assert.Equal(t, int64(4*(8*25450+4*42)), MLPBytes(784, []int{32}, 10, 1))
}

func TestFit(t *testing.T) {
	require.NoError(t, Fit(MLPBytes(784, []int{256, 256}, 10, 64), 4))
	huge := MLPBytes(784, []int{65536, 65536, 65536}, 10, 64)
	err := Fit(huge, 4)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "for the 4 ranks on this host")
	assert.Contains(t, err.Error(), "GiB is available")
}
