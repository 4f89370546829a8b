// Package config loads and validates hdet's YAML run configuration: strict
// (unknown keys and wrong types are errors naming the key's full path),
// with defaults for every field and `--set key=value` overrides.
package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Config is a whole run configuration. README.md documents every field.
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
	// evaluated on (training examples drawn by Seed, the same on every rank).
	ProbeExamples int `yaml:"probe_examples"`
	// FaultNaNRank is for tests: that rank's window loss becomes NaN from
	// FaultNaNWindow on. -1 disables it.
	FaultNaNRank   int `yaml:"fault_nan_rank"`
	FaultNaNWindow int `yaml:"fault_nan_window"`
	// Watchdog aborts the job when a rank's phase or collective lasts this
	// long (a stuck or stopped rank); 0 disables it.
	Watchdog Duration `yaml:"watchdog"`
	// DivergenceFactor: a finite window loss above this multiple of the
	// healthy ranks' median makes the rank unhealthy; 0 disables it.
	DivergenceFactor float64 `yaml:"divergence_factor"`
	// MaxRollbacks bounds the rollbacks to the last checkpoint (learning
	// rates halved each time) after a window where every rank is unhealthy.
	MaxRollbacks int `yaml:"max_rollbacks"`
	// Test-only faults (-1 disables each): every rank's loss is NaN in
	// window FaultNaNAllWindow (first pass only); rank FaultStopRank stops
	// itself with SIGSTOP when it starts training window FaultStopWindow;
	// rank FaultDivergeRank's loss is 1000 times larger (still finite) from
	// window FaultDivergeWindow on.
	FaultNaNAllWindow  int `yaml:"fault_nan_all_window"`
	FaultStopRank      int `yaml:"fault_stop_rank"`
	FaultStopWindow    int `yaml:"fault_stop_window"`
	FaultDivergeRank   int `yaml:"fault_diverge_rank"`
	FaultDivergeWindow int `yaml:"fault_diverge_window"`
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
		Train: Train{Sync: "local", Window: 25, Seed: 1, WarmNoise: 0.01, ProbeExamples: 1024, FaultNaNRank: -1,
			Watchdog: Duration(30 * time.Minute), DivergenceFactor: 10, MaxRollbacks: 3,
			FaultNaNAllWindow: -1, FaultStopRank: -1, FaultDivergeRank: -1},
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
// empty: no file). The script says the run's length and sync mode, so
// train.steps and train.sync default to unset (0 and "") and only need to
// agree with the script when given; the window defaults to 50 steps.
func LoadWorker(data []byte, sets []string) (*Config, error) {
	c := Default()
	c.Train.Sync, c.Train.Window = "", 50
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
			return nil, fmt.Errorf("%w: --set %q: want key=value", ErrInvalid, s)
		}
		if err := setPath(&root, strings.TrimSpace(k), v); err != nil {
			return nil, err
		}
	}
	if err := decodeStrict(&root, &c); err != nil {
		return nil, err
	}
	for i := range c.Explorers {
		if c.Explorers[i].Timeout == 0 {
			c.Explorers[i].Timeout = Duration(DefaultExplorerTimeout)
		}
	}
	if err := c.validate(worker); err != nil {
		return nil, err
	}
	return &c, nil
}

