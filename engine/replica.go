// Package engine runs the HDET window loop: plan, fan-out, converge, observe.
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

// WindowResult is what a replica reports after training one window.
type WindowResult struct {
	Losses []float64 // training loss of each step
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
	// TrainWindow trains len(v[...]) == steps steps starting at global step start.
	TrainWindow(ctx context.Context, start, steps int, v Values, grads GradReducer) (WindowResult, error)
	// Evaluate returns the test loss and accuracy of the current parameters.
	Evaluate(ctx context.Context) (loss, accuracy float64, err error)
}
