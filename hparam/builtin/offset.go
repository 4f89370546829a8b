package builtin

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/hdet-dev/hdet/hparam"
)

// Offset is the revision-2 meta-update's state for one hyperparameter
// (docs/design.md §1.1): the learned offset u in the hyperparameter's
// scale, the velocity v, and held, set when the warm-up guard holds the
// next window's base where the schedule's rise would have taken it.
type Offset struct {
	cfg AutoConfig

	u, v    float64
	held    bool
	updates int // meta-updates applied so far

	// Polyak averaging (docs/design.md §6.1): u after each of the
	// meta-updates from number avgFrom on (as Step leaves it, before the
	// warm-up guard's hold) is summed, and Settle replaces u with their
	// mean once the updates end. avgFrom comes from the configuration;
	// sum and count are state.
	avgFrom int
	sum     float64
	count   int

	// Scratch for Estimate, reused every window (at N = 16384 allocating
	// it afresh was a sixth of the controller's cost): the healthy ranks'
	// offsets and losses when some rank is not, and the softmax
	// estimator's masked losses.
	xs, ls, masked []float64
}

// NewOffset returns an offset-form meta-update with u = 0.
func NewOffset(cfg AutoConfig) (*Offset, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Offset{cfg: cfg}, nil
}

// U is the learned offset u.
func (o *Offset) U() float64 { return o.u }

// Combine is s (+) u in scale sc: s*exp(u) on a log scale, s+u on a linear one.
func Combine(sc hparam.Scale, s, u float64) float64 {
	if sc == hparam.Log {
		return s * math.Exp(u)
	}
	return s + u
}

// toScale maps a value into scale space: log h on a log scale (NaN for
// h <= 0, which has no offset), h on a linear one.
func toScale(sc hparam.Scale, h float64) float64 {
	if sc == hparam.Log {
		return logOrNaN(h)
	}
	return h
}

// logOrNaN is log h, NaN for h <= 0.
func logOrNaN(h float64) float64 {
	if h <= 0 {
		return math.NaN()
	}
	return math.Log(h)
}

// offsetsTo sets x[r] to toScale(sc, values[r]) - c. It tests the scale
// once: per rank, the comparison of its name kept toScale from inlining
// and cost a fifth as much as the logarithm.
func offsetsTo(x, values []float64, sc hparam.Scale, c float64) {
	x = x[:len(values)]
	if sc != hparam.Log {
		for r, v := range values {
			x[r] = v - c
		}
		return
	}
	for r, v := range values {
		x[r] = logOrNaN(v) - c
	}
}

// Estimate returns x*, the best offset from the window's centre that the
// losses point at, from each rank's offset x_r (NaN where it has none) and
// loss (NaN or Inf for an unhealthy rank), and the softmax weights when the
// estimator is softmax (nil otherwise). No healthy rank, flat losses or a
// zero spread give 0: no signal leaves the offset where it is.
func (o *Offset) Estimate(x, losses []float64) (float64, []float64) {
	if o.cfg.Estimator == EstimatorSoftmax {
		return o.softmaxEstimate(x, losses)
	}
	// Most windows every rank is healthy: the fit's first pass over all of
	// them checks that, and only otherwise is the pass taken again over
	// the healthy ranks, copied out.
	xs, ls := x[:len(losses)], losses
	f := fitMeans(xs, ls)
	if !f.healthy {
		xs, ls = o.healthyPairs(x, losses)
		f = fitMeans(xs, ls)
	}
	if f.span == 0 || flat(ls) {
		return 0, nil
	}
	return f.vertex(xs, ls, o.cfg.Clip*f.span), nil
}

// Best returns the offset of the rank with the lowest healthy loss, 0 when
// no rank is healthy: the bracket window's range test, whose replicas span
// too wide a range for a quadratic to fit.
func (o *Offset) Best(x, losses []float64) float64 {
	xs, ls := o.healthyPairs(x, losses)
	if len(xs) == 0 {
		return 0
	}
	return xs[fitMeans(xs, ls).best]
}

// softmaxEstimate is Estimate with the softmax estimator.
func (o *Offset) softmaxEstimate(x, losses []float64) (float64, []float64) {
	masked := grow(o.masked, len(losses))
	o.masked = masked
	for r, l := range losses {
		masked[r] = l
		if !healthy(x[r]) {
			masked[r] = math.NaN()
		}
	}
	w := SoftmaxWeights(masked, sigmaFor(o.cfg, masked), nil)
	var est float64
	for r, wr := range w {
		if wr > 0 {
			est += wr * x[r]
		}
	}
	return est, w
}

// healthyPairs returns the offsets and losses of the ranks where both are
// finite, in rank order, in o's scratch.
func (o *Offset) healthyPairs(x, losses []float64) (xs, ls []float64) {
	xs, ls = o.xs[:0], o.ls[:0]
	for r, l := range losses {
		if healthy(l) && healthy(x[r]) {
			xs, ls = append(xs, x[r]), append(ls, l)
		}
	}
	o.xs, o.ls = xs, ls
	return xs, ls
}

// halfWidth is the largest |x| over the finite offsets x.
func halfWidth(x []float64) float64 {
	span := 0.0
	for _, v := range x {
		if healthy(v) {
			span = wider(span, v)
		}
	}
	return span
}

// wider is max(span, |x|) for a finite x and span >= 0, as a plain
// comparison: the builtin max's NaN and signed-zero handling cost more
// than the rest of a per-rank loop, and neither case arises here.
func wider(span, x float64) float64 {
	if a := math.Abs(x); a > span {
		return a
	}
	return span
}

// flat reports whether every loss equals the first.
func flat(ls []float64) bool {
	for _, l := range ls {
		if l != ls[0] {
			return false
		}
	}
	return true
}

