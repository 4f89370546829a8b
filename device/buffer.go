package device

import (
	"errors"
	"fmt"
	"unsafe"
)

// ErrLength means a copy between a device buffer and a host slice of a
// different length was asked for.
var ErrLength = errors.New("device: length mismatch")

// Memory is the device-memory API that device buffers and the staged
// allreduce use. *cuda.Context implements it over the CUDA driver; the tests
// implement it over host memory, which is how the staging logic is checked
// on machines without a GPU.
type Memory interface {
	Alloc(bytes int) (unsafe.Pointer, error)
	Free(p unsafe.Pointer) error
	AllocHost(bytes int) (unsafe.Pointer, error) // page-locked (pinned) host memory
	FreeHost(p unsafe.Pointer) error
	CopyHtoD(dst, src unsafe.Pointer, bytes int) error
	CopyDtoH(dst, src unsafe.Pointer, bytes int) error
}

// Buffer is the flat float32 parameter buffer the converge step all-reduces,
// in host or in device memory.
type Buffer interface {
	Len() int
	Host() []float32        // the data, or nil when it lives in device memory
	Device() unsafe.Pointer // the device pointer, or nil for host memory
}

// HostBuffer is a Buffer over a Go slice; the allreduce works on the slice
// itself, no copy.
type HostBuffer []float32

func (b HostBuffer) Len() int               { return len(b) }
func (b HostBuffer) Host() []float32        { return b }
func (b HostBuffer) Device() unsafe.Pointer { return nil }

const float32Bytes = 4

// DeviceBuffer is a Buffer in device memory.
type DeviceBuffer struct {
	mem Memory
	ptr unsafe.Pointer
	n   int
}

// NewDeviceBuffer allocates n float32s of device memory from mem.
func NewDeviceBuffer(mem Memory, n int) (*DeviceBuffer, error) {
	if n < 1 {
		return nil, fmt.Errorf("device: a device buffer needs at least one element, got %d", n)
	}
	p, err := mem.Alloc(n * float32Bytes)
	if err != nil {
		return nil, fmt.Errorf("device: allocating %d floats: %w", n, err)
	}
	return &DeviceBuffer{mem: mem, ptr: p, n: n}, nil
}

func (b *DeviceBuffer) Len() int               { return b.n }
func (b *DeviceBuffer) Host() []float32        { return nil }
func (b *DeviceBuffer) Device() unsafe.Pointer { return b.ptr }

// Upload copies src, which must have Len() elements, to the device.
func (b *DeviceBuffer) Upload(src []float32) error {
	if len(src) != b.n {
		return fmt.Errorf("%w: upload of %d floats into a buffer of %d", ErrLength, len(src), b.n)
	}
	return b.mem.CopyHtoD(b.ptr, unsafe.Pointer(unsafe.SliceData(src)), b.n*float32Bytes)
}

// Download copies the buffer into dst, which must have Len() elements.
func (b *DeviceBuffer) Download(dst []float32) error {
	if len(dst) != b.n {
		return fmt.Errorf("%w: download of a buffer of %d floats into %d", ErrLength, b.n, len(dst))
	}
	return b.mem.CopyDtoH(unsafe.Pointer(unsafe.SliceData(dst)), b.ptr, b.n*float32Bytes)
}

// Free releases the device memory; the buffer is unusable afterwards.
func (b *DeviceBuffer) Free() error {
	if b.ptr == nil {
		return nil
	}
	err := b.mem.Free(b.ptr)
	b.ptr, b.n = nil, 0
	return err
}
