//go:build cgo

package blas

/*
#cgo LDFLAGS: -lopenblas
#include <cblas.h>
*/
import "C"

import (
	"fmt"
	"sync"
)

// Default is the backend the workloads use. On one core of the 2-core dev
// box OpenBLAS ran the MLP's sgemm shapes at 35-48 GFLOPS against gonum's
// 4-7, and the mnist forward+backward step about 7x faster
// (BenchmarkSgemm here, BenchmarkForwardBackward in workload/mnist).
var Default Gemm = OpenBLAS{}

// OpenBLAS calls cblas_sgemm from the system OpenBLAS (Debian:
// libopenblas-dev), single-threaded: hdet runs one rank per core, and one
// thread also keeps every product's summation order fixed.
type OpenBLAS struct{}

var oneThread sync.Once

func (OpenBLAS) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int,
	b []float32, ldb int, beta float32, c []float32, ldc int) {
	oneThread.Do(func() { C.openblas_set_num_threads(1) })
	if m == 0 || n == 0 {
		return
	}
	// C reads and writes through raw pointers: check the extents here, as
	// gonum does, rather than corrupt memory on a caller's mistake.
	checkExtent("a", transA, m, k, a, lda)
	checkExtent("b", transB, k, n, b, ldb)
	checkExtent("c", false, m, n, c, ldc)
	if k == 0 {
		// a and b may be empty; avoid &a[0].
		Gonum{}.Sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	C.cblas_sgemm(C.CblasRowMajor, cTrans(transA), cTrans(transB),
		C.blasint(m), C.blasint(n), C.blasint(k), C.float(alpha),
		(*C.float)(&a[0]), C.blasint(lda), (*C.float)(&b[0]), C.blasint(ldb),
		C.float(beta), (*C.float)(&c[0]), C.blasint(ldc))
}

func cTrans(t bool) C.enum_CBLAS_TRANSPOSE {
	if t {
		return C.CblasTrans
	}
	return C.CblasNoTrans
}

// checkExtent panics when x cannot hold a rows×cols matrix (cols×rows when
// transposed, as stored) with row stride ld.
func checkExtent(name string, t bool, rows, cols int, x []float32, ld int) {
	if t {
		rows, cols = cols, rows
	}
	if ld < max(cols, 1) || len(x) < (rows-1)*ld+cols {
		panic(fmt.Sprintf("blas: %s too short: %d rows × %d cols, ld %d, len %d", name, rows, cols, ld, len(x)))
	}
}
