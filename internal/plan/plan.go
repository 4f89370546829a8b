// Package plan is the plan rank 0 broadcasts before every window
// (docs/design.md §3): each explored hyperparameter's base at every step,
// its spread and bounds, and every rank's slot; and its wire encoding
// (docs/design.md §4), decoded without panicking or allocating more than
// the input holds.
package plan

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/hdet-dev/hdet/hparam"
)

// Passes of a run (docs/design.md §1.2). A run whose explorers all
// settle before its last window commits and restarts: the search pass,
// then the main pass. Any other run is one pass, PassSearch.
const (
	PassSearch = 0
	PassMain   = 1
)

// Plan is what rank 0 broadcasts before window Window: for each explored
// hyperparameter, its base value at each of the window's steps, its spread
// and bounds, and the slot of every rank.
type Plan struct {
	Window int // k
	Start  int // first step, k*T
	Steps  int // steps in the window (T, or fewer for the last window)
	Params []ParamPlan
	// Probe: some explorer asked for probe losses at the end of this window.
	Probe bool
	// Anneal: some explorer asked for probe losses that the workload
	// cannot give; the ranks anneal their learning rates over the window's
	// end and are compared by the losses of its last steps instead
	// (docs/design.md §1.1).
	Anneal bool
	// Pass is PassSearch or PassMain: the first main-pass plan tells every
	// rank to restore the step-0 state (docs/design.md §1.2).
	Pass int
	// Search: a search-pass window of a run without a probe that the
	// controller expects to commit and restart (some live explorer expects
	// its search to end before the last window, none to search on): the
	// replicas of a worker script then share their batches, since the main
	// pass starts again from step 0 (docs/pytorch.md). False in the main
	// pass, in a run of one pass and in a run with a probe.
	Search bool
}

// ParamPlan is one hyperparameter's part of a Plan.
type ParamPlan struct {
	Name   string
	Base   []float64 // len Steps
	Spread hparam.Spread
	Bounds hparam.Bounds
	Slots  []uint32 // Slots[r] is rank r's slot; a permutation of 0..N-1
	Frozen bool     // its explorer failed; Base is held where it was
}

// Ranks is N, the number of ranks the plan is for.
func (p *Plan) Ranks() int {
	if len(p.Params) == 0 {
		return 0
	}
	return len(p.Params[0].Slots)
}

// Param returns the hyperparameter called name.
func (p *Plan) Param(name string) (*ParamPlan, bool) {
	for i := range p.Params {
		if p.Params[i].Name == name {
			return &p.Params[i], true
		}
	}
	return nil, false
}

// Value is rank's clamped value of hyperparameter param at the window's
// i-th step.
func (p *Plan) Value(param string, rank, i int) (float64, error) {
	pp, ok := p.Param(param)
	if !ok {
		return 0, fmt.Errorf("%w: the plan has no hyperparameter %q", hparam.ErrInvalid, param)
	}
	if rank < 0 || rank >= len(pp.Slots) || i < 0 || i >= len(pp.Base) {
		return 0, fmt.Errorf("%w: rank %d step %d, the plan has %d ranks and %d steps", hparam.ErrInvalid, rank, i, len(pp.Slots), len(pp.Base))
	}
	return pp.Value(rank, i), nil
}

// Value is rank's clamped value at the window's i-th step. Like a slice
// index, it panics when rank or i is out of range.
func (pp *ParamPlan) Value(rank, i int) float64 {
	return pp.Bounds.Clamp(pp.Spread.Value(pp.Base[i], int(pp.Slots[rank]), len(pp.Slots)))
}

// RankValues returns rank's values for the whole window.
func (pp *ParamPlan) RankValues(rank int) []float64 {
	out := make([]float64, len(pp.Base))
	for i := range out {
		out[i] = pp.Value(rank, i)
	}
	return out
}

// Validate checks that the plan is self-consistent: at least one step and
// one rank, every base finite, known spreads, ordered bounds, unique names
// and slots that permute 0..N-1 with the same N for every hyperparameter.
func (p *Plan) Validate() error { return p.validate(true) }

