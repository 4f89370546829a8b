package controller

import (
	"fmt"

	"github.com/hdet-dev/hdet/hparam"
)

// Event kinds.
const (
	EventFrozen  = "frozen"  // the explorer failed; its hyperparameter is frozen
	EventClamped = "clamped" // its plan left what the hyperparameter admits and was clamped (admit.go)
)

// Event reports that an explorer failed during window Window's call Op and
// was frozen: hyperparameter Param keeps base Base with spread Spread (and
// its bounds) for the rest of the run. Kind EventClamped reports a plan
// clamped into what the hyperparameter admits instead (Err says how).
type Event struct {
	Kind   string // EventFrozen or EventClamped
	Window int
	Param  string
	Op     string // the failed call: "plan", "observe", "save_state", "load_state"
	Err    error
	Base   float64
	Spread hparam.Spread
}

func (e Event) String() string {
	if e.Kind == EventClamped {
		return fmt.Sprintf("window %d: explorer %q: %v", e.Window, e.Param, e.Err)
	}
	return fmt.Sprintf("window %d: explorer %q: %s failed: %v; frozen at %g with spread %s for the rest of the run",
		e.Window, e.Param, e.Op, e.Err, e.Base, e.Spread)
}

// ParamCommit is one hyperparameter's committed value, for metrics and the
// report. A frozen explorer commits its frozen base.
type ParamCommit struct {
	Name string
	hparam.Commitment
	Frozen bool
}

// ParamFeedback is one hyperparameter's answer to a window, for metrics.
type ParamFeedback struct {
	Name string
	hparam.Feedback
	Frozen bool
}
