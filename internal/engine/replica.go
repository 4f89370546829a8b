package engine

import "context"

// Values gives the hyperparameter values a replica applies at each step of a
// window: Values[name][i] is the value of hyperparameter name at the window's
// i-th step. Hyperparameters not explored are absent; the replica then uses
// its configured value.
type Values map[string][]float64

// GradReducer averages a gradient buffer in place across ranks. In `gradients`
// sync mode the engine hands one to the replica, which calls it once per step
// on its flat gradient buffer; in `local` mode it is nil.
type GradReducer interface {
	AllreduceMean(grad []float32) error
}

// Window is what a replica trains: Steps steps from global step Start with
// the values V (len(V[name]) == Steps), gradients averaged through Grads
// (nil in `local` mode).
type Window struct {
	Start, Steps int
	V            Values
	Grads        GradReducer
	// ProbeTail > 0 asks for the probe signal (docs/design.md §1.1): the
	// replica averages its parameter iterates over the window's last
	// ProbeTail steps and reports, in WindowResult.Probe, the eval-mode loss
	// of that average on the run's fixed probe examples. The average is a
	// scratch buffer: the parameters that go on to converge are the last
	// iterate, untouched.
	ProbeTail int
	// Search: the window is in a search pass that the run expects to
	// restart (plan.Plan.Search), so a worker script's replicas may share
	// their batches.
	Search bool
}

// WindowResult is what a replica reports after training one window.
type WindowResult struct {
	Losses []float64 // training loss of each step
	Probe  float64   // the probe loss; NaN when ProbeTail was 0 or the replica cannot probe
	// ProbeSeconds is the part of TrainWindow the probe took (the tail
	// average and its evaluation), for the window record; 0 when the
	// window did not probe or the replica does not time it.
	ProbeSeconds float64
	// Handover is where a worker's hand-over of the window and the one
	// before it went (seconds by phase, docs/performance.md); nil for
	// replicas without one.
	Handover map[string]float64
	// Level is the replica's own learning rate at the window's last step
	// (a worker script's, before hdet's multiplier; hparam.Observation's
	// Level); 0 for a replica whose rate is the plan's.
	Level float64
}

// Replica is one rank's copy of the model. The built-in MNIST workload and the
// bridge to an external training process both implement it.
type Replica interface {
	// Hyperparameters lists the names the replica accepts ("lr", "lr/hidden", "dropout", ...).
	Hyperparameters() []string
	// SyncBuffer is the replica's own flat buffer that converge all-reduces in
	// place: the parameters, followed by the optimizer state when withOptimizer
	// is true (`local` mode). It must stay valid across windows.
	SyncBuffer(withOptimizer bool) []float32
	// ParamCount is the number of parameters at the start of SyncBuffer.
	ParamCount() int
	// TrainWindow trains one window.
	TrainWindow(ctx context.Context, w Window) (WindowResult, error)
	// CanProbe reports whether TrainWindow can answer ProbeTail (a worker
	// script that gave no probe function cannot).
	CanProbe() bool
	// Evaluate returns the test loss and accuracy of the current parameters.
	Evaluate(ctx context.Context) (loss, accuracy float64, err error)
}

// What only some replicas can do is a small interface of its own, which the
// engine and the session look for with As (docs/design.md §2).

// PeakLR is a replica whose learning rates are multipliers of its script's
// own (a worker script's): PeakLR is the highest rate the script set itself
// so far, from which the commit record gives the peak rate a committed
// multiplier implies.
type PeakLR interface{ PeakLR() float64 }

// Unrestorable is a replica with training state that hdet's checkpoints do
// not hold (a worker script's data position and random streams): the engine
// does not roll it back to a checkpoint, and a relaunch of its run starts
// the run over rather than resume it.
type Unrestorable interface{ Unrestorable() }

// Wrapper is a replica that wraps another (the fault suite's injector);
// As looks through it.
type Wrapper interface{ Unwrap() Replica }

// As finds the optional interface T in r, or in the replica r wraps.
func As[T any](r Replica) (T, bool) {
	for r != nil {
		if t, ok := r.(T); ok {
			return t, true
		}
		w, ok := r.(Wrapper)
		if !ok {
			break
		}
		r = w.Unwrap()
	}
	var none T
	return none, false
}
