//go:build cgo

package blas

import (
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/cpu"

	"github.com/stretchr/testify/require"
)

func TestOpenBLASRejectsShortBuffers(t *testing.T) {
	a, b, c := make([]float32, 6), make([]float32, 6), make([]float32, 4)
	require.Panics(t, func() { OpenBLAS{}.Sgemm(false, false, 2, 2, 3, 1, a, 3, b[:5], 2, 0, c, 2) })
	require.Panics(t, func() { OpenBLAS{}.Sgemm(false, false, 2, 2, 3, 1, a, 3, b, 2, 0, c[:3], 2) })
	require.NotPanics(t, func() { OpenBLAS{}.Sgemm(false, false, 2, 2, 3, 1, a, 3, b, 2, 0, c, 2) })
}

// Every x86-64 CPU with AVX2 and FMA runs OpenBLAS's Haswell kernels, so a
// run's parameters do not depend on which such CPU computed them.
func TestOpenBLASKernelsFixed(t *testing.T) {
	name, err := coreName()
	require.NoError(t, err)
	_, own := os.LookupEnv("OPENBLAS_CORETYPE")
	if runtime.GOARCH != "amd64" || !cpu.X86.HasAVX2 || !cpu.X86.HasFMA || own {
		t.Logf("kernels not fixed on this machine: %q", name)
		return
	}
	require.Equal(t, coreType, name)
	_, set := os.LookupEnv("OPENBLAS_CORETYPE")
	require.False(t, set, "the variable is set for the load only")
}
