// Package cref calls C library functions that pure-Go ports elsewhere must
// reproduce bit for bit, for those ports' tests only.
package cref

/*
#cgo LDFLAGS: -lm
#include <math.h>
*/
import "C"

// Cos is the C library's cos.
func Cos(x float64) float64 { return float64(C.cos(C.double(x))) }
