package tensorboard

import (
	"encoding/binary"
	"hash/crc32"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// CRC-32C's check value, and TFRecord's mask of it.
func TestMaskedCRC(t *testing.T) {
	c := crc32.Checksum([]byte("123456789"), castagnoli)
	require.Equal(t, uint32(0xe3069283), c)
	assert.Equal(t, (c>>15|c<<17)+0xa282ead8, maskedCRC([]byte("123456789")))
}

// Every record is framed whole: its length, the length's CRC, the data and
// its CRC, one after another to the end of the file.
func TestEventsFraming(t *testing.T) {
	b := Events(1.5e9, []Scalar{{Tag: "loss/mean", Step: 50, Wall: 1.5e9 + 1, Value: 2.25}, {Tag: "lr/base", Step: 50, Wall: 1.5e9 + 1, Value: 1e-3}})
	var n int
	for len(b) > 0 {
		require.GreaterOrEqual(t, len(b), 12)
		size := binary.LittleEndian.Uint64(b)
		assert.Equal(t, maskedCRC(b[:8]), binary.LittleEndian.Uint32(b[8:]))
		data := b[12 : 12+size]
		assert.Equal(t, maskedCRC(data), binary.LittleEndian.Uint32(b[12+size:]))
		b = b[16+size:]
		n++
	}
	assert.Equal(t, 3, n, "the file version, then one event per scalar")
}
