//go:build cgo

package blas

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>

// CBLAS's enum values (cblas.h), so no OpenBLAS headers are needed to build.
enum { hd_row_major = 101, hd_no_trans = 111, hd_trans = 112 };

typedef void (*hd_sgemm_fn)(int, int, int, int, int, int, float, const float *, int,
	const float *, int, float, float *, int);
static hd_sgemm_fn hd_sgemm;
static char *(*hd_corename)(void);

// hd_open loads OpenBLAS, makes it single-threaded and keeps its
// cblas_sgemm. It returns NULL, or what went wrong.
static const char *hd_open(const char *name) {
	void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		return dlerror();
	}
	void (*threads)(int) = (void (*)(int))dlsym(h, "openblas_set_num_threads");
	hd_sgemm_fn g = (hd_sgemm_fn)dlsym(h, "cblas_sgemm");
	if (threads == NULL || g == NULL) {
		dlclose(h);
		return "cblas_sgemm or openblas_set_num_threads not found";
	}
	threads(1);
	hd_sgemm = g;
	hd_corename = (char *(*)(void))dlsym(h, "openblas_get_corename");
	return NULL;
}

static const char *hd_core(void) { return hd_corename ? hd_corename() : ""; }

static void hd_call(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
	const float *b, int ldb, float beta, float *c, int ldc) {
	hd_sgemm(hd_row_major, ta ? hd_trans : hd_no_trans, tb ? hd_trans : hd_no_trans,
		m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
*/
import "C"

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"unsafe"

	"golang.org/x/sys/cpu"
)

// Default is the backend the workloads use. On one core of the 2-core dev
// box OpenBLAS ran the MLP's sgemm shapes at 35-48 GFLOPS against gonum's
// 4-7, and the mnist forward+backward step about 7x faster
// (BenchmarkSgemm here, BenchmarkForwardBackward in workload/mnist).
var Default Gemm = OpenBLAS{}

// OpenBLAS calls cblas_sgemm from the system OpenBLAS (Debian:
// libopenblas0), single-threaded: hdet runs one rank per core, and one
// thread also keeps every product's summation order fixed.
type OpenBLAS struct{}

// openBLASLib is the library's run-time name (Debian's libopenblas0).
const openBLASLib = "libopenblas.so.0"

// coreType is the kernel set OpenBLAS is asked for on x86-64. Its
// DYNAMIC_ARCH builds pick kernels by CPU model, and the kernels sum in
// different orders: the same run ended with other parameters on an
// AVX-512 Xeon (SkylakeX kernels) than on a Zen 5 (Haswell kernels). One
// kernel set for every CPU that has it keeps a run, its resume on another
// host and the pinned tests bit-identical across machines.
const coreType = "Haswell"

var (
	loadOnce sync.Once
	loadErr  error
)

// load opens OpenBLAS once. It is loaded at run time, not linked, because
// OpenBLAS reads OPENBLAS_CORETYPE when it is loaded: only then can hdet
// set it. A user's own OPENBLAS_CORETYPE is kept.
func load() {
	_, own := os.LookupEnv("OPENBLAS_CORETYPE")
	force := !own && runtime.GOARCH == "amd64" && cpu.X86.HasAVX2 && cpu.X86.HasFMA
	if force {
		// Set for the load only, so child processes (a PyTorch worker) see
		// the environment hdet was started with.
		_ = os.Setenv("OPENBLAS_CORETYPE", coreType)
		defer os.Unsetenv("OPENBLAS_CORETYPE")
	}
	name := C.CString(openBLASLib)
	defer C.free(unsafe.Pointer(name))
	if msg := C.hd_open(name); msg != nil {
		loadErr = fmt.Errorf("blas: cannot load OpenBLAS (%s): %s; install it (Debian: apt-get install libopenblas0)",
			openBLASLib, C.GoString(msg))
	}
}

// Load opens the library once and says whether it could (Ready).
func (OpenBLAS) Load() error {
	loadOnce.Do(load)
	return loadErr
}

// coreName is the kernel set OpenBLAS runs ("" when it does not say), after loading it.
func coreName() (string, error) {
	if err := (OpenBLAS{}).Load(); err != nil {
		return "", err
	}
	return C.GoString(C.hd_core()), nil
}

func (OpenBLAS) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int,
	b []float32, ldb int, beta float32, c []float32, ldc int) {
	if err := (OpenBLAS{}).Load(); err != nil {
		panic(err) // a workload checks Ready before its first product
	}
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
	C.hd_call(cBool(transA), cBool(transB), C.int(m), C.int(n), C.int(k), C.float(alpha),
		(*C.float)(&a[0]), C.int(lda), (*C.float)(&b[0]), C.int(ldb),
		C.float(beta), (*C.float)(&c[0]), C.int(ldc))
}

func cBool(t bool) C.int {
	if t {
		return 1
	}
	return 0
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
