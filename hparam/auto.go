package hparam

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Decay is how the auto phase pulls the base down when there is no signal.
type Decay string

const (
	// DecayFloor chooses the per-window decay gamma so that, with equal
	// losses, the base reaches the schedule's final value at the last window.
	DecayFloor Decay = "floor"
	// DecayNone is gamma = 0.
	DecayNone Decay = "none"
)

// AutoConfig holds the meta-update's constants (DESIGN §1, "Auto phase").
// Field names in errors are those of the explorer config ("auto.sigma").
type AutoConfig struct {
	Sigma     float64 // softmax temperature, in loss units; > 0
	SigmaMode SigmaMode
	Beta      float64 // velocity momentum, in [0, 1)
	Lambda    float64 // step size applied to the velocity, >= 0
	Decay     Decay
	// LogSpace takes hbar and htilde as geometric means (exp of the mean of
	// log h). A geometric spread is symmetric in log h, not in h: its
	// arithmetic mean lies above the base (by 37% at alpha = 2, N = 4), so
	// with arithmetic means the base would climb window after window with
	// no signal at all. The built-in explorers set it for geometric spreads.
	LogSpace bool
}

// SigmaMode says what sigma is measured in.
type SigmaMode string

const (
	// SigmaAbsolute is the paper's: sigma in loss units.
	SigmaAbsolute SigmaMode = "absolute"
	// SigmaRelative multiplies sigma by the standard deviation of the
	// window's healthy losses, so the same sigma means the same sharpness
	// whether losses are near 3.0 or near 0.05.
	SigmaRelative SigmaMode = "relative"
)

// DefaultAutoConfig returns the paper's constants: sigma 0.1, beta 0.9,
// lambda 0.5, with decay floor.
func DefaultAutoConfig() AutoConfig {
	return AutoConfig{Sigma: 0.1, SigmaMode: SigmaAbsolute, Beta: 0.9, Lambda: 0.5, Decay: DecayFloor}
}

// Validate checks the ranges of every field.
func (c AutoConfig) Validate() error {
	if math.IsNaN(c.Sigma) || math.IsInf(c.Sigma, 0) || c.Sigma <= 0 {
		return fieldErr("auto.sigma", "must be a finite number > 0, got %v", c.Sigma)
	}
	if c.SigmaMode != SigmaAbsolute && c.SigmaMode != SigmaRelative {
		return fieldErr("auto.sigma_mode", "must be %q or %q, got %q", SigmaAbsolute, SigmaRelative, c.SigmaMode)
	}
	if math.IsNaN(c.Beta) || c.Beta < 0 || c.Beta >= 1 {
		return fieldErr("auto.beta", "must be in [0, 1), got %v", c.Beta)
	}
	if math.IsNaN(c.Lambda) || math.IsInf(c.Lambda, 0) || c.Lambda < 0 {
		return fieldErr("auto.lambda", "must be a finite number >= 0, got %v", c.Lambda)
	}
	if c.Decay != DecayFloor && c.Decay != DecayNone {
		return fieldErr("auto.decay", "must be %q or %q, got %q", DecayFloor, DecayNone, c.Decay)
	}
	return nil
}

// Auto is the meta-update's state for one hyperparameter: the base, the
// velocity v and the decay gamma fixed at the first update.
type Auto struct {
	cfg    AutoConfig
	bounds Bounds
	final  float64 // the decay floor's target, the schedule's final value

	Base     float64
	Velocity float64
	Gamma    float64
	Updates  int // meta-updates applied so far
}

// NewAuto returns a meta-update with no updates applied. final is the
// value decay floor aims at; it must be > 0 for DecayFloor.
func NewAuto(cfg AutoConfig, bounds Bounds, final float64) (*Auto, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := bounds.Validate(); err != nil {
		return nil, err
	}
	if cfg.Decay == DecayFloor && !(final > 0 && !math.IsInf(final, 0)) {
		return nil, fieldErr("auto.decay", "floor needs the schedule's final value to be a positive number, got %v (use decay none)", final)
	}
	return &Auto{cfg: cfg, bounds: bounds, final: final}, nil
}

// SoftmaxWeights returns w = softmax((Lbar - L)/sigma) over the healthy
// (finite) losses; unhealthy ranks get 0, and with no healthy rank every
// weight is 0. Softmax is invariant to shifting the scores, so it is
// computed as exp((Lmin - L_r)/sigma): every exponent is <= 0 and the best
// rank's is exactly 0, so nothing overflows and the sum is >= 1, whatever
// the scores (±1e6 and beyond).
func SoftmaxWeights(losses []float64, sigma float64, w []float64) []float64 {
	if cap(w) < len(losses) {
		w = make([]float64, 0, len(losses))
	}
	w = w[:0]
	lmin := math.Inf(1)
	for _, l := range losses {
		if healthy(l) && l < lmin {
			lmin = l
		}
	}
	var sum float64
	for _, l := range losses {
		var e float64
		if healthy(l) {
			e = math.Exp((lmin - l) / sigma)
		}
		w = append(w, e)
		sum += e
	}
	if sum > 0 {
		for i := range w {
			w[i] /= sum
		}
	}
	return w
}

