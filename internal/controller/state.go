package controller

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/internal/plan"
)

// Controller state encoding (version controllerStateVersion):
//
//	version byte
//	uvarint next window
//	byte pass, uvarint the step the search ended at (version 3)
//	uvarint length, permuter state (before the pending plan's draws, if any)
//	uvarint number of hyperparameters, then for each:
//	  uvarint length, name
//	  byte flags (bit 0 frozen, bit 1 has a base, bits 2-3 the search state)
//	  float64 base, byte spread kind, float64 alpha, lower, upper
//	  float64 committed offset and value (version 3)
//	  uvarint length, the explorer's SaveState bytes (empty when frozen)
//
// Version 2 came with the learned offset (docs/design.md §1.1): the
// explorers' states it holds changed meaning, so a version-1 checkpoint
// cannot resume. Version 3 adds the pass and the commitments (the search
// and main passes, §1.2); a version-2 state resumes in the search pass.
const controllerStateVersion = 3

// SaveState serialises the controller for a checkpoint: the window to plan
// next, the generator, the frozen set and every live explorer's SaveState.
// An explorer whose SaveState fails is frozen (Event).
func (c *Controller) SaveState(ctx context.Context) ([]byte, []Event, error) {
	if a := c.prefetched(); a != nil {
		defer c.keep(a)
	}
	gen := c.genBefore
	if gen == nil && c.ahead != nil {
		gen = c.ahead.gen
	}
	if gen == nil {
		var err error
		if gen, err = c.perm.MarshalBinary(); err != nil {
			return nil, nil, err
		}
	}
	b := []byte{controllerStateVersion}
	b = binary.AppendUvarint(b, uint64(c.next))
	b = append(b, byte(c.pass))
	b = binary.AppendUvarint(b, uint64(c.searchEnd))
	b = plan.AppendBytes(b, gen)
	b = binary.AppendUvarint(b, uint64(len(c.params)))
	var events []Event
	for _, p := range c.params {
		var st []byte
		if !p.frozen {
			var err error
			if st, err = p.ex.SaveState(ctx); err != nil {
				events = append(events, c.freeze(p, "save_state", err))
				st = nil
			}
		}
		b = plan.AppendBytes(b, []byte(p.name))
		var flags byte
		if p.frozen {
			flags |= 1
		}
		if p.hasBase {
			flags |= 2
		}
		b = append(b, flags|byte(p.search)<<2)
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(p.base))
		b = append(b, plan.SpreadCode(p.spread.Kind))
		for _, f := range []float64{p.spread.Alpha, p.bounds.Lower, p.bounds.Upper, p.commit.Offset, p.commit.Value} {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
		}
		b = plan.AppendBytes(b, st)
	}
	return b, events, nil
}

// LoadState restores a SaveState taken with the same explorers (same names
// in the same order), after NewController. Live explorers get their
// LoadState; one that fails is frozen (Event). The next Plan is the one the
// saved controller would have drawn.
func (c *Controller) LoadState(ctx context.Context, data []byte) ([]Event, error) {
	c.prefetched() // made for the state being replaced
	d := plan.NewDecoder(data)
	version := d.Byte("version")
	if d.Err() == nil && version != controllerStateVersion && version != 2 {
		return nil, fmt.Errorf("%w: controller state: version %d, this hdet reads versions 2 and %d (written before the learned offset of docs/design.md §1.1; start the run afresh)", hparam.ErrDecode, version, controllerStateVersion)
	}
	next := d.Uvarint("next window", uint64(c.windows))
	pass, searchEnd := plan.PassSearch, 0
	if version >= 3 {
		pass = int(d.Byte("pass"))
		searchEnd = d.Uvarint("search end", uint64(c.shape.TotalSteps))
		if d.Err() == nil && pass != plan.PassSearch && pass != plan.PassMain {
			d.Fail(fmt.Sprintf("unknown pass %d", pass))
		}
	}
	gen := d.Bytes("generator state")
	np := d.Uvarint("hyperparameter count", uint64(d.Len()))
	if d.Err() == nil && np != len(c.params) {
		d.Fail(fmt.Sprintf("%d hyperparameters saved, %d configured", np, len(c.params)))
	}
	type saved struct {
		p     param
		state []byte
	}
	ps := make([]saved, 0, min(np, len(c.params)))
	for i := 0; d.Err() == nil && i < np; i++ {
		var s saved
		s.p.name = string(d.Bytes("name"))
		if d.Err() == nil && s.p.name != c.params[i].name {
			d.Fail(fmt.Sprintf("hyperparameter %d is %q, configured %q", i, s.p.name, c.params[i].name))
		}
		flags := d.Byte("flags")
		s.p.frozen, s.p.hasBase, s.p.search = flags&1 != 0, flags&2 != 0, hparam.SearchState(flags>>2&3)
		s.p.base = d.Float("base")
		code := d.Byte("spread kind")
		kind, ok := plan.SpreadKind(code)
		if d.Err() == nil && !ok {
			d.Fail(fmt.Sprintf("unknown spread kind code %d", code))
			break
		}
		s.p.spread = hparam.Spread{Kind: kind, Alpha: d.Float("alpha")}
		s.p.bounds = hparam.Bounds{Lower: d.Float("lower bound"), Upper: d.Float("upper bound")}
		if version >= 3 {
			s.p.commit = hparam.Commitment{Offset: d.Float("committed offset"), Value: d.Float("committed value")}
		}
		s.state = d.Bytes("explorer state")
		ps = append(ps, s)
	}
	if d.Err() == nil && d.Len() != 0 {
		d.Fail(fmt.Sprintf("%d trailing bytes", d.Len()))
	}
	if d.Err() != nil {
		return nil, d.Err()
	}
	perm := &Permuter{}
	if err := perm.UnmarshalBinary(gen); err != nil {
		return nil, err
	}
	c.perm, c.next, c.plan, c.genBefore, c.ahead = perm, next, nil, nil, nil
	c.pass, c.searchEnd = pass, searchEnd
	var events []Event
	for i, s := range ps {
		p := c.params[i]
		p.frozen, p.hasBase, p.base, p.spread, p.bounds = s.p.frozen, s.p.hasBase, s.p.base, s.p.spread, s.p.bounds
		p.search, p.commit = s.p.search, s.p.commit
		if !p.frozen {
			if err := p.ex.LoadState(ctx, s.state); err != nil {
				events = append(events, c.freeze(p, "load_state", err))
			}
		}
	}
	return events, nil
}
