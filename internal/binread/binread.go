// Package binread decodes hdet's binary formats (checkpoints, model.bin, the
// bridge's binary payloads) from a byte slice without ever panicking or
// allocating more than the input can hold: every length read from the data
// is checked against what is left.
package binread

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// ErrShort is wrapped by every decoding error unless New was given another.
var ErrShort = errors.New("malformed data")

// Reader consumes a byte slice. The first failure sticks: later calls return
// zero values, and Err reports the first cause.
type Reader struct {
	b    []byte
	kind error
	err  error
}

// New reads b; errors wrap kind (ErrShort when nil).
func New(b []byte, kind error) *Reader {
	if kind == nil {
		kind = ErrShort
	}
	return &Reader{b: b, kind: kind}
}

// Err is the first failure, nil when every read succeeded.
func (r *Reader) Err() error { return r.err }

// Fail records a failure of a check the caller made on a decoded value.
func (r *Reader) Fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: bad %s", r.kind, what)
	}
}

// Int reads an unsigned varint no larger than limit.
func (r *Reader) Int(what string, limit int) int {
	if r.err != nil {
		return 0
	}
	v, k := binary.Uvarint(r.b)
	if k <= 0 || v > uint64(limit) {
		r.Fail(what)
		return 0
	}
	r.b = r.b[k:]
	return int(v)
}

// Byte reads one byte.
func (r *Reader) Byte(what string) byte {
	if r.err == nil && len(r.b) < 1 {
		r.Fail(what)
	}
	if r.err != nil {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

// Rest reads every byte left (not a copy); nil after a failure.
func (r *Reader) Rest() []byte {
	if r.err != nil {
		return nil
	}
	v := r.b
	r.b = r.b[len(r.b):]
	return v
}

// Bytes reads a varint length and that many bytes (a copy).
func (r *Reader) Bytes(what string) []byte {
	n := r.Int(what, math.MaxInt)
	if r.err == nil && n > len(r.b) {
		r.Fail(what)
	}
	if r.err != nil {
		return nil
	}
	v := bytes.Clone(r.b[:n])
	r.b = r.b[n:]
	return v
}

// Float32s reads n little-endian float32 values.
func (r *Reader) Float32s(what string, n int) []float32 {
	return fixed(r, what, n, 4, func(b []byte) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b)) })
}

// Float64s reads n little-endian float64 values.
func (r *Reader) Float64s(what string, n int) []float64 {
	return fixed(r, what, n, 8, func(b []byte) float64 { return math.Float64frombits(binary.LittleEndian.Uint64(b)) })
}

// fixed reads n values of size bytes each, decoded by dec.
func fixed[T any](r *Reader, what string, n, size int, dec func([]byte) T) []T {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b)/size {
		r.Fail(what)
		return nil
	}
	v := make([]T, n)
	for i := range v {
		v[i] = dec(r.b[size*i:])
	}
	r.b = r.b[size*n:]
	return v
}

// End fails unless every byte was consumed.
func (r *Reader) End() error {
	if r.err == nil && len(r.b) != 0 {
		r.Fail("trailing bytes")
	}
	return r.err
}