func healthy(loss float64) bool { return !math.IsNaN(loss) && !math.IsInf(loss, 0) }

// Update applies one meta-update (DESIGN §1 steps 2-5) from the value each
// rank used at the window's last step and its mean window loss (NaN or Inf
// for an unhealthy rank). windowsLeft is the number of windows that will
// run with the new base; the first update fixes gamma from it
// (gamma = 1 - (final/hbar)^(1/K)), and when it is 0 no decay is applied.
// weights is reused for the returned weights when it has the capacity.
func (a *Auto) Update(values, losses []float64, windowsLeft int, weights []float64) (Feedback, error) {
	n := len(values)
	if n == 0 || len(losses) != n {
		return Feedback{}, fmt.Errorf("%w: %d values and %d losses, want the same positive number", ErrInvalid, n, len(losses))
	}
	logSpace := a.cfg.LogSpace
	for r, h := range values {
		if !healthy(h) {
			return Feedback{}, fmt.Errorf("%w: rank %d used value %v", ErrInvalid, r, h)
		}
		logSpace = logSpace && h > 0 // a value clamped to 0 has no logarithm
	}
	// f maps values to the space the means are taken in, inv back.
	f, inv := func(h float64) float64 { return h }, func(x float64) float64 { return x }
	if logSpace {
		f, inv = math.Log, math.Exp
	}
	var sumH float64
	for _, h := range values {
		sumH += f(h)
	}
	hbar := inv(sumH / float64(n)) // over all ranks, healthy or not
	w := SoftmaxWeights(losses, a.sigma(losses), weights)
	var htilde, wsum float64
	for r, wr := range w {
		htilde += float64(wr * f(values[r]))
		wsum += wr
	}
	delta := 0.0
	if wsum > 0 { // no healthy rank: no signal
		delta = inv(htilde) - hbar
	}
	if a.Updates == 0 && a.cfg.Decay == DecayFloor && windowsLeft > 0 {
		if hbar <= 0 {
			return Feedback{}, fmt.Errorf("%w: decay floor needs a positive base, the mean value is %v", ErrInvalid, hbar)
		}
		a.Gamma = 1 - math.Pow(a.final/hbar, 1/float64(windowsLeft))
	}
	gamma := a.Gamma
	if windowsLeft <= 0 {
		gamma = 0
	}
	a.Velocity = float64(a.cfg.Beta*a.Velocity) + float64((1-a.cfg.Beta)*delta)
	a.Base = a.bounds.Clamp(float64(hbar*(1-gamma)) + float64(a.cfg.Lambda*a.Velocity))
	a.Updates++
	return Feedback{Weights: w, Base: a.Base}, nil
}

// sigma is the softmax temperature for this window's losses.
func (a *Auto) sigma(losses []float64) float64 {
	if a.cfg.SigmaMode != SigmaRelative {
		return a.cfg.Sigma
	}
	var sum, sq float64
	k := 0
	for _, l := range losses {
		if healthy(l) {
			sum += l
			k++
		}
	}
	if k < 2 {
		return a.cfg.Sigma
	}
	mean := sum / float64(k)
	for _, l := range losses {
		if healthy(l) {
			sq += (l - mean) * (l - mean)
		}
	}
	if sd := math.Sqrt(sq / float64(k)); sd > 0 {
		return a.cfg.Sigma * sd
	}
	return a.cfg.Sigma // equal losses: any temperature gives equal weights
}

// autoStateLen is the size of Auto's binary state: version, three float64s, updates.
const autoStateLen = 1 + 3*8 + 8

const autoStateVersion = 1

// MarshalBinary encodes the state (base, velocity, gamma, updates) bit-exactly.
func (a *Auto) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, autoStateLen)
	b = append(b, autoStateVersion)
	for _, f := range []float64{a.Base, a.Velocity, a.Gamma} {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
	}
	return binary.LittleEndian.AppendUint64(b, uint64(a.Updates)), nil
}

// UnmarshalBinary restores a state from MarshalBinary; the configuration
// stays that of NewAuto.
func (a *Auto) UnmarshalBinary(b []byte) error {
	if len(b) != autoStateLen || b[0] != autoStateVersion {
		return fmt.Errorf("%w: auto state: want %d bytes of version %d", ErrDecode, autoStateLen, autoStateVersion)
	}
	f := func(i int) float64 { return math.Float64frombits(binary.LittleEndian.Uint64(b[1+8*i:])) }
	updates := binary.LittleEndian.Uint64(b[25:])
	if updates > math.MaxInt32 {
		return fmt.Errorf("%w: auto state: %d updates", ErrDecode, updates)
	}
	a.Base, a.Velocity, a.Gamma, a.Updates = f(0), f(1), f(2), int(updates)
	return nil
}
