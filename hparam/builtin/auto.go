package builtin

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/hdet-dev/hdet/hparam"
)

// Form is the meta-update's form (docs/design.md §1.1).
type Form string

const (
	// FormOffset: the base is the schedule combined with a
	// learned offset u in the hyperparameter's scale.
	FormOffset Form = "offset"
	// FormPaper is the paper's absolute update, kept for
	// comparison: the base is learned in the hyperparameter's units and
	// held constant over each window.
	FormPaper Form = "paper"
)

// Signal is what the controller compares the replicas by.
type Signal string

const (
	// SignalProbe compares each rank's tail-averaged parameters on the
	// run's probe examples; where the workload cannot evaluate them, the
	// training losses stand in (the controller says so once).
	SignalProbe Signal = "probe"
	// SignalTrain is the paper's: each rank's mean training loss over the window.
	SignalTrain Signal = "train"
)

// Estimator turns the ranks' losses into x*, the estimated best offset.
type Estimator string

const (
	// EstimatorQuadratic fits L = a + b x + c x^2 by least squares and
	// takes the vertex (clipped), the best rank's x when the fit is not
	// convex, 0 when the losses are flat.
	EstimatorQuadratic Estimator = "quadratic"
	// EstimatorSoftmax is the paper's: the softmax((Lbar - L)/sigma)-weighted mean of x.
	EstimatorSoftmax Estimator = "softmax"
)

// AutoConfig holds the meta-update's constants (docs/design.md §1.1).
// Field names in errors are those of the explorer config ("auto.sigma").
type AutoConfig struct {
	Form      Form
	Signal    Signal
	Estimator Estimator
	Clip      float64 // quadratic: |x*| <= Clip * max|x_r|; > 0
	Sigma     float64 // softmax temperature, in loss units; > 0
	SigmaMode SigmaMode
	Beta      float64 // velocity momentum, in [0, 1)
	Lambda    float64 // step size applied to the velocity, >= 0
	// Until is the fraction of the run after which the offset stops
	// moving (offset form), in (0, 1]: with Commit restart, the search
	// pass's length.
	Until float64
	// Commit says whether the offset form's run restarts at the committed
	// value after a search pass (restart) or carries on (continue); the
	// paper form only continues.
	Commit CommitMode
	// Guard is the warm-up guard's threshold (offset form) as a fraction
	// of the spread's half-width in scale space: while the schedule rises,
	// v <= -Guard*max|x_r| holds the next window's base; 0 turns it off.
	// The default is small: any clear "lower" reading holds (docs/design.md §6.1).
	Guard float64
	// Bracket (offset form, auto.commit restart, a log-scale hyperparameter
	// with a multiplicative or geometric spread) widens the search's first
	// window into a range test across the replicas: they span base/Bracket
	// to base*Bracket geometrically, and the first update moves to the best
	// of them. 1 (the default) turns it off (docs/design.md §1.1, step 5).
	Bracket float64
	// LogSpace (paper form) takes hbar and htilde as geometric means (exp
	// of the mean of log h); the built-in explorers set it for geometric
	// spreads (docs/design.md §6.6).
	LogSpace bool
}

// CommitMode says what the run does with what the search found (docs/design.md
// §1.2, the search and main passes).
type CommitMode string

const (
	// CommitRestart: a search pass up to Until, then every explorer
	// commits its value, the step-0 state is restored, and the main pass
	// trains the whole schedule at the committed values with no spread.
	CommitRestart CommitMode = "restart"
	// CommitContinue: one pass, the spread narrowing once
	// the offset stops learning.
	CommitContinue CommitMode = "continue"
)

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

// trainGuard is the offset form's default auto.guard where the replicas are
// compared by their training losses (signal train, or no probe).
const trainGuard = 0.5

