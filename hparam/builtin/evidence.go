package builtin

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/hdet-dev/hdet/hparam"
)

// Evidence pools what every search window showed about moving a
// hyperparameter away from the script's own value (the schedule, u = 0),
// so that the commit moves it only when the signal shows the move is
// better by more than the signal's noise between replicas (docs/design.md
// §1.2, "No harm").
//
// Each healthy replica's reading in window k is (z, L): z its value's
// offset from the schedule's in scale space (log(h/s) or h-s), L its loss
// (training loss or probe). The model is L = a_k + b z + c z^2 + e: a_k
// absorbs whatever the window shares (training progress, the batches), so
// only the comparison between a window's replicas estimates b and c, and
// the scatter of those comparisons around the common curve, window to
// window, is the noise e. Same-rate replicas would differ by that noise
// alone; a gain within it is no evidence. The curvature c lets a search
// that walked past the best value still read as one curve (a straight
// line fitted to it reads its windows' slopes as noise); where the
// windows' centres did not move enough to tell c from b (two replicas
// around one centre), the line stands alone. The sums are the
// within-window (centred) sums of ordinary least squares with one
// intercept per window.
//
// A window read while the run's learning rate was below minLevelShare of
// the highest the search saw (a warm-up's first part) is kept but not
// pooled: there every replica's rate is far below those the run trains
// at, a larger one always gains, and pooled with the windows nearer the
// peak, which favour less, it reads as noise (a search from 10x above
// under OneCycleLR kept x1: issue 51's notebook). The windows pooled
// weigh as their level's share of the highest: one read at half the peak
// says half as much about the rate the run trains at (a search at the
// best start that a warm-up's middle walked up to x2.4 committed it; the
// windows near the peak favoured x1).
type Evidence struct {
	wins []evidenceWindow

	// Scratch for Add: the window's healthy readings.
	zs, ls []float64
}

// evidenceWindow is one window's part of the evidence.
type evidenceWindow struct {
	s      [6]float64 // within-window centred sums of products: zz, zq, qq, zl, ql, ll (q = z^2)
	n      int        // healthy readings
	lo, hi float64    // the smallest and largest z a replica tried
	level  float64    // the run's learning rate at the window's end; 0 unknown (always pooled)
	probe  bool       // compared by probe losses
}

// minLevelShare is the least share of the search's highest learning rate
// at which a window's readings are pooled.
const minLevelShare = 1.0 / 8

// pool is the evidence a verdict reads: the sums of the windows pooled.
type pool struct {
	szz, szq, sqq, szl, sql, sll float64

	readings, windows int
	left              int // windows left out, read below minLevelShare of the highest level
	lo, hi            float64
	probe             bool
}

// pooled sums the windows read at minLevelShare of the highest level or
// more, each weighted by its level's share of the highest (1 at an
// unknown level): weighted least squares, the noise measured on the
// weighted scatter.
func (e *Evidence) pooled() pool {
	top := 0.0
	for _, w := range e.wins {
		top = max(top, w.level)
	}
	p := pool{lo: math.Inf(1), hi: math.Inf(-1)}
	for _, w := range e.wins {
		if w.level > 0 && w.level < minLevelShare*top {
			p.left++
			continue
		}
		a := 1.0
		if w.level > 0 {
			a = w.level / top
		}
		p.szz, p.szq, p.sqq = p.szz+a*w.s[0], p.szq+a*w.s[1], p.sqq+a*w.s[2]
		p.szl, p.sql, p.sll = p.szl+a*w.s[3], p.sql+a*w.s[4], p.sll+a*w.s[5]
		p.readings += w.n
		p.windows++
		p.lo, p.hi = min(p.lo, w.lo), max(p.hi, w.hi)
		p.probe = p.probe || w.probe
	}
	return p
}

// Add keeps one window: each replica's offset z from the schedule (NaN
// where it has none), its loss (NaN or Inf for an unhealthy replica) and
// the run's learning rate at the window's end (0: unknown). A window with
// fewer than two healthy readings, or whose replicas all tried the same
// value, compares nothing and is left out.
func (e *Evidence) Add(z, losses []float64, probe bool, level float64) {
	zs, ls := e.zs[:0], e.ls[:0]
	for r, l := range losses {
		if healthy(l) && healthy(z[r]) {
			zs, ls = append(zs, z[r]), append(ls, l)
		}
	}
	e.zs, e.ls = zs, ls
	if len(zs) < 2 {
		return
	}
	n := float64(len(zs))
	var mz, mq, ml float64
	for i, v := range zs {
		mz += v / n
		mq += v * v / n
		ml += ls[i] / n
	}
	w := evidenceWindow{n: len(zs), lo: math.Inf(1), hi: math.Inf(-1), level: level, probe: probe}
	s := &w.s
	for i, v := range zs {
		dz, dq, dl := v-mz, v*v-mq, ls[i]-ml
		s[0] += dz * dz
		s[1] += dz * dq
		s[2] += dq * dq
		s[3] += dz * dl
		s[4] += dq * dl
		s[5] += dl * dl
	}
	if !(s[0] > 0) {
		return
	}
	for _, v := range zs {
		w.lo, w.hi = min(w.lo, v), max(w.hi, v)
	}
	e.wins = append(e.wins, w)
}

