package plan

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/hdet-dev/hdet/hparam"
)

// Decoder reads the plan encoding and the controller state, which shares
// its primitives, checking every length against the bytes that remain
// before allocating, so garbage costs an error, not a panic or a huge
// allocation. The first failure sticks: later reads return zero values.
type Decoder struct {
	b   []byte
	err error
}

// NewDecoder reads b.
func NewDecoder(b []byte) *Decoder { return &Decoder{b: b} }

// Err is the first failure, an ErrDecode; nil when every read succeeded.
func (d *Decoder) Err() error { return d.err }

// Len is the number of bytes not yet read.
func (d *Decoder) Len() int { return len(d.b) }

// Fail records a failure of a check the caller made on a decoded value.
func (d *Decoder) Fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: plan: %s", hparam.ErrDecode, what)
	}
}

// Uvarint reads an unsigned varint no larger than max.
func (d *Decoder) Uvarint(what string, max uint64) int {
	if d.err != nil {
		return 0
	}
	v, k := binary.Uvarint(d.b)
	if k <= 0 || v > max {
		d.Fail("bad " + what)
		return 0
	}
	d.b = d.b[k:]
	return int(v)
}

// Byte reads one byte.
func (d *Decoder) Byte(what string) byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 1 {
		d.Fail("truncated at " + what)
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

// Float reads a little-endian float64.
func (d *Decoder) Float(what string) float64 {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 8 {
		d.Fail("truncated at " + what)
		return 0
	}
	f := math.Float64frombits(binary.LittleEndian.Uint64(d.b))
	d.b = d.b[8:]
	return f
}

// length reads a uvarint byte count that must fit in what remains.
func (d *Decoder) length(what string) int {
	n := d.Uvarint(what+" length", math.MaxInt32)
	if d.err == nil && n > len(d.b) {
		d.Fail("truncated " + what)
	}
	return n
}

// Bytes reads a uvarint length and that many bytes (not a copy).
func (d *Decoder) Bytes(what string) []byte {
	n := d.length(what)
	if d.err != nil {
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

var spreadCodes = []hparam.SpreadKind{1: hparam.Multiplicative, 2: hparam.Additive, 3: hparam.Geometric}

// SpreadCode is the byte a spread kind is encoded as (1 multiplicative,
// 2 additive, 3 geometric; 0 for an unknown kind).
func SpreadCode(k hparam.SpreadKind) byte {
	for c, kk := range spreadCodes {
		if kk == k && c > 0 {
			return byte(c)
		}
	}
	return 0
}

// SpreadKind is the kind encoded as code, and whether code is one.
func SpreadKind(code byte) (hparam.SpreadKind, bool) {
	if code == 0 || int(code) >= len(spreadCodes) {
		return "", false
	}
	return spreadCodes[code], true
}

// AppendBytes appends v's length as a uvarint, then v.
func AppendBytes(b, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}