var (
	nameRE   = regexp.MustCompile(`^[a-z][a-z0-9_]*(/[a-z0-9_]+)?$`)
	sha256RE = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// Validate checks every range; the error names the field and what is allowed.
func (c *Config) Validate() error { return c.validate(false) }

// validate checks a worker run's configuration when worker is set: its
// length and sync mode may be left to the script.
func (c *Config) validate(worker bool) error {
	w, t, r := c.Workload, c.Train, c.Run
	checks := []struct {
		bad         bool
		path, allow string
		got         any
	}{
		{!slices.Contains([]string{"mnist"}, w.Kind), "workload.kind", "mnist", w.Kind},
		{w.Data == "", "workload.data", "a folder holding the MNIST idx files", w.Data},
		{len(w.Hidden) == 0, "workload.hidden", "a non-empty list of layer widths", w.Hidden},
		{w.BatchSize < 1, "workload.batch_size", "an integer >= 1", w.BatchSize},
		{!slices.Contains([]string{"adamw", "sgd"}, w.Optimizer), "workload.optimizer", "adamw or sgd", w.Optimizer},
		{!(w.LR > 0), "workload.lr", "a number > 0", w.LR},
		{!(w.Momentum >= 0 && w.Momentum < 1), "workload.momentum", "a number in [0, 1)", w.Momentum},
		{!(w.Beta2 > 0 && w.Beta2 < 1), "workload.beta2", "a number in (0, 1)", w.Beta2},
		{!(w.Eps > 0), "workload.eps", "a number > 0", w.Eps},
		{!(w.WeightDecay >= 0), "workload.weight_decay", "a number >= 0", w.WeightDecay},
		{!(w.Dropout >= 0 && w.Dropout < 1), "workload.dropout", "a number in [0, 1)", w.Dropout},
		{!(w.LabelSmoothing >= 0 && w.LabelSmoothing < 1), "workload.label_smoothing", "a number in [0, 1)", w.LabelSmoothing},
		{t.Steps < 0, "train.steps", "an integer >= 1 (or 0 with train.epochs set)", t.Steps},
		{t.Epochs < 0, "train.epochs", "an integer >= 1 (or 0 with train.steps set)", t.Epochs},
		{t.Steps == 0 && t.Epochs == 0 && !worker, "train.steps", "an integer >= 1, or train.epochs >= 1", t.Steps},
		{t.Steps > 0 && t.Epochs > 0, "train.epochs", "0 when train.steps is set (give one of them)", t.Epochs},
		{!slices.Contains([]string{"local", "gradients"}, t.Sync) && !(worker && t.Sync == ""), "train.sync", "local or gradients", t.Sync},
		{t.Window < 1, "train.window", "an integer >= 1 (steps per window, T)", t.Window},
		{t.Steps > 0 && t.Window > t.Steps, "train.window", fmt.Sprintf("at most train.steps (%d)", t.Steps), t.Window},
		{t.EvalEvery < 0, "train.eval_every", "an integer >= 0 (windows; 0 evaluates at the end only)", t.EvalEvery},
		{!(t.WarmNoise >= 0), "train.warm_noise", "a number >= 0", t.WarmNoise},
		{t.ProbeExamples < 1 || t.ProbeExamples > maxProbeExamples, "train.probe_examples", fmt.Sprintf("an integer in [1, %d] (examples; capped at the training set's size)", maxProbeExamples), t.ProbeExamples},
		{t.Watchdog < 0, "train.watchdog", "a duration >= 0 (0 disables the watchdog)", time.Duration(t.Watchdog)},
		{!(t.DivergenceFactor == 0 || t.DivergenceFactor > 1) || math.IsInf(t.DivergenceFactor, 0), "train.divergence_factor", "0 (off) or a finite number > 1", t.DivergenceFactor},
		{t.MaxRollbacks < 0, "train.max_rollbacks", "an integer >= 0", t.MaxRollbacks},
		{r.Dir == "", "run.dir", "a directory path", r.Dir},
		{r.CheckpointEvery < 0, "run.checkpoint_every", "an integer >= 0 (windows; 0 disables the window cadence)", r.CheckpointEvery},
		{!(r.CheckpointMinutes >= 0), "run.checkpoint_minutes", "a number >= 0 (0 disables the time cadence)", r.CheckpointMinutes},
		{r.Keep < 1, "run.keep", "an integer >= 1 (checkpoints kept)", r.Keep},
		{r.CheckpointMaxFailing < 0, "run.checkpoint_max_failing", "a duration >= 0 (0: failing checkpoints never stop the run)", time.Duration(r.CheckpointMaxFailing)},
		{!slices.Contains([]string{"auto", "plain", "none"}, r.Progress), "run.progress", "auto, plain or none", r.Progress},
	}
	for _, ch := range checks {
		if ch.bad {
			return invalid(ch.path, "got %v, want %s", ch.got, ch.allow)
		}
	}
	for i, h := range w.Hidden {
		if h < 1 {
			return invalid(fmt.Sprintf("workload.hidden[%d]", i), "got %d, want an integer >= 1", h)
		}
	}
	seen := map[string]bool{}
	for i, e := range c.Explorers {
		p := fmt.Sprintf("explorers[%d]", i)
		switch {
		case !nameRE.MatchString(e.Name):
			return invalid(p+".name", "got %q, want a hyperparameter name such as lr, dropout or lr/hidden", e.Name)
		case seen[e.Name]:
			return invalid(p+".name", "%q is explored twice", e.Name)
		case e.Plugin == "":
			return invalid(p+".plugin", "want an explorer binary name such as hdet-explorer-lr, or a path")
		case e.SHA256 != "" && !sha256RE.MatchString(e.SHA256):
			return invalid(p+".sha256", "got %q, want 64 lowercase hex digits", e.SHA256)
		case e.Timeout <= 0:
			return invalid(p+".timeout", "got %v, want a positive duration", time.Duration(e.Timeout))
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
