package plugins

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/rs/zerolog"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/plugins/contract"
)

// IsConfigError tells whether err comes from how an explorer was configured
// (a path that is not an executable or not an explorer, a malformed or
// mismatched checksum) rather than from the explorer misbehaving: hdet
// exits 2 on these.
func IsConfigError(err error) bool {
	return errors.Is(err, ErrNotExecutable) || errors.Is(err, ErrNotExplorer) || errors.Is(err, ErrBadChecksum) || errors.Is(err, ErrChecksumMismatch)
}

// Describe starts spec's binary, asks it to describe itself and stops it.
func Describe(ctx context.Context, spec Spec, log zerolog.Logger) (hparam.Descriptor, error) {
	var d hparam.Descriptor
	_, err := check(ctx, spec, log, func(c *checker) error {
		return c.step("describe", func(ctx context.Context) (string, error) {
			var err error
			d, err = c.x.Describe(ctx)
			return "", err
		})
	})
	return d, err
}

// CheckStep is one step of Check.
type CheckStep struct {
	Name   string
	Detail string
	Took   time.Duration
	Err    error
}

// checker runs steps against one explorer process, without restarts: Check
// must see an explorer's faults, not hide them.
type checker struct {
	ctx     context.Context
	x       hparam.Explorer
	timeout time.Duration
	steps   []CheckStep
}