// Verdict is what the evidence says about committing offset u.
type Verdict struct {
	Gain  float64 // the loss the fit says u saves against the schedule (L(0) - L(u))
	T     float64 // Gain over its standard error; 0 without noise measured
	Need  float64 // the T the move needs (Student's t, one-sided 97.5 %, at DF)
	DF    int     // the noise's degrees of freedom: readings - windows - terms
	Shown bool    // the move is better by more than the noise
}

// minCurvatureShare is how much of q = z^2's within-window variation must
// be its own (not explained by z) for the fit to take the curvature term:
// below it the windows' centres hardly moved and c would only add noise.
const minCurvatureShare = 0.05

// Judge says whether the pooled evidence shows that moving from the
// schedule to offset u lowers the loss: the gain the fit gives u stands
// out of its noise by Student's t at one-sided 97.5 %. The search chose
// u's direction from the same losses, so a one-sided test at 95 % would
// move on noise one time in ten; at 97.5 % one in twenty. u = 0 is no
// move and is always shown. Too few readings to measure the noise (no
// degree of freedom left) show nothing.
func (e *Evidence) Judge(u float64) Verdict {
	if u == 0 {
		return Verdict{Shown: true}
	}
	p := e.pooled()
	if p.windows == 0 {
		return Verdict{}
	}
	gain, variance, df := p.fit(u)
	if df < 1 {
		return Verdict{DF: max(df, 0)}
	}
	v := Verdict{Gain: gain, DF: df, Need: studentT975(df)}
	switch {
	case variance > 0:
		v.T = gain / math.Sqrt(variance)
		v.Shown = v.T > v.Need
	case gain > 0: // no scatter at all around the fit: exact data
		v.T, v.Shown = math.Inf(1), true
	}
	return v
}

// fit is the least-squares gain L(0) - L(u) = -(b u + c u^2), its
// variance and the noise's degrees of freedom: with the curvature where
// the windows identify it and a degree of freedom is left for the
// noise beyond one more, else the line alone.
func (p *pool) fit(u float64) (gain, variance float64, df int) {
	det := p.szz*p.sqq - p.szq*p.szq
	if df = p.readings - p.windows - 2; df >= 2 && det > minCurvatureShare*p.szz*p.sqq {
		b := (p.sqq*p.szl - p.szq*p.sql) / det
		c := (p.szz*p.sql - p.szq*p.szl) / det
		sigma2 := max(p.sll-b*p.szl-c*p.sql, 0) / float64(df)
		// g' M^-1 g for g = (u, u^2), M the centred sums' matrix.
		quad := (p.sqq*u*u - 2*p.szq*u*u*u + p.szz*u*u*u*u) / det
		return -(b*u + c*u*u), sigma2 * quad, df
	}
	df = p.readings - p.windows - 1
	if df < 1 {
		return 0, 0, df
	}
	b := p.szl / p.szz
	sigma2 := max(p.sll-b*p.szl, 0) / float64(df)
	return -b * u, sigma2 * u * u / p.szz, df
}

// keptNote is the closing line's reason for keeping the script's value
// when the verdict does not show u's move: which signal could not tell
// which values apart, and what would let it.
func (e *Evidence) keptNote(sc hparam.Scale, u float64, v Verdict) string {
	p := e.pooled()
	signal := p.signal()
	if p.windows == 0 || v.DF < 1 {
		return fmt.Sprintf("kept: %d readings in %d search windows are too few to measure %s's noise between replicas", p.readings, p.windows, signal)
	}
	moved := fmt.Sprintf("%+.3g", u)
	span := fmt.Sprintf("%+.3g to %+.3g", p.lo, p.hi)
	if sc == hparam.Log {
		moved, span = fmt.Sprintf("x%.3g", math.Exp(u)), fmt.Sprintf("x%.3g to x%.3g", math.Exp(p.lo), math.Exp(p.hi))
	}
	out := fmt.Sprintf("kept: %s could not tell %s apart: the move to %s scored t %.2f over %d windows, %.2f needed",
		signal, span, moved, v.T, p.windows, v.Need)
	if p.left > 0 {
		out += fmt.Sprintf(" (%d earlier windows, read below 1/%.0f of the highest learning rate, left out)", p.left, 1/minLevelShare)
	}
	if !p.probe {
		out += "; a probe lets hdet see held-out loss: docs/pytorch.md#probe"
	}
	return out
}