// DefaultAutoConfig returns the defaults of a form. Offset: probe signal, quadratic estimator clipped at 1.5, beta 0, lambda
// 1, updates over the whole run, a search pass then a restart. Paper: the paper's constants, sigma 0.1,
// beta 0.9, lambda 0.5, softmax on the training loss.
func DefaultAutoConfig(form Form) AutoConfig {
	if form == FormPaper {
		return AutoConfig{Form: FormPaper, Signal: SignalTrain, Estimator: EstimatorSoftmax, Clip: 1.5,
			Sigma: 0.1, SigmaMode: SigmaAbsolute, Beta: 0.9, Lambda: 0.5, Until: 1, Bracket: 1, Commit: CommitContinue}
	}
	return AutoConfig{Form: FormOffset, Signal: SignalProbe, Estimator: EstimatorQuadratic, Clip: 1.5,
		Sigma: 0.1, SigmaMode: SigmaAbsolute, Beta: 0, Lambda: 1, Until: 1, Guard: 0.01, Bracket: 1, Commit: CommitRestart}
}

func oneOf[T ~string](field string, v T, allowed ...T) error {
	for _, a := range allowed {
		if v == a {
			return nil
		}
	}
	return hparam.FieldErrorf(field, "must be one of %v, got %q", allowed, v)
}

// Validate checks the ranges of every field.
func (c AutoConfig) Validate() error {
	if err := oneOf("auto.form", c.Form, FormOffset, FormPaper); err != nil {
		return err
	}
	if err := oneOf("auto.signal", c.Signal, SignalProbe, SignalTrain); err != nil {
		return err
	}
	if err := oneOf("auto.estimator", c.Estimator, EstimatorQuadratic, EstimatorSoftmax); err != nil {
		return err
	}
	if c.Form == FormPaper && c.Estimator != EstimatorSoftmax {
		return hparam.FieldErrorf("auto.estimator", "form paper takes the softmax estimator only, got %q", c.Estimator)
	}
	if math.IsNaN(c.Clip) || math.IsInf(c.Clip, 0) || c.Clip <= 0 {
		return hparam.FieldErrorf("auto.clip", "must be a finite number > 0, got %v", c.Clip)
	}
	if math.IsNaN(c.Sigma) || math.IsInf(c.Sigma, 0) || c.Sigma <= 0 {
		return hparam.FieldErrorf("auto.sigma", "must be a finite number > 0, got %v", c.Sigma)
	}
	if err := oneOf("auto.sigma_mode", c.SigmaMode, SigmaAbsolute, SigmaRelative); err != nil {
		return err
	}
	if math.IsNaN(c.Beta) || c.Beta < 0 || c.Beta >= 1 {
		return hparam.FieldErrorf("auto.beta", "must be in [0, 1), got %v", c.Beta)
	}
	if math.IsNaN(c.Lambda) || math.IsInf(c.Lambda, 0) || c.Lambda < 0 {
		return hparam.FieldErrorf("auto.lambda", "must be a finite number >= 0, got %v", c.Lambda)
	}
	if math.IsNaN(c.Guard) || math.IsInf(c.Guard, 0) || c.Guard < 0 {
		return hparam.FieldErrorf("auto.guard", "must be a finite number >= 0 (0: no warm-up guard), got %v", c.Guard)
	}
	if math.IsNaN(c.Bracket) || math.IsInf(c.Bracket, 0) || c.Bracket < 1 {
		return hparam.FieldErrorf("auto.bracket", "must be a finite number >= 1 (1: no bracket window), got %v", c.Bracket)
	}
	if c.Bracket != 1 && (c.Form != FormOffset || c.Commit != CommitRestart) {
		return hparam.FieldErrorf("auto.bracket", "takes form offset with commit restart (the bracket window's replicas train far apart, and only a restart leaves that out of the model), got %v", c.Bracket)
	}
	if math.IsNaN(c.Until) || c.Until <= 0 || c.Until > 1 {
		return hparam.FieldErrorf("auto.until", "must be a fraction of the run in (0, 1], got %v", c.Until)
	}
	if err := oneOf("auto.commit", c.Commit, CommitRestart, CommitContinue); err != nil {
		return err
	}
	if c.Form == FormPaper && c.Commit != CommitContinue {
		return hparam.FieldErrorf("auto.commit", "form paper only continues (its absolute base has no offset to commit), got %q", c.Commit)
	}
	return nil
}

