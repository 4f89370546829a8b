// Package cuda is the small part of the CUDA driver API (libcuda.so.1) hdet
// needs for device buffers: the primary context, device and pinned host
// memory, and copies. Like go-nvml with NVML, it loads the library at run
// time with dlopen, so hdet builds without the CUDA toolkit and runs where no
// driver is installed.
//
// It promises: where libcuda.so.1 is missing, Load and every entry point
// that needs the driver return ErrNoDriver, and a library without CUDA's
// symbols is refused by name rather than crashing later; CUDA's errors come
// back as *Error, with CUDA's name for them; copies are synchronous (they
// return when the data has arrived).
//
// It does not: launch kernels, manage streams or events, or create contexts
// of its own (it retains the device's primary context, the one a framework
// in the same process shares); nor pick a device (package device does).
package cuda

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>

// The few CUDA driver types used, as cuda.h declares them, so no CUDA
// headers are needed to build.
typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;

typedef struct {
	CUresult (*init)(unsigned int);
	CUresult (*driverGetVersion)(int *);
	CUresult (*deviceGetCount)(int *);
	CUresult (*deviceGet)(CUdevice *, int);
	CUresult (*deviceGetByPCIBusId)(CUdevice *, const char *);
	CUresult (*deviceGetName)(char *, int, CUdevice);
	CUresult (*primaryCtxRetain)(CUcontext *, CUdevice);
	CUresult (*primaryCtxRelease)(CUdevice);
	CUresult (*ctxSetCurrent)(CUcontext);
	CUresult (*memAlloc)(CUdeviceptr *, size_t);
	CUresult (*memFree)(CUdeviceptr);
	CUresult (*memAllocHost)(void **, size_t);
	CUresult (*memFreeHost)(void *);
	CUresult (*memcpyHtoD)(CUdeviceptr, const void *, size_t);
	CUresult (*memcpyDtoH)(void *, CUdeviceptr, size_t);
	CUresult (*getErrorName)(CUresult, const char **);
} hd_cuda;

static hd_cuda cu;

// hd_load opens name and resolves every symbol into a local table, which
// replaces the global one only when all were found. It returns 0, or 1 with
// *missing naming the library (dlopen failed) or the absent symbol.
static int hd_load(const char *name, const char **missing, const char **dlerr) {
	void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		*missing = name;
		*dlerr = dlerror();
		return 1;
	}
	hd_cuda t;
#define SYM(field, sym) \
	if ((*(void **)&t.field = dlsym(h, sym)) == NULL) { *missing = sym; *dlerr = ""; dlclose(h); return 2; }
	SYM(init, "cuInit")
	SYM(driverGetVersion, "cuDriverGetVersion")
	SYM(deviceGetCount, "cuDeviceGetCount")
	SYM(deviceGet, "cuDeviceGet")
	SYM(deviceGetByPCIBusId, "cuDeviceGetByPCIBusId")
	SYM(deviceGetName, "cuDeviceGetName")
	SYM(primaryCtxRetain, "cuDevicePrimaryCtxRetain")
	SYM(primaryCtxRelease, "cuDevicePrimaryCtxRelease_v2")
	SYM(ctxSetCurrent, "cuCtxSetCurrent")
	SYM(memAlloc, "cuMemAlloc_v2")
	SYM(memFree, "cuMemFree_v2")
	SYM(memAllocHost, "cuMemAllocHost_v2")
	SYM(memFreeHost, "cuMemFreeHost")
	SYM(memcpyHtoD, "cuMemcpyHtoD_v2")
	SYM(memcpyDtoH, "cuMemcpyDtoH_v2")
	SYM(getErrorName, "cuGetErrorName")
#undef SYM
	cu = t;
	return 0;
}

static CUresult hd_init(void) { return cu.init(0); }
static CUresult hd_driver_version(int *v) { return cu.driverGetVersion(v); }
static CUresult hd_device_count(int *n) { return cu.deviceGetCount(n); }
static CUresult hd_device_by_bus(const char *bus, CUdevice *d) { return cu.deviceGetByPCIBusId(d, bus); }
static CUresult hd_device_name(CUdevice d, char *buf, int n) { return cu.deviceGetName(buf, n, d); }

