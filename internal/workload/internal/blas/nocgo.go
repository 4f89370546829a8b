//go:build !cgo

package blas

// Default falls back to pure Go when cgo (and so OpenBLAS) is unavailable.
var Default Gemm = Gonum{}
