// Package config loads and validates hdet's YAML run configuration: strict
// (unknown keys and wrong types are errors naming the key's full path),
// with defaults for every field and `--set key=value` overrides.
package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/hdet-dev/hdet/hparam"
)

// Config is a whole run configuration. docs/configuration.md lists every field
// with its default; docs/configuration.md explains each.
type Config struct {
	Workload  Workload   `yaml:"workload"`
	Train     Train      `yaml:"train"`
	Explorers []Explorer `yaml:"explorers"`
	Run       Run        `yaml:"run"`
}

// Workload is the model being trained and its fixed hyperparameters (the
// values used when no explorer drives them).
type Workload struct {
	Kind           string  `yaml:"kind"`
	Data           string  `yaml:"data"`
	Hidden         []int   `yaml:"hidden"`
	BatchSize      int     `yaml:"batch_size"`
	Optimizer      string  `yaml:"optimizer"`
	LR             float64 `yaml:"lr"`
	Momentum       float64 `yaml:"momentum"`
	Beta2          float64 `yaml:"beta2"`
	Eps            float64 `yaml:"eps"`
	WeightDecay    float64 `yaml:"weight_decay"`
	Dropout        float64 `yaml:"dropout"`
	LabelSmoothing float64 `yaml:"label_smoothing"`
}

// Train is the HDET protocol's shape.
type Train struct {
	Steps     int     `yaml:"steps"`
	Epochs    int     `yaml:"epochs"`
	Sync      string  `yaml:"sync"`
	Window    int     `yaml:"window"`
	Seed      uint64  `yaml:"seed"`
	EvalEvery int     `yaml:"eval_every"`
	WarmStart string  `yaml:"warm_start"`
	WarmNoise float64 `yaml:"warm_noise"`
	// ProbeExamples is the size of the probe set the probe signal is
	// evaluated on (training examples drawn by Seed, the same on every rank);
	// 0: the workload cannot probe, as a PyTorch script without a probe.
	ProbeExamples int `yaml:"probe_examples"`
	// Watchdog aborts the job when a rank's phase or collective lasts this
	// long (a stuck or stopped rank); 0 disables it.
	Watchdog Duration `yaml:"watchdog"`
	// DivergenceFactor: a finite window loss above this multiple of the
	// healthy ranks' median (a probe loss above its square root) makes
	// the rank unhealthy, and a median above this multiple of the
	// previous window's makes every rank unhealthy; 0 disables both.
	DivergenceFactor float64 `yaml:"divergence_factor"`
	// MaxRollbacks bounds the rollbacks to the last checkpoint (learning
	// rates halved each time) after a window where every rank is unhealthy.
	MaxRollbacks int `yaml:"max_rollbacks"`
	// ReplicaSize is G, the ranks of one replica (a replica group): W ranks
	// train N = W/G replicas, each an ordinary data-parallel group inside.
	ReplicaSize int `yaml:"replica_size"`
}

// Explorer is one explored hyperparameter, driven by an explorer plugin.
type Explorer struct {
	Name    string         `yaml:"name"`
	Plugin  string         `yaml:"plugin"`
	SHA256  string         `yaml:"sha256"`
	Timeout Duration       `yaml:"timeout"`
	Config  map[string]any `yaml:"config,omitempty"`
	// Override: in a worker run, this entry's schedule replaces the
	// script's where they differ (logged), instead of being an error.
	Override bool `yaml:"override,omitempty"`
}

// Run is where the run's files go and how often it checkpoints.
type Run struct {
	Dir               string  `yaml:"dir"`
	CheckpointEvery   int     `yaml:"checkpoint_every"`
	CheckpointMinutes float64 `yaml:"checkpoint_minutes"`
	Keep              int     `yaml:"keep"`
	Progress          string  `yaml:"progress"`
	// CheckpointMaxFailing stops the run when no checkpoint could be
	// written for this long; failures before that only warn. 0: never stop.
	CheckpointMaxFailing Duration `yaml:"checkpoint_max_failing"`
}

// Duration is a time.Duration written as "30s" in YAML.
type Duration time.Duration