func (c *checker) step(name string, f func(context.Context) (string, error)) error {
	ctx, cancel := context.WithTimeout(c.ctx, c.timeout)
	defer cancel()
	t0 := time.Now()
	detail, err := f(ctx)
	c.steps = append(c.steps, CheckStep{Name: name, Detail: detail, Took: time.Since(t0), Err: err})
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// Check starts spec's binary (the handshake, and the checksum when pinned)
// and runs a dry round against it: Describe, Init with config (nil: the
// explorer's Descriptor.ExampleConfig, else "{}") for 4 ranks, Plan window
// 0, Observe it with made-up losses (one NaN), SaveState and LoadState. It
// returns the steps it ran and the first failure.
func Check(ctx context.Context, spec Spec, config []byte, log zerolog.Logger) ([]CheckStep, error) {
	return check(ctx, spec, log, func(c *checker) error { return dryRound(c, config) })
}

// check starts spec's binary as the "start" step, then runs round.
func check(ctx context.Context, spec Spec, log zerolog.Logger, round func(*checker) error) ([]CheckStep, error) {
	if spec.Timeout <= 0 {
		spec.Timeout = DefaultTimeout
	}
	c := &checker{ctx: ctx, timeout: spec.Timeout}
	var p *process
	err := c.step("start", func(ctx context.Context) (string, error) {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		var err error
		p, err = start(spec, NewHCLogger(log.With().Str("explorer", Name(spec.Binary)).Logger()))
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("pid %d in its own process group, protocol %d, gRPC with mutual TLS", p.pid, contract.Handshake.ProtocolVersion), nil
	})
	if err != nil {
		return c.steps, err
	}
	defer p.kill()
	c.x = p.explorer
	err = round(c)
	return c.steps, err
}

const (
	checkRanks  = 4
	checkSteps  = 10
	checkWindow = 0
)

func dryRound(c *checker, config []byte) error {
	var d hparam.Descriptor
	var plan hparam.WindowPlan
	var state []byte
	steps := []struct {
		name string
		f    func(context.Context) (string, error)
	}{
		{"describe", func(ctx context.Context) (string, error) {
			var err error
			if d, err = c.x.Describe(ctx); err != nil {
				return "", err
			}
			return fmt.Sprintf("%s %s drives %q, %s spread alpha %g, bounds [%g, %g], %s scale",
				d.Name, d.Version, d.Hyperparameter, d.Spread.Kind, d.Spread.Alpha, d.Bounds.Lower, d.Bounds.Upper, d.Scale), validDescriptor(d)
		}},
		{"init", func(ctx context.Context) (string, error) {
			if config == nil {
				config = d.ExampleConfig
			}
			if len(config) == 0 {
				config = []byte("{}")
			}
			return fmt.Sprintf("%d ranks, %d steps, window %d, config %s", checkRanks, 10*checkSteps, checkSteps, config),
				c.x.Init(ctx, hparam.Setup{Name: d.Hyperparameter, Config: config, Ranks: checkRanks, TotalSteps: 10 * checkSteps, WindowSteps: checkSteps, Seed: 1})
		}},
		{"plan", func(ctx context.Context) (string, error) {
			var err error
			if plan, err = c.x.Plan(ctx, hparam.WindowRequest{Window: checkWindow, Start: 0, Steps: checkSteps}); err != nil {
				return "", err
			}
			return fmt.Sprintf("window 0 base %g..%g, %s spread alpha %g", plan.Base[0], plan.Base[len(plan.Base)-1], plan.Spread.Kind, plan.Spread.Alpha), errors.Join(validPlan(plan), hparam.AdmitBounds(d.Hyperparameter, plan.Bounds))
		}},
		{"observe", func(ctx context.Context) (string, error) {
			last := plan.Base[len(plan.Base)-1]
			values := []float64{last * 0.9, last * 0.95, last * 1.05, last * 1.1}
			f, err := c.x.Observe(ctx, hparam.Observation{Window: checkWindow, Values: values, Losses: []float64{1.0, 0.9, 1.1, math.NaN()}})
			if err != nil {
				return "", err
			}
			if math.IsNaN(f.Base) || math.IsInf(f.Base, 0) {
				return "", fmt.Errorf("%w: next base %v", contract.ErrBadAnswer, f.Base)
			}
			return fmt.Sprintf("losses 1, 0.9, 1.1, NaN -> next base %g", f.Base), nil
		}},
		{"save-state", func(ctx context.Context) (string, error) {
			var err error
			state, err = c.x.SaveState(ctx)
			return fmt.Sprintf("%d bytes", len(state)), err
		}},
		{"load-state", func(ctx context.Context) (string, error) { return "", c.x.LoadState(ctx, state) }},
	}
	for _, s := range steps {
		if err := c.step(s.name, s.f); err != nil {
			return err
		}
	}
	return nil
}

func validDescriptor(d hparam.Descriptor) error {
	switch {
	case d.Name == "" || d.Hyperparameter == "":
		return fmt.Errorf("%w: empty name or hyperparameter", contract.ErrBadAnswer)
	case d.Scale != hparam.Linear && d.Scale != hparam.Log:
		return fmt.Errorf("%w: scale %q is not linear or log", contract.ErrBadAnswer, d.Scale)
	}
	if err := validSpreadBounds(d.Spread, d.Bounds); err != nil {
		return err
	}
	return hparam.AdmitBounds(d.Hyperparameter, d.Bounds)
}

func validPlan(p hparam.WindowPlan) error {
	for i, b := range p.Base {
		if math.IsNaN(b) || math.IsInf(b, 0) {
			return fmt.Errorf("%w: base %v at step %d", contract.ErrBadAnswer, b, i)
		}
	}
	return validSpreadBounds(p.Spread, p.Bounds)
}

func validSpreadBounds(s hparam.Spread, b hparam.Bounds) error {
	switch s.Kind {
	case hparam.Multiplicative, hparam.Additive, hparam.Geometric:
	default:
		return fmt.Errorf("%w: spread kind %q", contract.ErrBadAnswer, s.Kind)
	}
	if s.Alpha < 0 || math.IsNaN(s.Alpha) {
		return fmt.Errorf("%w: spread alpha %v", contract.ErrBadAnswer, s.Alpha)
	}
	if !(b.Lower <= b.Upper) {
		return fmt.Errorf("%w: bounds [%v, %v]", contract.ErrBadAnswer, b.Lower, b.Upper)
	}
	return nil
}
