// Package hparam is the contract between hdet and an explorer, what an
// explorer author implements: the Explorer interface and the values that
// cross it (Setup, WindowRequest, WindowPlan, Observation, Feedback,
// Commitment, SearchState, Descriptor); what a plan's spread and bounds
// mean (Spread's Values: the value each replica trains at); what each
// hyperparameter admits (Admissible, AdmitBounds), which hdet checks every
// plan against, from the table of the hyperparameters hdet knows
// (Builtins: their ranges, built-in explorers and where each workload
// applies them); and the errors an explorer returns (ErrInvalid, with a
// FieldError naming the config field, for anything a user typed; ErrOrder;
// ErrDecode).
//
// Its subpackages are for explorers that want them: schedule holds the
// base schedules (OneCycle to the bit of PyTorch's, the warm-up schedules,
// step decay, constants, and Cos, the correctly rounded cosine they anneal
// with); builtin holds hdet's built-in explorers and the meta-update's
// math (NewExplorer, Offset, Auto, QuadraticVertex, SoftmaxWeights).
//
// It promises: pure Go with no I/O and no cgo, so an explorer links it
// into its own process (plugins/sdk); the same results, bit for bit, for
// the same inputs (docs/design.md §1 is the contract); errors that wrap
// one of its sentinel errors, so that hdet can tell a bad configuration
// (exit 2) from anything else. Rank 0's controller, the plan it broadcasts
// and its encoding are hdet's own (internal/controller, internal/plan).
package hparam
