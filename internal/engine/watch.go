package engine

// Watch is told when this rank enters each phase of the window loop, so a
// watchdog can tell where a rank stopped progressing; *watchdog.Watchdog
// implements it.
type Watch interface {
	Enter(window, step int, phase string)
}

// The window loop's phases, in the order a window goes through them.
const (
	PhasePlan       = "plan"
	PhaseRestart    = "restart" // the commit: the step-0 state restored for the main pass
	PhaseTrain      = "train"
	PhaseGather     = "gather"
	PhaseRollback   = "rollback"
	PhaseConverge   = "converge"
	PhaseEvaluate   = "evaluate"
	PhaseObserve    = "observe"
	PhaseCheckpoint = "checkpoint"
)

type nopWatch struct{}

func (nopWatch) Enter(int, int, string) {}

func watchOrNop(w Watch) Watch {
	if w == nil {
		return nopWatch{}
	}
	return w
}
