// Package schedule holds base schedules: a hyperparameter's value at each
// step of a run before any explorer moves it (docs/design.md §1, "Base
// schedule"). OneCycle is PyTorch's OneCycleLR to the bit, with Cos, the
// correctly rounded cosine it anneals with; the warm-up schedules (linear
// warm-up, then cosine or linear decay), step decay and constants complete
// it. Spec describes one by kind and parameters, as a config block or
// `hdet schedule`'s command line writes it.
//
// Like package hparam it is pure Go with no I/O, and gives the same values,
// bit for bit, for the same inputs. A parameter out of range is a
// *hparam.FieldError (an hparam.ErrInvalid) naming it; a step outside the
// schedule is an ErrStepRange.
package schedule