// validate is Validate, with the check that the slots permute 0..N-1 only
// when perms is set.
func (p *Plan) validate(perms bool) error {
	if p.Window < 0 || p.Start < 0 || p.Steps < 1 || p.Steps > hparam.MaxWindowSteps {
		return fmt.Errorf("%w: plan window %d start %d steps %d", hparam.ErrInvalid, p.Window, p.Start, p.Steps)
	}
	n := p.Ranks()
	seen := make(map[string]bool, len(p.Params))
	var mark []bool
	for _, pp := range p.Params {
		if pp.Name == "" || seen[pp.Name] {
			return fmt.Errorf("%w: plan hyperparameter name %q is empty or repeated", hparam.ErrInvalid, pp.Name)
		}
		seen[pp.Name] = true
		if len(pp.Base) != p.Steps {
			return fmt.Errorf("%w: %s: %d base values for %d steps", hparam.ErrInvalid, pp.Name, len(pp.Base), p.Steps)
		}
		for i, b := range pp.Base {
			if !finite(b) {
				return fmt.Errorf("%w: %s: base value %v at step %d", hparam.ErrInvalid, pp.Name, b, p.Start+i)
			}
		}
		if err := pp.Spread.Validate(); err != nil {
			return fmt.Errorf("%s: %w", pp.Name, err)
		}
		if err := pp.Bounds.Validate(); err != nil {
			return fmt.Errorf("%s: %w", pp.Name, err)
		}
		if len(pp.Slots) != n || n == 0 {
			return fmt.Errorf("%w: %s: %d slots, want %d > 0", hparam.ErrInvalid, pp.Name, len(pp.Slots), n)
		}
		if !perms {
			continue
		}
		if mark == nil {
			mark = make([]bool, n)
		}
		clear(mark)
		for _, s := range pp.Slots {
			if int(s) >= n || mark[s] {
				return fmt.Errorf("%w: %s: slots are not a permutation of 0..%d", hparam.ErrInvalid, pp.Name, n-1)
			}
			mark[s] = true
		}
	}
	return nil
}

// Encoding (little endian, version planVersion):
//
//	version byte
//	uvarint window, start, steps, ranks, number of hyperparameters
//	byte plan flags (bit 0 probe, bit 1 main pass)
//	per hyperparameter:
//	  uvarint name length, name bytes
//	  byte spread kind (1 multiplicative, 2 additive, 3 geometric)
//	  float64 alpha, lower, upper
//	  byte flags (bit 0 frozen, bit 1 constant base: one float64 instead of steps)
//	  float64 base values
//	  slot of each rank, 1, 2 or 4 bytes each as N <= 256, <= 65536 or more
const planVersion = 2

const (
	flagFrozen    = 1
	flagConstBase = 2
)

// Plan flags.
const (
	planProbe  = 1
	planMain   = 2
	planAnneal = 4
	planSearch = 8
)

// MarshalBinary encodes a plan after every check of Validate but one: that
// the slots permute 0..N-1, which UnmarshalBinary makes on every receiving
// rank. The controller draws them as permutations, and checking N slots
// per hyperparameter again before sending was a tenth of rank 0's window at
// N = 16384.
func (p *Plan) MarshalBinary() ([]byte, error) {
	if err := p.validate(false); err != nil {
		return nil, err
	}
	n := p.Ranks()
	b := make([]byte, 0, p.encodedCap(n))
	b = append(b, planVersion)
	for _, v := range []int{p.Window, p.Start, p.Steps, n, len(p.Params)} {
		b = binary.AppendUvarint(b, uint64(v))
	}
	var pflags byte
	if p.Probe {
		pflags |= planProbe
	}
	if p.Pass == PassMain {
		pflags |= planMain
	}
	if p.Anneal {
		pflags |= planAnneal
	}
	if p.Search {
		pflags |= planSearch
	}
	b = append(b, pflags)
	for _, pp := range p.Params {
		b = binary.AppendUvarint(b, uint64(len(pp.Name)))
		b = append(b, pp.Name...)
		b = append(b, SpreadCode(pp.Spread.Kind))
		for _, f := range []float64{pp.Spread.Alpha, pp.Bounds.Lower, pp.Bounds.Upper} {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
		}
		var flags byte
		if pp.Frozen {
			flags |= flagFrozen
		}
		base := pp.Base
		if constant(base) {
			flags |= flagConstBase
			base = base[:1]
		}
		b = append(b, flags)
		for _, f := range base {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
		}
		b = appendSlots(b, pp.Slots)
	}
	return b, nil
}

// encodedCap bounds MarshalBinary's length, so it allocates once and no
// more than it may use: the buffer is most of the plan's garbage.
func (p *Plan) encodedCap(n int) int {
	c := 2 + 5*binary.MaxVarintLen64
	for _, pp := range p.Params {
		c += binary.MaxVarintLen64 + len(pp.Name) + 2 + 24 + 8*len(pp.Base) + slotWidth(n)*n
	}
	return c
}

// slotWidth is the bytes per slot for n ranks.
func slotWidth(n int) int {
	switch {
	case n <= 1<<8:
		return 1
	case n <= 1<<16:
		return 2
	}
	return 4
}

