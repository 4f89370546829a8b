package builtin

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/hdet-dev/hdet/hparam"
)

// metaForm is a built-in explorer's meta-update (docs/design.md §1.1): the
// learned offset (offsetForm) or the paper's absolute update (paperForm).
// Each owns its state; Init picks the one auto.form names, and the
// explorer calls it without asking which it is, as etcd's raft node calls
// the step function of its role.
type metaForm interface {
	// code is the form's byte in the saved state: 0 offset, 1 paper.
	code() byte
	// updates reports whether the boundary before window k learns.
	updates(k int) bool
	// base is the base at the i-th step of window k, next being the
	// window the explorer observes next.
	base(k, i, next int) (float64, error)
	// observe learns from window o.Window, compared by signal, at the
	// boundary after it; hasBase reports that fb.Base is the next base.
	observe(o hparam.Observation, signal []float64) (fb hparam.Feedback, hasBase bool, err error)
	// search is the explorer's part in the search pass at boundary k.
	search(k int) hparam.SearchState
	// settle ends the learning when the search pass ends before window
	// next; commitment is then what the main pass trains at.
	settle(next int) error
	commitment() (hparam.Commitment, error)
	// offset is the learned offset u (0 in the paper form).
	offset() float64
	// marshal and unmarshal are the form's part of the explorer's state
	// (state.go), unmarshal reading one saved by the explorer's
	// state version.
	marshal() ([]byte, error)
	unmarshal(version byte, b []byte) error
}

// newMetaForm returns the meta-update r's config names.
func newMetaForm(r *builtinRun) (metaForm, error) {
	if r.cfg.Form == FormPaper {
		a, err := NewAuto(r.cfg, r.bounds)
		if err != nil {
			return nil, err
		}
		return &paperForm{builtinRun: r, a: a}, nil
	}
	o, err := NewOffset(r.cfg)
	if err != nil {
		return nil, err
	}
	f := &offsetForm{builtinRun: r, o: o}
	n := 0
	for k := 1; k < r.windows; k++ {
		if f.updates(k) {
			n++
		}
	}
	o.AverageOver(n)
	return f, nil
}

// paperForm is auto.form paper: the paper's absolute base, held over each
// window from the first update on (docs/design.md §1.1, step 7).
type paperForm struct {
	*builtinRun
	a *Auto
}

func (p *paperForm) code() byte         { return 1 }
func (p *paperForm) updates(k int) bool { return p.autoWindow(k) }
func (p *paperForm) offset() float64    { return 0 }

// base is the held auto base in the auto windows, else the schedule.
func (p *paperForm) base(k, i, _ int) (float64, error) {
	if p.autoWindow(k) {
		return p.a.Base, nil
	}
	return p.sched.At(k*p.setup.WindowSteps + i)
}

func (p *paperForm) observe(o hparam.Observation, signal []float64) (hparam.Feedback, bool, error) {
	if !p.updates(o.Window + 1) {
		return hparam.Feedback{}, false, nil
	}
	fb, err := p.a.Update(o.Values, signal, nil)
	return fb, true, err
}

// search: the paper form continues, so it never asks for a search pass.
func (p *paperForm) search(int) hparam.SearchState { return hparam.SearchNone }

func (p *paperForm) settle(int) error { return p.noCommit() }

func (p *paperForm) commitment() (hparam.Commitment, error) { return hparam.Commitment{}, p.noCommit() }

func (p *paperForm) noCommit() error {
	return fmt.Errorf("%w: auto.form paper has no offset to commit", hparam.ErrOrder)
}

func (p *paperForm) marshal() ([]byte, error) { return p.a.MarshalBinary() }

// unmarshal leaves the state as it was when b does not decode.
func (p *paperForm) unmarshal(_ byte, b []byte) error {
	a := *p.a
	if err := a.UnmarshalBinary(b); err != nil {
		return err
	}
	*p.a = a
	return nil
}

// offsetForm is auto.form offset (the default): the base is the schedule
// combined with a learned offset u, learning until auto.until
// (docs/design.md §1.1, steps 3-6).
type offsetForm struct {
	*builtinRun
	o *Offset

	// ev pools the search windows' comparisons for the no-harm rule
	// (evidence.go); rejected is the offset the rule refused at the
	// settle (0 when it refused none), which the commitment explains.
	ev       Evidence
	rejected float64

	// Scratch reused every window: each rank's offset in scale space,
	// from the window's centre (x) and from the schedule (z).
	x, z []float64
}