static CUresult hd_open(int ordinal, CUdevice *d, CUcontext *c) {
	CUresult r = cu.deviceGet(d, ordinal);
	if (r != 0) return r;
	return cu.primaryCtxRetain(c, *d);
}
static CUresult hd_close(CUdevice d) { return cu.primaryCtxRelease(d); }

// Every memory call first makes the context current on the calling thread:
// contexts are per OS thread and Go moves goroutines between threads.
static CUresult hd_alloc(CUcontext c, size_t n, void **p) {
	CUresult r = cu.ctxSetCurrent(c);
	if (r != 0) return r;
	CUdeviceptr d = 0;
	r = cu.memAlloc(&d, n);
	*p = (void *)(uintptr_t)d;
	return r;
}
static CUresult hd_free(CUcontext c, void *p) {
	CUresult r = cu.ctxSetCurrent(c);
	if (r != 0) return r;
	return cu.memFree((CUdeviceptr)(uintptr_t)p);
}
static CUresult hd_alloc_host(CUcontext c, size_t n, void **p) {
	CUresult r = cu.ctxSetCurrent(c);
	if (r != 0) return r;
	return cu.memAllocHost(p, n);
}
static CUresult hd_free_host(CUcontext c, void *p) {
	CUresult r = cu.ctxSetCurrent(c);
	if (r != 0) return r;
	return cu.memFreeHost(p);
}
static CUresult hd_htod(CUcontext c, void *dst, void *src, size_t n) {
	CUresult r = cu.ctxSetCurrent(c);
	if (r != 0) return r;
	return cu.memcpyHtoD((CUdeviceptr)(uintptr_t)dst, src, n);
}
static CUresult hd_dtoh(CUcontext c, void *dst, void *src, size_t n) {
	CUresult r = cu.ctxSetCurrent(c);
	if (r != 0) return r;
	return cu.memcpyDtoH(dst, (CUdeviceptr)(uintptr_t)src, n);
}
static const char *hd_error_name(CUresult r) {
	const char *s = NULL;
	if (cu.getErrorName == NULL || cu.getErrorName(r, &s) != 0 || s == NULL) return "CUDA_ERROR_UNKNOWN";
	return s;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"
)

// Library is the CUDA driver's soname.
const Library = "libcuda.so.1"

// ErrNoDriver means libcuda.so.1 could not be loaded: there is no NVIDIA
// driver, so no device memory; use host buffers.
var ErrNoDriver = errors.New("cuda: " + Library + " not found (no NVIDIA driver); device buffers are unavailable")

// Error is a CUresult other than CUDA_SUCCESS.
type Error struct {
	Op   string // the driver call, e.g. "cuMemAlloc"
	Code int
	Name string // e.g. "CUDA_ERROR_OUT_OF_MEMORY"
}

func (e *Error) Error() string { return fmt.Sprintf("cuda: %s: %s (%d)", e.Op, e.Name, e.Code) }

func check(op string, r C.CUresult) error {
	if r == 0 {
		return nil
	}
	return &Error{Op: op, Code: int(r), Name: C.GoString(C.hd_error_name(r))}
}

// load opens a library as the CUDA driver; split from Load so the tests can
// point it at libraries that are absent or are not libcuda.
func load(name string) error {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var missing, dlerr *C.char
	switch C.hd_load(cname, &missing, &dlerr) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("%w: %s", ErrNoDriver, C.GoString(dlerr))
	default:
		return fmt.Errorf("cuda: %s has no symbol %s: not a usable CUDA driver", name, C.GoString(missing))
	}
}

var (
	loadOnce sync.Once
	loadErr  error
)

// Load opens libcuda.so.1 and initialises the driver, once per process.
func Load() error {
	loadOnce.Do(func() {
		if loadErr = load(Library); loadErr == nil {
			loadErr = check("cuInit", C.hd_init())
		}
	})
	return loadErr
}