// appendSlots grows b once and writes the slots in place: appending them
// one by one checked the capacity for each of N slots.
func appendSlots(b []byte, slots []uint32) []byte {
	w := slotWidth(len(slots))
	at := len(b)
	b = slices.Grow(b, w*len(slots))[:at+w*len(slots)]
	out := b[at:]
	switch w {
	case 1:
		for i, s := range slots {
			out[i] = byte(s)
		}
	case 2:
		for i, s := range slots {
			binary.LittleEndian.PutUint16(out[2*i:], uint16(s))
		}
	default:
		for i, s := range slots {
			binary.LittleEndian.PutUint32(out[4*i:], s)
		}
	}
	return b
}

// slots reads n slots (Validate checks they permute 0..n-1).
func (d *Decoder) slots(n int) []uint32 {
	w := slotWidth(n)
	if d.err != nil {
		return nil
	}
	if n > len(d.b)/w {
		d.Fail("truncated slots")
		return nil
	}
	out := make([]uint32, n)
	for r := range out {
		switch w {
		case 1:
			out[r] = uint32(d.b[r])
		case 2:
			out[r] = uint32(binary.LittleEndian.Uint16(d.b[2*r:]))
		default:
			out[r] = binary.LittleEndian.Uint32(d.b[4*r:])
		}
	}
	d.b = d.b[n*w:]
	return out
}

// constant reports whether every value is bit-identical to the first
// (inside the auto phase the base is constant over a window).
func constant(v []float64) bool {
	for _, f := range v[1:] {
		if math.Float64bits(f) != math.Float64bits(v[0]) {
			return false
		}
	}
	return true
}

// UnmarshalBinary decodes a plan from MarshalBinary and validates it.
func (p *Plan) UnmarshalBinary(data []byte) error {
	d := NewDecoder(data)
	if v := d.Byte("version"); d.err == nil && v != planVersion {
		return fmt.Errorf("%w: plan: version %d, this hdet reads version %d", hparam.ErrDecode, v, planVersion)
	}
	const maxInt = math.MaxInt32
	q := Plan{Window: d.Uvarint("window", maxInt), Start: d.Uvarint("start", maxInt)}
	// A constant base takes 8 bytes however long the window, so steps is
	// bounded by hparam.MaxWindowSteps rather than by the bytes left.
	q.Steps = d.Uvarint("steps", hparam.MaxWindowSteps)
	n := d.Uvarint("ranks", uint64(len(d.b))) // each rank needs >= 1 byte per hyperparameter
	np := d.Uvarint("hyperparameter count", uint64(len(d.b))/(1+1+24+1+8))
	pflags := d.Byte("plan flags")
	if pflags&^(planProbe|planMain|planAnneal|planSearch) != 0 {
		d.Fail(fmt.Sprintf("unknown plan flags %#x", pflags))
	}
	if d.err != nil {
		return d.err
	}
	q.Probe, q.Anneal, q.Search = pflags&planProbe != 0, pflags&planAnneal != 0, pflags&planSearch != 0
	if pflags&planMain != 0 {
		q.Pass = PassMain
	}
	q.Params = make([]ParamPlan, np)
	for i := range q.Params {
		pp := &q.Params[i]
		pp.Name = string(d.Bytes("name"))
		code := d.Byte("spread kind")
		kind, ok := SpreadKind(code)
		if !ok {
			d.Fail(fmt.Sprintf("unknown spread kind code %d", code))
		}
		if d.err != nil {
			return d.err
		}
		pp.Spread = hparam.Spread{Kind: kind, Alpha: d.Float("alpha")}
		pp.Bounds = hparam.Bounds{Lower: d.Float("lower bound"), Upper: d.Float("upper bound")}
		flags := d.Byte("flags")
		if flags&^(flagFrozen|flagConstBase) != 0 {
			d.Fail(fmt.Sprintf("unknown flags %#x", flags))
		}
		pp.Frozen = flags&flagFrozen != 0
		if d.err != nil {
			return d.err
		}
		if flags&flagConstBase != 0 {
			v := d.Float("base")
			if d.err != nil {
				return d.err
			}
			pp.Base = make([]float64, q.Steps)
			for s := range pp.Base {
				pp.Base[s] = v
			}
		} else {
			if uint64(q.Steps) > uint64(len(d.b))/8 {
				d.Fail("truncated base values")
				return d.err
			}
			pp.Base = make([]float64, q.Steps)
			for s := range pp.Base {
				pp.Base[s] = d.Float("base")
			}
		}
		pp.Slots = d.slots(n)
		if d.err != nil {
			return d.err
		}
	}
	if len(d.b) != 0 {
		return fmt.Errorf("%w: plan: %d trailing bytes", hparam.ErrDecode, len(d.b))
	}
	if err := q.Validate(); err != nil {
		return fmt.Errorf("%w: %w", hparam.ErrDecode, err)
	}
	*p = q
	return nil
}

// finite reports whether v is neither NaN nor infinite.
func finite(v float64) bool { return math.Abs(v) <= math.MaxFloat64 }