func (f *offsetForm) code() byte      { return 0 }
func (f *offsetForm) offset() float64 { return f.o.u }

// updates reports whether the boundary before window k updates: only
// where a window follows and before auto.until.
func (f *offsetForm) updates(k int) bool {
	return f.autoWindow(k) && k < f.windows && f.beforeUntil(k*f.setup.WindowSteps)
}

// base is the schedule (+) u. A window the warm-up guard holds (window
// next) keeps the value the schedule reaches at the next window's start.
func (f *offsetForm) base(k, i, next int) (float64, error) {
	t := f.setup.WindowSteps
	step := k*t + i
	if f.o.held && k == next {
		step = min((k+1)*t, f.setup.TotalSteps-1)
	}
	s, err := f.sched.At(step)
	return Combine(f.scale, s, f.o.u), err
}

// search: with auto.commit restart, searching until auto.until, then done.
func (f *offsetForm) search(k int) hparam.SearchState {
	switch {
	case f.cfg.Commit != CommitRestart:
		return hparam.SearchNone
	case f.beforeUntil(k * f.setup.WindowSteps):
		return hparam.Searching
	}
	return hparam.SearchDone
}

// observe is the update at the boundary after window o.Window, when it
// updates; after auto.until u settles on its average instead.
func (f *offsetForm) observe(o hparam.Observation, signal []float64) (hparam.Feedback, bool, error) {
	centre, err := f.base(o.Window, f.lastStep(o.Window), o.Window)
	if err != nil {
		return hparam.Feedback{}, false, err
	}
	f.o.held = false
	k := o.Window + 1
	if !f.updates(k) {
		if err := f.settle(k); err != nil {
			return hparam.Feedback{}, false, err
		}
		return hparam.Feedback{Offset: f.o.u}, false, nil
	}
	x := grow(f.x, len(o.Values))
	f.x = x
	offsetsTo(x, o.Values, f.scale, toScale(f.scale, centre))
	var est float64
	var w []float64
	if f.bracketed(o.Window) {
		est = f.o.Best(x, signal)
	} else {
		est, w = f.o.Estimate(x, signal)
	}
	f.o.Step(est)
	if err := f.pool(o, signal); err != nil {
		return hparam.Feedback{}, false, err
	}
	if err := f.guardAndClamp(k, x); err != nil {
		return hparam.Feedback{}, false, err
	}
	return hparam.Feedback{Weights: w, Estimate: est, Offset: f.o.u}, false, nil
}

// pool adds window o's comparison to the evidence: each rank's value as
// an offset from the schedule's at the window's last step (the script's
// own value, whatever u and the warm-up guard made the window's centre),
// at the run's learning rate then: the workload's (o.Level), else a log-
// scale schedule's own value (a config run's lr), else unknown.
func (f *offsetForm) pool(o hparam.Observation, signal []float64) error {
	s, err := f.sched.At(o.Window*f.setup.WindowSteps + f.lastStep(o.Window))
	if err != nil {
		return err
	}
	z := grow(f.z, len(o.Values))
	f.z = z
	offsetsTo(z, o.Values, f.scale, toScale(f.scale, s))
	level := o.Level
	if !(level > 0) && f.scale == hparam.Log {
		level = s
	}
	f.ev.Add(z, signal, f.cfg.Signal == SignalProbe && o.Probe != nil, max(level, 0))
	return nil
}

// settle makes u the average of its updates, once, clamped so that the
// base at window next's start stays within the bounds. A run that
// commits then applies the no-harm rule (docs/design.md §1.2): u stays
// only where the evidence shows the move from the schedule is better by
// more than the noise between replicas; otherwise u is 0, the script's
// own value, and rejected remembers what was refused.
func (f *offsetForm) settle(next int) error {
	if f.o.Settle() {
		s, err := f.sched.At(min(next*f.setup.WindowSteps, f.setup.TotalSteps-1))
		if err != nil {
			return err
		}
		f.clamp(s)
	}
	f.o.held = false
	if f.judged() && !f.ev.Judge(f.o.u).Shown {
		f.rejected, f.o.u = f.o.u, 0
	}
	return nil
}

