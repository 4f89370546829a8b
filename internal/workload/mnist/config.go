// Package mnist is hdet's built-in workload: a multilayer perceptron that
// classifies MNIST digits, one engine.Replica per rank.
//
// The network is Dim → Hidden[0] → … → Classes with ReLU and inverted dropout
// after every hidden layer and softmax cross-entropy (optionally label
// smoothed) at the output, in float32, trained with AdamW or SGD with
// momentum. Parameters and then optimizer state live in one contiguous slab,
// which is what the engine all-reduces (SyncBuffer).
package mnist

import (
	"errors"
	"fmt"
	"math"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/internal/config"
)

// Hyperparameter names accepted in engine.Values.
const (
	HLR             = "lr"        // learning rate of every layer
	HLRHidden       = "lr/hidden" // learning rate of the hidden layers; overrides "lr" there
	HLROutput       = "lr/output" // learning rate of the output layer; overrides "lr" there
	HDropout        = "dropout"
	HWeightDecay    = "weight_decay"
	HLabelSmoothing = "label_smoothing"
	HMomentum       = "momentum" // SGD momentum, or AdamW's beta1
)

// Optimizer names.
const (
	AdamW = "adamw"
	SGD   = "sgd"
)

// ErrInvalidConfig is wrapped by every *ConfigError.
var ErrInvalidConfig = errors.New("invalid mnist workload configuration")

// ConfigError names the Config field (snake_case, as in hdet's YAML) that is
// wrong and what is allowed.
type ConfigError struct {
	Field string
	Msg   string
}

func (e *ConfigError) Error() string { return e.Field + ": " + e.Msg }
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// Config describes one replica. Start from DefaultConfig and set Data, Rank
// and WorldSize.
type Config struct {
	// Workload is the config's workload: section as it is (Kind and the
	// folder Data are the Factory's): Hidden (the hidden layer widths),
	// BatchSize (examples per rank per step), Optimizer (AdamW or SGD),
	// and the defaults of the hyperparameters, used for any name absent
	// from the engine.Values of a window: LR (every layer's), Momentum
	// (SGD momentum or AdamW beta1), WeightDecay (AdamW: decoupled; SGD:
	// L2 added to the gradient; weights only, not biases), Dropout (the
	// probability of zeroing a hidden unit in training), LabelSmoothing,
	// and AdamW's Beta2 and Eps. DefaultConfig has config.Default's.
	config.Workload

	// ProbeExamples is the size of the probe set (docs/design.md §1.1):
	// that many training examples, drawn by Seed, capped at the training
	// set's size; default 1024; 0: the replica cannot probe.
	ProbeExamples int

	Seed      uint64 // init (the same on every rank), data order and dropout masks derive from it; default 1
	Rank      int    // this replica's rank, in [0, WorldSize); default 0
	WorldSize int    // number of replicas sharing each epoch; default 1

	// Data is the data set, loaded (it hides Workload.Data, the folder it
	// came from); required; Data.Test may be nil, and then Evaluate fails.
	Data *Data
}

// DefaultConfig returns the defaults listed on Config's fields, with no data.
func DefaultConfig() Config {
	return Config{
		Workload:      config.Default().Workload,
		ProbeExamples: 1024,
		Seed:          1,
		Rank:          0,
		WorldSize:     1,
	}
}

func cfgErr(field, format string, a ...any) error {
	return &ConfigError{Field: field, Msg: fmt.Sprintf(format, a...)}
}

func (c *Config) validate() error {
	if len(c.Hidden) == 0 {
		return cfgErr("hidden", "needs at least one hidden layer width")
	}
	for i, h := range c.Hidden {
		if h < 1 {
			return cfgErr(fmt.Sprintf("hidden[%d]", i), "%d, must be >= 1", h)
		}
	}
	if c.BatchSize < 1 {
		return cfgErr("batch_size", "%d, must be >= 1", c.BatchSize)
	}
	if c.Optimizer != AdamW && c.Optimizer != SGD {
		return cfgErr("optimizer", "%q, allowed: %q, %q", c.Optimizer, AdamW, SGD)
	}
	for _, h := range []struct {
		name string
		v    float64
	}{
		{HLR, c.LR}, {HMomentum, c.Momentum}, {HWeightDecay, c.WeightDecay},
		{HDropout, c.Dropout}, {HLabelSmoothing, c.LabelSmoothing},
	} {
		if err := checkValue(h.name, h.v); err != nil {
			return cfgErr(h.name, "%v", err)
		}
	}
	if !(c.Beta2 >= 0 && c.Beta2 < 1) {
		return cfgErr("beta2", "%g, must be in [0, 1)", c.Beta2)
	}
	if !(c.Eps > 0) || math.IsInf(c.Eps, 0) {
		return cfgErr("eps", "%g, must be > 0 and finite", c.Eps)
	}
	if c.ProbeExamples < 0 {
		return cfgErr("probe_examples", "%d, must be >= 0 (0: no probe)", c.ProbeExamples)
	}
	if c.WorldSize < 1 {
		return cfgErr("world_size", "%d, must be >= 1", c.WorldSize)
	}
	if c.Rank < 0 || c.Rank >= c.WorldSize {
		return cfgErr("rank", "%d, must be in [0, %d)", c.Rank, c.WorldSize)
	}
	if c.Data == nil || c.Data.Train == nil {
		return cfgErr("data", "no training set")
	}
	if err := c.Data.Train.validate("train"); err != nil {
		return cfgErr("data", "%v", err)
	}
	if t := c.Data.Test; t != nil {
		if err := t.validate("test"); err != nil {
			return cfgErr("data", "%v", err)
		}
		if t.Dim != c.Data.Train.Dim || t.Classes != c.Data.Train.Classes {
			return cfgErr("data", "test set is %d-dimensional with %d classes, training set %d and %d",
				t.Dim, t.Classes, c.Data.Train.Dim, c.Data.Train.Classes)
		}
	}
	if shard := c.Data.Train.N / c.WorldSize; shard < c.BatchSize {
		return cfgErr("batch_size", "%d, larger than this rank's shard of the training set (%d examples / %d ranks = %d)",
			c.BatchSize, c.Data.Train.N, c.WorldSize, shard)
	}
	return nil
}

// ErrInvalidValue marks a hyperparameter value out of its range.
var ErrInvalidValue = errors.New("hyperparameter value out of range")

// checkValue checks one hyperparameter value against the range it admits
// (hparam.Builtins); a learning rate may also be 0, where a schedule ends.
func checkValue(name string, v float64) error {
	r := hparam.Admissible(name)
	if hparam.IsLR(name) {
		r = r.Closure()
	}
	if !r.Contains(v) { // never NaN
		return fmt.Errorf("%w: %s = %g, must be %s", ErrInvalidValue, name, v, r.Describe())
	}
	return nil
}
