package binread

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReadsWhatWasWritten(t *testing.T) {
	b := binary.AppendUvarint(nil, 3)
	b = append(b, "abc"...)
	b = binary.AppendUvarint(b, 7)
	b = binary.LittleEndian.AppendUint32(b, math.Float32bits(1.5))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(-0.25))
	r := New(b, nil)
	assert.Equal(t, "abc", string(r.Bytes("name")))
	assert.Equal(t, 7, r.Int("count", 10))
	assert.Equal(t, []float32{1.5}, r.Float32s("values", 1))
	assert.Equal(t, []float64{-0.25}, r.Float64s("losses", 1))
	require.NoError(t, r.End())
}

func TestBoundsAreChecked(t *testing.T) {
	kind := errors.New("corrupt")
	huge := binary.AppendUvarint(nil, math.MaxUint64)
	for name, read := range map[string]func(r *Reader){
		"length beyond the data": func(r *Reader) { r.Bytes("blob") },
		"int above its limit":    func(r *Reader) { r.Int("count", 10) },
		"too many floats":        func(r *Reader) { r.Float32s("values", 1<<40) },
		"negative float count":   func(r *Reader) { r.Float32s("values", -1) },
		"too many float64s":      func(r *Reader) { r.Float64s("losses", 2) }, // 10 bytes: one and a bit
	} {
		r := New(huge, kind)
		read(r)
		assert.ErrorIs(t, r.End(), kind, name)
	}
	r := New([]byte{4, '0', '0', '0'}, nil) // a length one byte past the end
	r.Bytes("blob")
	assert.ErrorIs(t, r.End(), ErrShort, "length past the end (found by FuzzDecode)")
	r = New([]byte{1, 2}, nil)
	r.Int("x", 10)
	assert.ErrorIs(t, r.End(), ErrShort, "trailing bytes")
	assert.ErrorContains(t, r.End(), "bad trailing bytes")
}

func TestByteAndRest(t *testing.T) {
	r := New([]byte{7, 1, 2}, nil)
	assert.Equal(t, byte(7), r.Byte("flag"))
	assert.Equal(t, []byte{1, 2}, r.Rest())
	assert.Empty(t, r.Rest())
	assert.Zero(t, r.Byte("another flag"))
	assert.ErrorIs(t, r.End(), ErrShort, "a byte past the end")
	assert.Nil(t, r.Rest(), "nothing after a failure")
}