// signal names what the pooled windows compared the replicas by.
func (p *pool) signal() string {
	if p.probe {
		return "the probe loss"
	}
	return "the training loss"
}

// shownNote is the closing line's evidence for a move the verdict shows:
// a user reads how far past the test's line it stood, since a move
// near the line is the one the search's short horizon can mislead
// (docs/design.md §1.2).
func (e *Evidence) shownNote(v Verdict) string {
	p := e.pooled()
	return fmt.Sprintf("shown: %s scored the move t %.2f over %d windows, %.2f needed", p.signal(), v.T, p.windows, v.Need)
}

// studentT975 is the one-sided 97.5 % quantile of Student's t with
// df >= 1 degrees of freedom: a table to 30, then the normal quantile with
// the first two terms of its Cornish-Fisher expansion (within 0.001 there).
func studentT975(df int) float64 {
	table := [...]float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
		2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
		2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042}
	if df <= len(table) {
		return table[df-1]
	}
	const z = 1.959963984540054
	n := float64(df)
	return z + (z*z*z+z)/(4*n) + (5*math.Pow(z, 5)+16*z*z*z+3*z)/(96*n*n)
}

// evidenceWindowLen is the size of one window's binary state: the six
// sums, the readings, lo, hi, the level and the probe flag.
const evidenceWindowLen = 6*8 + 8 + 3*8 + 1

// evidenceV5Len is the size of the version-5 state: the pooled sums, the
// readings and windows, lo, hi and the probe flag, every window alike.
const evidenceV5Len = 6*8 + 2*8 + 2*8 + 1

// MarshalBinary encodes the evidence bit-exactly: the window count, then
// each window.
func (e *Evidence) MarshalBinary() ([]byte, error) {
	b := binary.AppendUvarint(nil, uint64(len(e.wins)))
	for _, w := range e.wins {
		for _, f := range w.s {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
		}
		b = binary.LittleEndian.AppendUint64(b, uint64(w.n))
		for _, f := range []float64{w.lo, w.hi, w.level} {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
		}
		b = append(b, boolByte(w.probe))
	}
	return b, nil
}

// UnmarshalBinary restores a state from MarshalBinary.
func (e *Evidence) UnmarshalBinary(b []byte) error {
	bad := fmt.Errorf("%w: evidence state", hparam.ErrDecode)
	k, used := binary.Uvarint(b)
	if used <= 0 || k > uint64(len(b))/evidenceWindowLen || len(b)-used != int(k)*evidenceWindowLen {
		return bad
	}
	wins := make([]evidenceWindow, k)
	for i := range wins {
		r := b[used+i*evidenceWindowLen:]
		f := func(j int) float64 { return math.Float64frombits(binary.LittleEndian.Uint64(r[8*j:])) }
		n := binary.LittleEndian.Uint64(r[48:])
		if n < 2 || n > math.MaxInt32 || r[evidenceWindowLen-1] > 1 {
			return bad
		}
		wins[i] = evidenceWindow{s: [6]float64{f(0), f(1), f(2), f(3), f(4), f(5)}, n: int(n),
			lo: f(7), hi: f(8), level: f(9), probe: r[evidenceWindowLen-1] == 1}
	}
	e.wins = wins
	return nil
}

// unmarshalV5 restores a version-5 state, whose windows were pooled as
// they came: one window of their sums, at no known level.
func (e *Evidence) unmarshalV5(b []byte) error {
	if len(b) != evidenceV5Len || b[evidenceV5Len-1] > 1 {
		return fmt.Errorf("%w: evidence state: want %d bytes", hparam.ErrDecode, evidenceV5Len)
	}
	f := func(i int) float64 { return math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:])) }
	readings, windows := binary.LittleEndian.Uint64(b[48:]), binary.LittleEndian.Uint64(b[56:])
	if readings > math.MaxInt32 || windows > readings {
		return fmt.Errorf("%w: evidence state: %d readings in %d windows", hparam.ErrDecode, readings, windows)
	}
	e.wins = nil
	if windows > 0 {
		// One record of the sums, its readings less the other windows'
		// intercepts, so the fit keeps its degrees of freedom.
		e.wins = []evidenceWindow{{s: [6]float64{f(0), f(1), f(2), f(3), f(4), f(5)}, n: int(readings - windows + 1),
			lo: f(8), hi: f(9), probe: b[evidenceV5Len-1] == 1}}
	}
	return nil
}