// DriverVersion is the CUDA version the driver supports, e.g. 12040 for 12.4.
func DriverVersion() (int, error) {
	if err := Load(); err != nil {
		return 0, err
	}
	var v C.int
	return int(v), check("cuDriverGetVersion", C.hd_driver_version(&v))
}

// DeviceCount is the number of devices CUDA sees (after CUDA_VISIBLE_DEVICES).
func DeviceCount() (int, error) {
	if err := Load(); err != nil {
		return 0, err
	}
	var n C.int
	return int(n), check("cuDeviceGetCount", C.hd_device_count(&n))
}

// OrdinalByPCIBusID is CUDA's ordinal for the GPU at a PCI bus id. Unlike a
// position in a list it is exact whatever CUDA_DEVICE_ORDER says.
func OrdinalByPCIBusID(busID string) (int, error) {
	if err := Load(); err != nil {
		return 0, err
	}
	cbus := C.CString(busID)
	defer C.free(unsafe.Pointer(cbus))
	var d C.CUdevice
	return int(d), check("cuDeviceGetByPCIBusId", C.hd_device_by_bus(cbus, &d))
}

// Context is a device's primary context; it implements device.Memory.
type Context struct {
	Ordinal int
	dev     C.CUdevice
	ctx     C.CUcontext
}

// Open retains the primary context of the device at a CUDA ordinal.
func Open(ordinal int) (*Context, error) {
	if err := Load(); err != nil {
		return nil, err
	}
	c := &Context{Ordinal: ordinal}
	if err := check("cuDevicePrimaryCtxRetain", C.hd_open(C.int(ordinal), &c.dev, &c.ctx)); err != nil {
		return nil, fmt.Errorf("cuda device %d: %w", ordinal, err)
	}
	return c, nil
}

// Name is the device's name as CUDA reports it.
func (c *Context) Name() (string, error) {
	buf := make([]byte, 256)
	if err := check("cuDeviceGetName", C.hd_device_name(c.dev, (*C.char)(unsafe.Pointer(&buf[0])), C.int(len(buf)))); err != nil {
		return "", err
	}
	return C.GoString((*C.char)(unsafe.Pointer(&buf[0]))), nil
}

// Close releases the primary context.
func (c *Context) Close() error {
	return check("cuDevicePrimaryCtxRelease", C.hd_close(c.dev))
}

// Alloc allocates device memory.
func (c *Context) Alloc(bytes int) (unsafe.Pointer, error) {
	var p unsafe.Pointer
	return p, check("cuMemAlloc", C.hd_alloc(c.ctx, C.size_t(bytes), &p))
}

// Free frees device memory from Alloc.
func (c *Context) Free(p unsafe.Pointer) error {
	return check("cuMemFree", C.hd_free(c.ctx, p))
}

// AllocHost allocates page-locked host memory, which the GPU's copy engines
// reach by DMA at full speed.
func (c *Context) AllocHost(bytes int) (unsafe.Pointer, error) {
	var p unsafe.Pointer
	return p, check("cuMemAllocHost", C.hd_alloc_host(c.ctx, C.size_t(bytes), &p))
}

// FreeHost frees memory from AllocHost.
func (c *Context) FreeHost(p unsafe.Pointer) error {
	return check("cuMemFreeHost", C.hd_free_host(c.ctx, p))
}

// CopyHtoD copies bytes from host memory to device memory; it returns when
// the copy is done.
func (c *Context) CopyHtoD(dst, src unsafe.Pointer, bytes int) error {
	return check("cuMemcpyHtoD", C.hd_htod(c.ctx, dst, src, C.size_t(bytes)))
}

// CopyDtoH copies bytes from device memory to host memory; it returns when
// the copy is done.
func (c *Context) CopyDtoH(dst, src unsafe.Pointer, bytes int) error {
	return check("cuMemcpyDtoH", C.hd_dtoh(c.ctx, dst, src, C.size_t(bytes)))
}
