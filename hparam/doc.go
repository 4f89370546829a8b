// Package hparam is what an explorer author needs: the Explorer interface
// and the values that cross it (Setup, WindowRequest, WindowPlan,
// Observation, Feedback, Commitment, SearchState, Descriptor), spreads and
// bounds (Spread, Bounds, what each hyperparameter admits), base schedules
// (OneCycle, the warm-up schedules, step decay, constants; Cos, the
// correctly rounded cosine they anneal with), the meta-update's pieces
// (AutoConfig, Offset, Auto, QuadraticVertex, SoftmaxWeights) and the
// built-in explorers (NewBuiltinExplorer, BuiltinConfig).
//
// It promises: pure Go with no I/O and no cgo, so an explorer links it
// into its own process (plugins/sdk); the same results, bit for bit, for
// the same inputs (docs/design.md §1 is the contract); saved states that
// later versions still read; errors that wrap one of its sentinel errors
// (ErrInvalid, with a FieldError naming the config field, for anything a
// user typed). Rank 0's controller, the plan it broadcasts
// and its encoding are hdet's own (internal/controller, internal/plan).
package hparam