// QuadraticVertex fits L = a + b x + c x^2 by least squares and returns the
// vertex -b/(2c) clipped to [-clip, clip] when c > 0; otherwise (a concave
// or straight fit, or fewer than three distinct x) the x of the lowest loss.
// xs and ls are the healthy ranks' offsets and losses, at least one.
func QuadraticVertex(xs, ls []float64, clip float64) float64 {
	return fitMeans(xs, ls).vertex(xs, ls, clip)
}

// quadFit is the first pass of QuadraticVertex's fit: the means it centres
// x and L on (so the normal equations are well conditioned) and the point
// of lowest loss; and, for Estimate, the largest |x| and whether every
// point was finite, which spares it passes of its own.
type quadFit struct {
	mx, ml, span float64
	best         int
	healthy      bool
}

func fitMeans(xs, ls []float64) quadFit {
	if len(xs) == 0 {
		return quadFit{healthy: true}
	}
	ls = ls[:len(xs)]
	n := float64(len(xs))
	best, lbest := 0, ls[0]
	var mx, ml, span float64
	ok := true
	for i, l := range ls {
		x := xs[i]
		if l < lbest {
			best, lbest = i, l
		}
		mx += x / n
		ml += l / n
		span = wider(span, x)
		ok = ok && healthy(l) && healthy(x)
	}
	return quadFit{mx: mx, ml: ml, span: span, best: best, healthy: ok}
}

// vertex is the rest of QuadraticVertex: the centred sums, the solve and the clip.
func (f quadFit) vertex(xs, ls []float64, clip float64) float64 {
	ls = ls[:len(xs)]
	n, mx, ml := float64(len(xs)), f.mx, f.ml
	var s2, s3, s4, sy, sxy, sx2y float64
	for i, x := range xs {
		d, y := x-mx, ls[i]-ml
		d2 := d * d
		d3 := d2 * d
		s2 += d2
		s3 += d3
		s4 += d3 * d
		sy += y
		sxy += d * y
		sx2y += d2 * y
	}
	// With centred d, sum d = 0: solve [[n,0,s2],[0,s2,s3],[s2,s3,s4]] (a,b,c) = (sy,sxy,sx2y).
	det := n*(s2*s4-s3*s3) - s2*s2*s2
	if len(xs) < 3 || !(math.Abs(det) > 1e-12*n*s4*s2) {
		return max(-clip, min(clip, xs[f.best]))
	}
	b := (n*(sxy*s4-s3*sx2y) + sy*s3*s2 - s2*s2*sxy) / det
	c := (n*(s2*sx2y-s3*sxy) - s2*(s2*sy)) / det
	if !(c > 0) {
		return max(-clip, min(clip, xs[f.best]))
	}
	return max(-clip, min(clip, mx-b/(2*c)))
}

// Step applies the update v <- beta*v + (1-beta)*x*, u <- u + lambda*v,
// and adds u to the average when the update is one of those averaged.
func (o *Offset) Step(est float64) {
	o.v = float64(o.cfg.Beta*o.v) + float64((1-o.cfg.Beta)*est)
	o.u += float64(o.cfg.Lambda * o.v)
	if o.updates >= o.avgFrom {
		o.sum += o.u
		o.count++
	}
	o.updates++
}

// AverageOver sets the updates averaged to the second half of the total
// meta-updates the run makes (all of them when there is one).
func (o *Offset) AverageOver(total int) { o.avgFrom = total / 2 }

// Settle ends the learning: u becomes the mean of the averaged updates'
// u, once (the sum is cleared, so a later call or a resume keeps it). It
// reports whether it set u, which the caller then clamps to the bounds.
func (o *Offset) Settle() bool {
	if o.count == 0 {
		return false
	}
	o.u = o.sum / float64(o.count)
	o.sum, o.count = 0, 0
	return true
}

// offsetStateLen is the size of Offset's binary state: u, v, flags,
// updates, the average's sum and count.
const offsetStateLen = 2*8 + 1 + 8 + 8 + 8

// MarshalBinary encodes the state bit-exactly; the version is the explorer state's.
func (o *Offset) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, offsetStateLen)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(o.u))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(o.v))
	var flags byte
	if o.held {
		flags = 1
	}
	b = append(b, flags)
	b = binary.LittleEndian.AppendUint64(b, uint64(o.updates))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(o.sum))
	return binary.LittleEndian.AppendUint64(b, uint64(o.count)), nil
}

// UnmarshalBinary restores a state from MarshalBinary.
func (o *Offset) UnmarshalBinary(b []byte) error {
	if len(b) != offsetStateLen || b[16] > 1 {
		return fmt.Errorf("%w: offset state: want %d bytes", hparam.ErrDecode, offsetStateLen)
	}
	updates, count := binary.LittleEndian.Uint64(b[17:]), binary.LittleEndian.Uint64(b[33:])
	if updates > math.MaxInt32 || count > updates {
		return fmt.Errorf("%w: offset state: %d updates, %d averaged", hparam.ErrDecode, updates, count)
	}
	o.u = math.Float64frombits(binary.LittleEndian.Uint64(b))
	o.v = math.Float64frombits(binary.LittleEndian.Uint64(b[8:]))
	o.held, o.updates = b[16] == 1, int(updates)
	o.sum, o.count = math.Float64frombits(binary.LittleEndian.Uint64(b[25:])), int(count)
	return nil
}

// grow returns s resized to n elements, reusing its array when it has the
// capacity (the contents are to be overwritten).
func grow(s []float64, n int) []float64 {
	if cap(s) < n {
		return make([]float64, n)
	}
	return s[:n]
}
