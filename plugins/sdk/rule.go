package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/hdet-dev/hdet/hparam"
)

// Rule is the small way to write an explorer: a base value that is constant
// over each window and that an update rule moves after each window. The base
// is the whole state; FromRule saves, restores and clamps it.
type Rule interface {
	// Describe says what the rule drives; Bounds and Spread apply to every window.
	Describe() hparam.Descriptor
	// Start reads the setup (s.Config is the rule's JSON config block) and
	// returns the first base value. Its error is a refusal of the config
	// (hparam.ErrInvalid: hdet exits 2, without restarting the explorer).
	Start(s hparam.Setup) (base float64, err error)
	// Update returns the base for the next window from the current one and
	// what the replicas did, and optionally per-rank weights for the record.
	Update(base float64, o hparam.Observation) (next float64, weights []float64, err error)
}

// FromRule makes a Rule a full hparam.Explorer.
func FromRule(r Rule) hparam.Explorer { return &ruleExplorer{rule: r} }

type ruleExplorer struct {
	rule Rule
	mu   sync.Mutex
	base float64
	init bool
}

type ruleState struct {
	Base float64 `json:"base"`
}

func (x *ruleExplorer) Describe(context.Context) (hparam.Descriptor, error) {
	return x.rule.Describe(), nil
}

func (x *ruleExplorer) Init(_ context.Context, s hparam.Setup) error {
	b, err := x.rule.Start(s)
	if err != nil {
		if errors.Is(err, hparam.ErrInvalid) {
			return err
		}
		return fmt.Errorf("%w: config: %w", hparam.ErrInvalid, err)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.base, x.init = x.clamp(b), true
	return nil
}

func (x *ruleExplorer) Plan(_ context.Context, r hparam.WindowRequest) (hparam.WindowPlan, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if !x.init {
		return hparam.WindowPlan{}, fmt.Errorf("plan before init")
	}
	base := make([]float64, r.Steps)
	for i := range base {
		base[i] = x.base
	}
	d := x.rule.Describe()
	return hparam.WindowPlan{Base: base, Spread: d.Spread, Bounds: d.Bounds}, nil
}

func (x *ruleExplorer) Observe(_ context.Context, o hparam.Observation) (hparam.Feedback, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if !x.init {
		return hparam.Feedback{}, fmt.Errorf("observe before init")
	}
	next, w, err := x.rule.Update(x.base, o)
	if err != nil {
		return hparam.Feedback{}, err
	}
	if math.IsNaN(next) || math.IsInf(next, 0) {
		return hparam.Feedback{}, fmt.Errorf("rule gave base %v for window %d", next, o.Window+1)
	}
	x.base = x.clamp(next)
	return hparam.Feedback{Weights: w, Base: x.base}, nil
}

// Commit keeps the rule's current base for the main pass: the rule asks
// for no search pass of its own (SearchNone), but commits when others do.
func (x *ruleExplorer) Commit(context.Context) (hparam.Commitment, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if !x.init {
		return hparam.Commitment{}, fmt.Errorf("commit before init")
	}
	return hparam.Commitment{Value: x.base}, nil
}

func (x *ruleExplorer) SaveState(context.Context) ([]byte, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return json.Marshal(ruleState{Base: x.base})
}

func (x *ruleExplorer) LoadState(_ context.Context, b []byte) error {
	var st ruleState
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("load state: %w", err)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.base, x.init = x.clamp(st.Base), true
	return nil
}

func (x *ruleExplorer) clamp(v float64) float64 {
	b := x.rule.Describe().Bounds
	return math.Min(math.Max(v, b.Lower), b.Upper)
}
