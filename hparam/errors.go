package hparam

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error this package returns wraps one of them, so
// callers can tell a bad configuration (exit 2) from anything else.
var (
	// ErrInvalid marks a value outside what is allowed: a configuration
	// field, a schedule parameter, an explorer's plan.
	ErrInvalid = errors.New("invalid value")
	// ErrOrder marks calls in the wrong order (observing window 3 before 2,
	// planning an auto-phase window before observing the one before it).
	ErrOrder = errors.New("out of order")
	// ErrDecode marks bytes that are not a valid encoding (a plan, a saved state).
	ErrDecode = errors.New("cannot decode")
)

// FieldError is an ErrInvalid that names the offending field, in the
// spelling of the configuration it came from ("total_steps",
// "schedule.max_lr", "auto.sigma"), so that a CLI or config loader can
// point the user at it.
type FieldError struct {
	Field string
	Msg   string // what is wrong and what is allowed
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *FieldError) Unwrap() error { return ErrInvalid }

// FieldErrorf is a *FieldError naming field, its message formatted: what
// an explorer returns for a config value it cannot take.
func FieldErrorf(field, format string, a ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, a...)}
}
