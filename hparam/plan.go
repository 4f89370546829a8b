package hparam

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
)

// MaxWindowSteps is the longest window a Plan may have, a bound that keeps
// a decoder from allocating without limit.
const MaxWindowSteps = 1 << 20

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
	// Pass is PassSearch or PassMain: the first main-pass plan tells every
	// rank to restore the step-0 state (docs/design.md §1.2).
	Pass int
}

// ParamPlan is one hyperparameter's part of a Plan.
type ParamPlan struct {
	Name   string
	Base   []float64 // len Steps
	Spread Spread
	Bounds Bounds
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
		return 0, fmt.Errorf("%w: the plan has no hyperparameter %q", ErrInvalid, param)
	}
	if rank < 0 || rank >= len(pp.Slots) || i < 0 || i >= len(pp.Base) {
		return 0, fmt.Errorf("%w: rank %d step %d, the plan has %d ranks and %d steps", ErrInvalid, rank, i, len(pp.Slots), len(pp.Base))
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
	if p.Window < 0 || p.Start < 0 || p.Steps < 1 || p.Steps > MaxWindowSteps {
		return fmt.Errorf("%w: plan window %d start %d steps %d", ErrInvalid, p.Window, p.Start, p.Steps)
	}
	n := p.Ranks()
	seen := make(map[string]bool, len(p.Params))
	var mark []bool
	for _, pp := range p.Params {
		if pp.Name == "" || seen[pp.Name] {
			return fmt.Errorf("%w: plan hyperparameter name %q is empty or repeated", ErrInvalid, pp.Name)
		}
		seen[pp.Name] = true
		if len(pp.Base) != p.Steps {
			return fmt.Errorf("%w: %s: %d base values for %d steps", ErrInvalid, pp.Name, len(pp.Base), p.Steps)
		}
		for i, b := range pp.Base {
			if !healthy(b) {
				return fmt.Errorf("%w: %s: base value %v at step %d", ErrInvalid, pp.Name, b, p.Start+i)
			}
		}
		if err := pp.Spread.Validate(); err != nil {
			return fmt.Errorf("%s: %w", pp.Name, err)
		}
		if err := pp.Bounds.Validate(); err != nil {
			return fmt.Errorf("%s: %w", pp.Name, err)
		}
		if len(pp.Slots) != n || n == 0 {
			return fmt.Errorf("%w: %s: %d slots, want %d > 0", ErrInvalid, pp.Name, len(pp.Slots), n)
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
				return fmt.Errorf("%w: %s: slots are not a permutation of 0..%d", ErrInvalid, pp.Name, n-1)
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
	planProbe = 1
	planMain  = 2
)

var spreadCodes = []SpreadKind{1: Multiplicative, 2: Additive, 3: Geometric}

func spreadCode(k SpreadKind) byte {
	for c, kk := range spreadCodes {
		if kk == k && c > 0 {
			return byte(c)
		}
	}
	return 0
}

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
	b = append(b, pflags)
	for _, pp := range p.Params {
		b = binary.AppendUvarint(b, uint64(len(pp.Name)))
		b = append(b, pp.Name...)
		b = append(b, spreadCode(pp.Spread.Kind))
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
func (d *planDecoder) slots(n int) []uint32 {
	w := slotWidth(n)
	if d.err != nil {
		return nil
	}
	if n > len(d.b)/w {
		d.fail("truncated slots")
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

// planDecoder reads the encoding, checking every length against the bytes
// that remain before allocating, so garbage costs an error, not a panic or
// a huge allocation.
type planDecoder struct {
	b   []byte
	err error
}

func (d *planDecoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: plan: %s", ErrDecode, what)
	}
}

func (d *planDecoder) uvarint(what string, max uint64) int {
	if d.err != nil {
		return 0
	}
	v, k := binary.Uvarint(d.b)
	if k <= 0 || v > max {
		d.fail("bad " + what)
		return 0
	}
	d.b = d.b[k:]
	return int(v)
}

func (d *planDecoder) byte1(what string) byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 1 {
		d.fail("truncated at " + what)
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *planDecoder) float(what string) float64 {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 8 {
		d.fail("truncated at " + what)
		return 0
	}
	f := math.Float64frombits(binary.LittleEndian.Uint64(d.b))
	d.b = d.b[8:]
	return f
}

// UnmarshalBinary decodes a plan from MarshalBinary and validates it.
func (p *Plan) UnmarshalBinary(data []byte) error {
	d := &planDecoder{b: data}
	if v := d.byte1("version"); d.err == nil && v != planVersion {
		return fmt.Errorf("%w: plan: version %d, this hdet reads version %d", ErrDecode, v, planVersion)
	}
	const maxInt = math.MaxInt32
	q := Plan{Window: d.uvarint("window", maxInt), Start: d.uvarint("start", maxInt)}
	// A constant base takes 8 bytes however long the window, so steps is
	// bounded by MaxWindowSteps rather than by the bytes left.
	q.Steps = d.uvarint("steps", MaxWindowSteps)
	n := d.uvarint("ranks", uint64(len(d.b))) // each rank needs >= 1 byte per hyperparameter
	np := d.uvarint("hyperparameter count", uint64(len(d.b))/(1+1+24+1+8))
	pflags := d.byte1("plan flags")
	if pflags&^(planProbe|planMain) != 0 {
		d.fail(fmt.Sprintf("unknown plan flags %#x", pflags))
	}
	if d.err != nil {
		return d.err
	}
	q.Probe = pflags&planProbe != 0
	if pflags&planMain != 0 {
		q.Pass = PassMain
	}
	q.Params = make([]ParamPlan, np)
	for i := range q.Params {
		pp := &q.Params[i]
		pp.Name = string(d.bytes("name"))
		code := d.byte1("spread kind")
		if int(code) >= len(spreadCodes) || code == 0 {
			d.fail(fmt.Sprintf("unknown spread kind code %d", code))
		}
		if d.err != nil {
			return d.err
		}
		pp.Spread = Spread{Kind: spreadCodes[code], Alpha: d.float("alpha")}
		pp.Bounds = Bounds{Lower: d.float("lower bound"), Upper: d.float("upper bound")}
		flags := d.byte1("flags")
		if flags&^(flagFrozen|flagConstBase) != 0 {
			d.fail(fmt.Sprintf("unknown flags %#x", flags))
		}
		pp.Frozen = flags&flagFrozen != 0
		if d.err != nil {
			return d.err
		}
		if flags&flagConstBase != 0 {
			v := d.float("base")
			if d.err != nil {
				return d.err
			}
			pp.Base = make([]float64, q.Steps)
			for s := range pp.Base {
				pp.Base[s] = v
			}
		} else {
			if uint64(q.Steps) > uint64(len(d.b))/8 {
				d.fail("truncated base values")
				return d.err
			}
			pp.Base = make([]float64, q.Steps)
			for s := range pp.Base {
				pp.Base[s] = d.float("base")
			}
		}
		pp.Slots = d.slots(n)
		if d.err != nil {
			return d.err
		}
	}
	if len(d.b) != 0 {
		return fmt.Errorf("%w: plan: %d trailing bytes", ErrDecode, len(d.b))
	}
	if err := q.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrDecode, err)
	}
	*p = q
	return nil
}

// length reads a uvarint byte count that must fit in what remains.
func (d *planDecoder) length(what string) int {
	n := d.uvarint(what+" length", math.MaxInt32)
	if d.err == nil && n > len(d.b) {
		d.fail("truncated " + what)
	}
	return n
}

// bytes reads a uvarint length and that many bytes.
func (d *planDecoder) bytes(what string) []byte {
	n := d.length(what)
	if d.err != nil {
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}