func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// Default returns the configuration every file is laid over.
func Default() Config {
	return Config{
		Workload: Workload{
			Kind: "mnist", Data: "data/mnist", Hidden: []int{256, 256}, BatchSize: 64,
			Optimizer: "adamw", LR: 1e-3, Momentum: 0.9, Beta2: 0.999, Eps: 1e-8,
			WeightDecay: 0.01, Dropout: 0.1,
		},
		Train: Train{Sync: "local", Window: 50, Seed: 1, WarmNoise: 0.01, ProbeExamples: 1024,
			Watchdog: Duration(30 * time.Minute), DivergenceFactor: 10, MaxRollbacks: 3, ReplicaSize: 1},
		Run: Run{Dir: "runs/hdet", CheckpointEvery: 10, Keep: 3, Progress: "auto",
			CheckpointMaxFailing: Duration(30 * time.Minute)},
	}
}

// maxProbeExamples bounds train.probe_examples: the MNIST training set's size.
const maxProbeExamples = 60000

// DefaultExplorerTimeout bounds every call to an explorer plugin.
const DefaultExplorerTimeout = 30 * time.Second

// Load parses YAML data over the defaults, applies --set overrides
// ("train.window=50", "explorers.lr.config.spread.alpha=0.2") and validates.
func Load(data []byte, sets []string) (*Config, error) {
	return load(data, sets, Default(), false)
}

// LoadWorker loads the configuration of a `--worker` run (data may be
// empty: no file). The script says the run's length and sync mode, and may
// say its window, so train.steps, train.sync and train.window default to
// unset (0, "" and 0) and only need to agree with the script when given;
// the session sets the window (the script's, else 50).
func LoadWorker(data []byte, sets []string) (*Config, error) {
	c := Default()
	c.Train.Sync, c.Train.Window = "", 0
	return load(data, sets, c, true)
}

func load(data []byte, sets []string, c Config, worker bool) (*Config, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("%w: YAML: %v", ErrInvalid, err)
	}
	if root.Kind == 0 {
		root = yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{{Kind: yaml.MappingNode, Tag: "!!map"}}}
	}
	for _, s := range sets {
		k, v, ok := strings.Cut(s, "=")
		if !ok {
			return nil, fmt.Errorf("%w: --set %q: want key=value", ErrInvalid, short(s))
		}
		if err := setPath(&root, strings.TrimSpace(k), v); err != nil {
			return nil, err
		}
	}
	lines := map[string]int{}
	if err := decodeStrict(&root, &c, lines); err != nil {
		return nil, err
	}
	for i := range c.Explorers {
		if c.Explorers[i].Timeout == 0 {
			c.Explorers[i].Timeout = Duration(DefaultExplorerTimeout)
		}
	}
	if err := c.validate(worker); err != nil {
		var fe *FieldError
		if errors.As(err, &fe) && fe.Line < 0 {
			if line, ok := lines[fe.Path]; ok {
				fe.Line = line
			}
		}
		return nil, err
	}
	return &c, nil
}

