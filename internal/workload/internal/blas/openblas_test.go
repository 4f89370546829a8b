//go:build cgo

package blas

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestOpenBLASRejectsShortBuffers(t *testing.T) {
	a, b, c := make([]float32, 6), make([]float32, 6), make([]float32, 4)
	require.Panics(t, func() { OpenBLAS{}.Sgemm(false, false, 2, 2, 3, 1, a, 3, b[:5], 2, 0, c, 2) })
	require.Panics(t, func() { OpenBLAS{}.Sgemm(false, false, 2, 2, 3, 1, a, 3, b, 2, 0, c[:3], 2) })
	require.NotPanics(t, func() { OpenBLAS{}.Sgemm(false, false, 2, 2, 3, 1, a, 3, b, 2, 0, c, 2) })
}
