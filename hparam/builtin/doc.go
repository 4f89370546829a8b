// Package builtin is hdet's built-in explorers (NewExplorer: LR, Dropout,
// WeightDecay), each an hparam.Explorer that runs in process or behind
// sdk.ServeBuiltin: its config block (Config, with SpreadSpec, BoundsSpec
// and AutoSpec; a schedule.Spec for the base schedule), the window
// bookkeeping, the search pass and the commit (docs/design.md §1), and the
// meta-update that moves the base between windows (docs/design.md §1.1):
// the learned offset (Offset, the default) and the paper's absolute
// update (Auto), with their pieces (AutoConfig, Combine, QuadraticVertex,
// SoftmaxWeights, Narrowing).
//
// It keeps package hparam's promises: pure Go with no I/O; the same
// results, bit for bit, for the same inputs; saved states that later
// versions still read; errors that wrap one of hparam's sentinel errors,
// a *hparam.FieldError naming the config field ("auto.sigma") for
// anything a user typed.
package builtin