// judged reports whether the no-harm rule judges u: a move, in a run
// that commits and restarts.
func (f *offsetForm) judged() bool { return f.cfg.Commit == CommitRestart && f.o.u != 0 }

// commitment is the committed u and the schedule's peak (+) u, with why
// the rule kept the schedule when it did, or the evidence for the move.
func (f *offsetForm) commitment() (hparam.Commitment, error) {
	peak, err := peakOf(f.sched)
	if err != nil {
		return hparam.Commitment{}, err
	}
	c := hparam.Commitment{Offset: f.o.u, Value: f.bounds.Clamp(Combine(f.scale, peak, f.o.u))}
	switch {
	case f.rejected != 0:
		c.Note = f.ev.keptNote(f.scale, f.rejected, f.ev.Judge(f.rejected))
	case f.judged():
		c.Note = f.ev.shownNote(f.ev.Judge(f.o.u))
	}
	return c, nil
}

// guardAndClamp applies the warm-up guard to window k and clamps u so the
// base at k's first step stays within the bounds. The guard fires when the
// schedule still rises over window k and the velocity says "lower" by more
// than Guard times the spread's half-width (the largest |x_r|; after the
// bracket window, the regular spread's): u absorbs
// the rise, so window k holds the base where it is (docs/design.md §6.1).
// The half-width is taken only while the schedule rises: a pass over the
// ranks the other windows need not pay.
func (f *offsetForm) guardAndClamp(k int, x []float64) error {
	t, total := f.setup.WindowSteps, f.setup.TotalSteps
	s0, err := f.sched.At(k * t)
	if err != nil {
		return err
	}
	s1, err := f.sched.At(min((k+1)*t, total-1))
	if err != nil {
		return err
	}
	if rise := toScale(f.scale, s1) - toScale(f.scale, s0); rise > 0 && f.cfg.Guard > 0 {
		span := halfWidth(x)
		if f.bracketed(k - 1) {
			span = f.guardSpan
		}
		if span > 0 && f.o.v <= -f.cfg.Guard*span {
			f.o.u -= rise
			f.o.held = true
			s0 = s1
		}
	}
	f.clamp(s0)
	return nil
}

// clamp keeps u so that the base on schedule value s stays within the bounds.
func (f *offsetForm) clamp(s float64) {
	sc := f.scale
	v := toScale(sc, s)
	if !healthy(v) {
		return // a log-scale schedule at 0: u does not change the base
	}
	lo, hi := math.Inf(-1), toScale(sc, f.bounds.Upper)-v
	if sc != hparam.Log || f.bounds.Lower > 0 {
		lo = toScale(sc, f.bounds.Lower) - v
	}
	f.o.u = max(lo, min(hi, f.o.u))
}

// marshal is the offset's state, then (version 5 on) the evidence and the
// rejected offset.
func (f *offsetForm) marshal() ([]byte, error) {
	b, err := f.o.MarshalBinary()
	if err != nil {
		return nil, err
	}
	ev, err := f.ev.MarshalBinary()
	if err != nil {
		return nil, err
	}
	b = append(b, ev...)
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(f.rejected)), nil
}

// unmarshal leaves the state as it was when b does not decode. A
// version-2 state has no average yet: its sum and count are zero. A state
// before version 5 has no evidence: a search resumed from it pools only
// the windows after the resume.
func (f *offsetForm) unmarshal(version byte, b []byte) error {
	if version == 2 {
		b = append(slices.Clip(b), make([]byte, 16)...)
	}
	var ev Evidence
	rejected := 0.0
	if version >= 5 {
		if len(b) < offsetStateLen+1+8 {
			return fmt.Errorf("%w: offset state: want %d bytes or more, got %d", hparam.ErrDecode, offsetStateLen+1+8, len(b))
		}
		evb := b[offsetStateLen : len(b)-8]
		decode := ev.UnmarshalBinary
		if version == 5 {
			decode = ev.unmarshalV5
		}
		if err := decode(evb); err != nil {
			return err
		}
		rejected = math.Float64frombits(binary.LittleEndian.Uint64(b[len(b)-8:]))
		b = b[:offsetStateLen]
	}
	o := *f.o
	if err := o.UnmarshalBinary(b); err != nil {
		return err
	}
	*f.o, f.ev, f.rejected = o, ev, rejected
	return nil
}