// Auto is the paper form's state for one hyperparameter: the base and the
// velocity v.
type Auto struct {
	cfg    AutoConfig
	bounds hparam.Bounds

	Base     float64
	Velocity float64
	Updates  int // meta-updates applied so far
}

// NewAuto returns a paper-form meta-update with no updates applied.
func NewAuto(cfg AutoConfig, bounds hparam.Bounds) (*Auto, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := bounds.Validate(); err != nil {
		return nil, err
	}
	return &Auto{cfg: cfg, bounds: bounds}, nil
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

// healthy reports whether v is finite: one comparison, false for NaN and
// both infinities (the controller asks it of every rank several times a window).
func healthy(v float64) bool { return math.Abs(v) <= math.MaxFloat64 }

// Update applies one paper-form meta-update (b <- hbar + lambda*v on
// Delta = htilde - hbar) from the value each rank used at the window's last
// step and its loss (NaN or Inf for an unhealthy rank). weights is reused
// for the returned weights when it has the capacity.
func (a *Auto) Update(values, losses []float64, weights []float64) (hparam.Feedback, error) {
	n := len(values)
	if n == 0 || len(losses) != n {
		return hparam.Feedback{}, fmt.Errorf("%w: %d values and %d losses, want the same positive number", hparam.ErrInvalid, n, len(losses))
	}
	logSpace := a.cfg.LogSpace
	for r, h := range values {
		if !healthy(h) {
			return hparam.Feedback{}, fmt.Errorf("%w: rank %d used value %v", hparam.ErrInvalid, r, h)
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
	w := SoftmaxWeights(losses, sigmaFor(a.cfg, losses), weights)
	var htilde, wsum float64
	for r, wr := range w {
		htilde += float64(wr * f(values[r]))
		wsum += wr
	}
	delta := 0.0
	if wsum > 0 { // no healthy rank: no signal
		delta = inv(htilde) - hbar
	}
	a.Velocity = float64(a.cfg.Beta*a.Velocity) + float64((1-a.cfg.Beta)*delta)
	a.Base = a.bounds.Clamp(hbar + float64(a.cfg.Lambda*a.Velocity))
	a.Updates++
	return hparam.Feedback{Weights: w, Base: a.Base}, nil
}

// sigmaFor is the softmax temperature for this window's losses.
func sigmaFor(cfg AutoConfig, losses []float64) float64 {
	if cfg.SigmaMode != SigmaRelative {
		return cfg.Sigma
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
		return cfg.Sigma
	}
	mean := sum / float64(k)
	for _, l := range losses {
		if healthy(l) {
			sq += (l - mean) * (l - mean)
		}
	}
	if sd := math.Sqrt(sq / float64(k)); sd > 0 {
		return cfg.Sigma * sd
	}
	return cfg.Sigma // equal losses: any temperature gives equal weights
}

// autoStateLen is the size of Auto's binary state: two float64s, updates.
const autoStateLen = 3 * 8

// MarshalBinary encodes the state (base, velocity, updates) bit-exactly;
// the version is the explorer state's.
func (a *Auto) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, autoStateLen)
	for _, f := range []float64{a.Base, a.Velocity} {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
	}
	return binary.LittleEndian.AppendUint64(b, uint64(a.Updates)), nil
}

// UnmarshalBinary restores a state from MarshalBinary; the configuration
// stays that of NewAuto.
func (a *Auto) UnmarshalBinary(b []byte) error {
	if len(b) != autoStateLen {
		return fmt.Errorf("%w: auto state: want %d bytes, got %d", hparam.ErrDecode, autoStateLen, len(b))
	}
	f := func(i int) float64 { return math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:])) }
	updates := binary.LittleEndian.Uint64(b[16:])
	if updates > math.MaxInt32 {
		return fmt.Errorf("%w: auto state: %d updates", hparam.ErrDecode, updates)
	}
	a.Base, a.Velocity, a.Updates = f(0), f(1), int(updates)
	return nil
}
