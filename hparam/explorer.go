package hparam

import (
	"context"
	"fmt"
)

// SpreadKind names how a base value fans out over the N replicas (docs/design.md §1).
type SpreadKind string

const (
	// Multiplicative is the paper's spread: base * rho_j, mean of rho exactly 1.
	Multiplicative SpreadKind = "multiplicative"
	// Additive is base + alpha*(j-(N-1)/2)/d, for values such as dropout in [0,1).
	Additive SpreadKind = "additive"
	// Geometric is base * (1+alpha)^((j-(N-1)/2)/d), for searches over orders of magnitude.
	Geometric SpreadKind = "geometric"
)

// Spread is a spread kind with its width alpha.
type Spread struct {
	Kind  SpreadKind
	Alpha float64
}

// Bounds are the closed interval a hyperparameter's values are clamped to.
type Bounds struct {
	Lower, Upper float64
}

// Scale tells plots and reports how to draw a hyperparameter's values.
type Scale string

const (
	Linear Scale = "linear"
	Log    Scale = "log"
)

// Descriptor is what an explorer says about itself.
type Descriptor struct {
	Name           string // explorer name, e.g. "lr"
	Version        string
	Hyperparameter string // the hyperparameter it drives by default, e.g. "lr"
	Scale          Scale
	Bounds         Bounds
	Spread         Spread // default spread
	// ExampleConfig is a config block (JSON) that Init accepts, so that
	// `hdet plugins check` can try the explorer without one; nil when
	// "{}" will do.
	ExampleConfig []byte
}

// Setup initialises an explorer for one run.
type Setup struct {
	Name        string // instance name, the key the workload receives ("lr", "lr/hidden")
	Config      []byte // the explorer's config block as JSON ("{}" when empty)
	Ranks       int    // N
	TotalSteps  int    // S
	WindowSteps int    // T
	Seed        uint64
	// Probe: the workload can evaluate the probe signal (docs/design.md
	// §1.1), so a WindowPlan that asks for it gets Observation.Probe.
	Probe bool
}

// MaxWindowSteps is the longest window a run may have (Setup.WindowSteps),
// a bound that keeps a plan decoder from allocating without limit.
const MaxWindowSteps = 1 << 20

// Validate checks the run's shape: at least one rank and one step, and a
// window of 1 to MaxWindowSteps steps.
func (s Setup) Validate() error {
	if s.Ranks < 1 || s.TotalSteps < 1 || s.WindowSteps < 1 || s.WindowSteps > MaxWindowSteps {
		return fmt.Errorf("%w: setup: ranks %d, total steps %d, window steps %d; want ranks >= 1, total steps >= 1, 1 <= window steps <= %d",
			ErrInvalid, s.Ranks, s.TotalSteps, s.WindowSteps, MaxWindowSteps)
	}
	return nil
}

// WindowRequest asks for the plan of window Window, covering steps [Start, Start+Steps).
type WindowRequest struct {
	Window int
	Start  int
	Steps  int
}

// WindowPlan is an explorer's answer for one window: its base value at each
// step of the window, and the spread and bounds that turn it into per-rank values.
type WindowPlan struct {
	Base   []float64
	Spread Spread
	Bounds Bounds
	// Probe asks the ranks to evaluate their tail-averaged parameters on
	// the probe examples at the end of this window (Observation.Probe).
	Probe bool
	// SearchAtEnd is the search state the explorer expects to report at
	// the run's last window boundary, as far as it can tell now:
	// SearchDone when its search pass ends before the last window
	// (auto.commit restart, auto.until short of it), Searching when it
	// would still be searching, SearchNone when it asks for no search
	// pass. The controller expects a main pass when some live explorer
	// expects SearchDone and none Searching; a worker script's replicas
	// then share their batches in the search pass (docs/pytorch.md).
	// Zero (SearchNone) claims nothing.
	SearchAtEnd SearchState
}

// Observation is what the replicas did in a window: the value each rank used
// at the window's last step and each rank's mean window loss (NaN or Inf for
// an unhealthy rank).
type Observation struct {
	Window int
	Values []float64
	Losses []float64
	// Probe is each rank's probe loss (the loss of the average of its
	// parameter iterates over the window's last T/2 steps on the run's
	// fixed probe examples); nil when the window did not probe, NaN or Inf
	// for an unhealthy rank.
	Probe []float64
	// Level is the run's learning rate at the window's last step before
	// any spread: a worker script's own rate, in whatever schedule it
	// follows. 0 where the workload has no rate of its own (a config run:
	// the lr explorer's schedule is the rate). Readings taken far below
	// the search's highest level, in a warm-up's first part, say little
	// about the rate the run trains at (docs/design.md §1.2).
	Level float64
}

// Feedback is an explorer's answer to an Observation: the softmax weights it
// gave each rank (empty before its auto phase) and its base value for the next window.
type Feedback struct {
	Weights []float64
	Base    float64
	// Estimate is x*, the estimated best offset from the window's centre in
	// the hyperparameter's scale (log or linear), and Offset the learned
	// offset u after this update (docs/design.md §1.1); both 0 outside
	// the auto phase.
	Estimate float64
	Offset   float64
	// Search says whether the explorer asks for a search pass (auto.commit
	// restart) and whether its search is over. Once some explorer's search
	// is done and none is still searching, the controller commits every
	// explorer and starts the main pass.
	Search SearchState
}

// SearchState is an explorer's part in the run's search pass (docs/design.md
// §1.2).
type SearchState int

const (
	// SearchNone: the explorer asks for no restart (it continues, or has
	// nothing to search); it commits when the others do.
	SearchNone SearchState = iota
	// Searching: its value is still moving; the search pass goes on.
	Searching
	// SearchDone: its value has settled; commit it and restart.
	SearchDone
)

// Commitment is an explorer's answer to Commit: the value it settled on,
// which the main pass trains at.
type Commitment struct {
	// Offset is the committed offset u in the hyperparameter's scale (0
	// for an explorer that learns none).
	Offset float64
	// Value is what a user would write in a config to train at the
	// committed value: the base at the schedule's peak (OneCycle's max_lr
	// times exp(u)) or the constant.
	Value float64
	// Note says, for the closing line, why the explorer kept the config's
	// value where its search pointed elsewhere ("kept: the training loss
	// could not tell x0.5 to x1.5 apart ..."); empty when it did not.
	Note string
}

// Explorer drives one hyperparameter. Built-in explorers implement it in
// process; plugins implement it over gRPC (package plugins). Plan may be
// asked for the same window more than once before its Observe (the
// controller plans window 0 at setup to check it, a restart replays a
// plan) and must answer the same.
//
// A run with a search pass calls Commit once the explorers'
// Feedback.Search says the search is over: from then on Plan is asked for the main
// pass's windows, from window 0 again, in order but without Observe, and
// must answer the committed base (the controller drops the spread and the
// probe of main-pass plans itself).
type Explorer interface {
	Describe(ctx context.Context) (Descriptor, error)
	Init(ctx context.Context, s Setup) error
	Plan(ctx context.Context, r WindowRequest) (WindowPlan, error)
	Observe(ctx context.Context, o Observation) (Feedback, error)
	Commit(ctx context.Context) (Commitment, error)
	SaveState(ctx context.Context) ([]byte, error)
	LoadState(ctx context.Context, state []byte) error
}
