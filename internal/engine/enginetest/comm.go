package enginetest

import (
	"bytes"
	"fmt"

	"github.com/hdet-dev/hdet/mpi/reduce"
)

// Comm is one rank's handle on a Net: an engine.Comm, and an
// engine.Converger through AllreduceSum.
type Comm struct {
	n    *Net
	rank int
}

// Rank is this rank's place in the Net.
func (c Comm) Rank() int { return c.rank }

// Size is the Net's number of ranks.
func (c Comm) Size() int { return c.n.size }

// AllreduceFloat32 reduces buf in place across the ranks, in rank order.
func (c Comm) AllreduceFloat32(buf []float32, op reduce.Op) error {
	return c.reduce32(AllreduceFloat32, buf, op)
}

// AllreduceSum is the converge's sum (engine.Converger), a collective of
// its own Kind so that failures can target it.
func (c Comm) AllreduceSum(buf []float32) error { return c.reduce32(Converge, buf, reduce.Sum) }

func (c Comm) reduce32(kind Kind, buf []float32, op reduce.Op) error {
	p := &part{call: Call{Rank: c.rank, Kind: kind, Op: op, Len: len(buf)}, f32: buf, err: checkOp(op)}
	r, err := c.n.join(p)
	if err != nil {
		return err
	}
	copy(buf, r.f32)
	return nil
}

// AllreduceFloat64 reduces buf in place across the ranks, in rank order.
func (c Comm) AllreduceFloat64(buf []float64, op reduce.Op) error {
	p := &part{call: Call{Rank: c.rank, Kind: AllreduceFloat64, Op: op, Len: len(buf)}, f64: buf, err: checkOp(op)}
	r, err := c.n.join(p)
	if err != nil {
		return err
	}
	copy(buf, r.f64)
	return nil
}

// AllgatherFloat64 puts every rank's send, in rank order, into recv, which
// must hold Size times len(send).
func (c Comm) AllgatherFloat64(send, recv []float64) error {
	p := &part{call: Call{Rank: c.rank, Kind: AllgatherFloat64, Len: len(send)}, f64: send}
	if len(recv) != c.n.size*len(send) {
		p.err = fmt.Errorf("recv holds %d values, want %d ranks times %d", len(recv), c.n.size, len(send))
	}
	r, err := c.n.join(p)
	if err != nil {
		return err
	}
	copy(recv, r.f64)
	return nil
}

// AllgathervFloat32 puts buf together in place from every rank's part
// (engine.SliceGatherer): rank i holds counts[i] values after the parts of
// the ranks before it.
func (c Comm) AllgathervFloat32(buf []float32, counts []int) error {
	p := &part{call: Call{Rank: c.rank, Kind: AllgathervF32, Len: len(buf)}, f32: buf}
	off := 0
	for _, n := range counts {
		off += n
	}
	if len(counts) != c.n.size || off != len(buf) {
		p.err = fmt.Errorf("allgatherv counts %v on %d ranks for %d values", counts, c.n.size, len(buf))
	} else {
		p.n = counts[c.rank]
	}
	r, err := c.n.join(p)
	if err != nil {
		return err
	}
	copy(buf, r.f32)
	return nil
}

// BcastMessage returns root's msg on every rank, each its own copy.
func (c Comm) BcastMessage(msg []byte, root int) ([]byte, error) {
	p := &part{call: Call{Rank: c.rank, Kind: BcastMessage, Root: root}}
	switch {
	case root < 0 || root >= c.n.size:
		p.err = fmt.Errorf("root %d of a %d-rank Net", root, c.n.size)
	case c.rank == root:
		p.msg, p.call.Len = msg, len(msg)
	}
	r, err := c.n.join(p)
	if err != nil {
		return nil, err
	}
	return bytes.Clone(r.msg), nil
}

func checkOp(op reduce.Op) error {
	if !op.Valid() {
		return fmt.Errorf("reduction %v", op)
	}
	return nil
}
