// Package blas is the built-in workloads' numeric binding, the one place
// their cgo sits: the matrix product, behind an interface so that the
// backend (OpenBLAS through cgo, or gonum's pure Go) is chosen in one line
// (Default), and the element-wise loops of a step in C with AVX2 (AVX2),
// bit-identical to the workload's Go loops.
package blas

import (
	gblas "gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// Gemm computes C = alpha*op(A)*op(B) + beta*C for row-major float32
// matrices, op(X) being X or its transpose. op(A) is m×k, op(B) is k×n and C
// is m×n; lda, ldb, ldc are the row strides.
type Gemm interface {
	Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int,
		b []float32, ldb int, beta float32, c []float32, ldc int)
}

// Loader is a backend that loads its library at run time (OpenBLAS).
type Loader interface {
	Load() error
}

// Ready is nil when g can compute; a Loader says here, before training,
// what is missing, where Sgemm, which returns nothing, could only panic.
func Ready(g Gemm) error {
	if l, ok := g.(Loader); ok {
		return l.Load()
	}
	return nil
}

// Gonum is gonum's pure-Go Sgemm. It parallelises large products over
// GOMAXPROCS goroutines; each element of C is still summed by one goroutine
// in a fixed order, so results do not depend on scheduling.
type Gonum struct{}

func (Gonum) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int,
	b []float32, ldb int, beta float32, c []float32, ldc int) {
	gonum.Implementation{}.Sgemm(trans(transA), trans(transB), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

func trans(t bool) gblas.Transpose {
	if t {
		return gblas.Trans
	}
	return gblas.NoTrans
}
