package schedule

import (
	"errors"
)

// ErrStepRange marks a step outside a schedule's [0, Steps()).
// PyTorch's OneCycleLR raises when stepped past total_steps; so do we,
// rather than clamp silently. Every other error this package returns is a
// *hparam.FieldError (an hparam.ErrInvalid) naming the parameter.
var ErrStepRange = errors.New("step out of range")