var (
	nameRE   = regexp.MustCompile(`^[a-z][a-z0-9_]*(/[a-z0-9_]+)?$`)
	sha256RE = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// Upper bounds of the config's sizes, counts and durations (docs/configuration.md): far beyond a real run, and small enough that nothing
// computed from them overflows or exhausts the machine.
const (
	MaxLayers     = 64
	MaxWidth      = 1 << 16 // workload.hidden[i]
	MaxBatch      = 1 << 16
	MaxSteps      = 1 << 40 // train.steps, and train.epochs times the steps per epoch
	MaxEpochs     = 1 << 20
	MaxWindow     = hparam.MaxWindowSteps
	MaxCount      = 1 << 30 // eval_every, checkpoint_every (windows)
	MaxRollbacks  = 1000
	MaxReplica    = 1 << 16 // train.replica_size (ranks per replica)
	MaxKeep       = 1000
	MaxExplorers  = 64
	MaxPath       = 4096 // bytes in a path
	MaxDuration   = Duration(7 * 24 * time.Hour)
	MaxMinutes    = 7 * 24 * 60 // run.checkpoint_minutes
	MaxExplorerTO = Duration(time.Hour)
)

// check is one range check of Validate.
type check struct {
	bad         bool
	path, allow string
	got         any
}

// Validate checks every range; the error names the field and what is allowed.
func (c *Config) Validate() error { return c.validate(false) }

// validate checks a worker run's configuration when worker is set: its
// length and sync mode may be left to the script.
func (c *Config) validate(worker bool) error {
	for _, checks := range [][]check{c.Workload.checks(), c.Train.checks(worker), c.Run.checks()} {
		for _, ch := range checks {
			if ch.bad {
				return invalid(ch.path, "got %s, want %s", short(fmt.Sprint(ch.got)), ch.allow)
			}
		}
	}
	if len(c.Workload.Hidden) > MaxLayers {
		return invalid("workload.hidden", "got %d layers, want at most %d", len(c.Workload.Hidden), MaxLayers)
	}
	for i, h := range c.Workload.Hidden {
		if h < 1 || h > MaxWidth {
			return invalid(fmt.Sprintf("workload.hidden[%d]", i), "got %d, want an integer in [1, %d]", h, MaxWidth)
		}
	}
	return c.validateExplorers()
}

func finite(v float64) bool { return !math.IsInf(v, 0) && !math.IsNaN(v) }

// admits checks the workload's value v of the built-in hyperparameter
// name against what it admits (hparam.Builtins).
func admits(name string, v float64) check {
	r := hparam.Admissible(name)
	return check{!r.Contains(v), "workload." + name, r.Describe(), v}
}

func inRange(v, lo, hi int) bool { return v >= lo && v <= hi }

func (w Workload) checks() []check {
	return []check{
		{w.Data == "" || len(w.Data) > MaxPath, "workload.data", "a folder holding the MNIST idx files", w.Data},
		{len(w.Hidden) == 0, "workload.hidden", "a non-empty list of layer widths", w.Hidden},
		{!inRange(w.BatchSize, 1, MaxBatch), "workload.batch_size", fmt.Sprintf("an integer in [1, %d]", MaxBatch), w.BatchSize},
		{!slices.Contains([]string{"adamw", "sgd"}, w.Optimizer), "workload.optimizer", "adamw or sgd", w.Optimizer},
		admits("lr", w.LR), admits("momentum", w.Momentum),
		{!(w.Beta2 > 0 && w.Beta2 < 1), "workload.beta2", "a number in (0, 1)", w.Beta2},
		admits("eps", w.Eps), admits("weight_decay", w.WeightDecay), admits("dropout", w.Dropout),
		admits("label_smoothing", w.LabelSmoothing),
	}
}

func (t Train) checks(worker bool) []check {
	return []check{
		{!inRange(t.Steps, 0, MaxSteps), "train.steps", fmt.Sprintf("an integer in [1, %d] (or 0 with train.epochs set)", MaxSteps), t.Steps},
		{!inRange(t.Epochs, 0, MaxEpochs), "train.epochs", fmt.Sprintf("an integer in [1, %d] (or 0 with train.steps set)", MaxEpochs), t.Epochs},
		{t.Steps == 0 && t.Epochs == 0 && !worker, "train.steps", "an integer >= 1, or train.epochs >= 1", t.Steps},
		{t.Steps > 0 && t.Epochs > 0, "train.epochs", "0 when train.steps is set (give one of them)", t.Epochs},
		{!slices.Contains([]string{"local", "gradients"}, t.Sync) && !(worker && t.Sync == ""), "train.sync", "local or gradients", t.Sync},
		{t.Window < 1 && !(worker && t.Window == 0), "train.window", "an integer >= 1 (steps per window, T)", t.Window},
		{t.Window > MaxWindow, "train.window", fmt.Sprintf("at most %d steps per window", MaxWindow), t.Window},
		{t.Steps > 0 && t.Window > t.Steps, "train.window", fmt.Sprintf("at most train.steps (%d)", t.Steps), t.Window},
		{!inRange(t.EvalEvery, 0, MaxCount), "train.eval_every", fmt.Sprintf("an integer in [0, %d] (windows; 0 evaluates at the end only)", MaxCount), t.EvalEvery},
		{len(t.WarmStart) > MaxPath, "train.warm_start", fmt.Sprintf("a model.bin path of at most %d bytes", MaxPath), t.WarmStart},
		{!(t.WarmNoise >= 0) || !finite(t.WarmNoise), "train.warm_noise", "a finite number >= 0", t.WarmNoise},
		{t.ProbeExamples < 0 || t.ProbeExamples > maxProbeExamples, "train.probe_examples", fmt.Sprintf("an integer in [0, %d] (examples; capped at the training set's size; 0: no probe, as a script without one)", maxProbeExamples), t.ProbeExamples},
		{t.Watchdog < 0 || t.Watchdog > MaxDuration, "train.watchdog", fmt.Sprintf("a duration in [0, %v] (0 disables the watchdog)", time.Duration(MaxDuration)), time.Duration(t.Watchdog)},
		{!(t.DivergenceFactor == 0 || t.DivergenceFactor > 1) || !finite(t.DivergenceFactor), "train.divergence_factor", "0 (off) or a finite number > 1", t.DivergenceFactor},
		{!inRange(t.MaxRollbacks, 0, MaxRollbacks), "train.max_rollbacks", fmt.Sprintf("an integer in [0, %d]", MaxRollbacks), t.MaxRollbacks},
		{!inRange(t.ReplicaSize, 1, MaxReplica), "train.replica_size", fmt.Sprintf("an integer in [1, %d] (ranks per replica; the ranks must divide into replicas)", MaxReplica), t.ReplicaSize},
	}
}

func (r Run) checks() []check {
	return []check{
		{r.Dir == "" || len(r.Dir) > MaxPath, "run.dir", fmt.Sprintf("a directory path of at most %d bytes", MaxPath), r.Dir},
		{!inRange(r.CheckpointEvery, 0, MaxCount), "run.checkpoint_every", fmt.Sprintf("an integer in [0, %d] (windows; 0 disables the window cadence)", MaxCount), r.CheckpointEvery},
		{!(r.CheckpointMinutes >= 0 && r.CheckpointMinutes <= MaxMinutes), "run.checkpoint_minutes", fmt.Sprintf("a number in [0, %d] (0 disables the time cadence)", MaxMinutes), r.CheckpointMinutes},
		{!inRange(r.Keep, 1, MaxKeep), "run.keep", fmt.Sprintf("an integer in [1, %d] (checkpoints kept)", MaxKeep), r.Keep},
		{r.CheckpointMaxFailing < 0 || r.CheckpointMaxFailing > MaxDuration, "run.checkpoint_max_failing",
			fmt.Sprintf("a duration in [0, %v] (0: failing checkpoints never stop the run)", time.Duration(MaxDuration)), time.Duration(r.CheckpointMaxFailing)},
		{!slices.Contains([]string{"auto", "plain", "none"}, r.Progress), "run.progress", "auto, plain or none", r.Progress},
	}
}

func (c *Config) validateExplorers() error {
	if len(c.Explorers) > MaxExplorers {
		return invalid("explorers", "got %d explorers, want at most %d", len(c.Explorers), MaxExplorers)
	}
	seen := map[string]bool{}
	for i, e := range c.Explorers {
		p := fmt.Sprintf("explorers[%d]", i)
		switch {
		case !nameRE.MatchString(e.Name) || len(e.Name) > 64:
			return invalid(p+".name", "got %q, want a hyperparameter name (at most 64 characters) such as lr, dropout or lr/hidden", short(e.Name))
		case seen[e.Name]:
			return invalid(p+".name", "%q is explored twice", e.Name)
		case e.Plugin == "" || len(e.Plugin) > MaxPath:
			return invalid(p+".plugin", "want an explorer binary name such as hdet-explorer-lr, or a path of at most %d bytes", MaxPath)
		case e.SHA256 != "" && !sha256RE.MatchString(e.SHA256):
			return invalid(p+".sha256", "got %q, want 64 lowercase hex digits", short(e.SHA256))
		case e.Timeout <= 0 || e.Timeout > MaxExplorerTO:
			return invalid(p+".timeout", "got %v, want a duration in (0, %v]", time.Duration(e.Timeout), time.Duration(MaxExplorerTO))
		}
		seen[e.Name] = true
	}
	return nil
}

// YAML renders the resolved configuration (written to the run directory).
func (c *Config) YAML() ([]byte, error) { return yaml.Marshal(c) }

// Hash identifies the configuration, for checkpoints.
func (c *Config) Hash() (string, error) {
	b, err := c.YAML()
	if err != nil {
		return "", err
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:]), nil
}
