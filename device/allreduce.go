package device

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/hdet-dev/hdet/mpi"
)

// Path is how a buffer reaches MPI_Allreduce.
type Path string

const (
	PathAuto   Path = "auto"   // choose from the buffer and the MPI (ResolvePath)
	PathDevice Path = "device" // the device pointer straight to a CUDA-aware MPI
	PathStaged Path = "staged" // device → pinned host → MPI → device
	PathHost   Path = "host"   // MPI on the Go slice
)

// Paths lists the values --allreduce-path accepts.
var Paths = []Path{PathAuto, PathDevice, PathStaged, PathHost}

var (
	// ErrPath means an allreduce path name is not one of Paths.
	ErrPath = errors.New("unknown allreduce path")
	// ErrPathMismatch means a path was forced that cannot serve the buffer
	// (host path for device memory, or the reverse).
	ErrPathMismatch = errors.New("allreduce path does not fit the buffer")
	// ErrNotCUDAAware means the device path was forced but the MPI library
	// cannot take device pointers.
	ErrNotCUDAAware = errors.New("MPI is not CUDA-aware")
)

// ParsePath reads an --allreduce-path value.
func ParsePath(s string) (Path, error) {
	for _, p := range Paths {
		if string(p) == s {
			return p, nil
		}
	}
	return "", pathError(s)
}

func pathError(s string) error { return fmt.Errorf("%w %q: want one of %v", ErrPath, s, Paths) }

// Choice is a resolved path and why it was chosen; log it once.
type Choice struct {
	Path   Path
	Reason string
}

func (c Choice) String() string { return fmt.Sprintf("allreduce path %s: %s", c.Path, c.Reason) }

// ResolvePath decides how a buffer is all-reduced. auto picks device when the
// buffer is in device memory and MPI is CUDA-aware, staged when it is in
// device memory and MPI is not, and host for host buffers. A forced path
// that cannot work is an error rather than a silent fallback.
func ResolvePath(requested Path, onDevice, cudaAware bool) (Choice, error) {
	switch requested {
	case PathAuto:
		switch {
		case !onDevice:
			return Choice{PathHost, "auto: host buffer, MPI on the Go slice"}, nil
		case cudaAware:
			return Choice{PathDevice, "auto: MPI is CUDA-aware, device pointer straight to MPI_Allreduce"}, nil
		default:
			return Choice{PathStaged, "auto: MPI is not CUDA-aware, staging through pinned host memory"}, nil
		}
	case PathHost:
		if onDevice {
			return Choice{}, fmt.Errorf("%w: host path asked for a device buffer (use staged)", ErrPathMismatch)
		}
		return Choice{PathHost, "forced: MPI on the Go slice"}, nil
	case PathStaged:
		if !onDevice {
			return Choice{}, fmt.Errorf("%w: staged path asked for a host buffer (use host)", ErrPathMismatch)
		}
		return Choice{PathStaged, "forced: staging through pinned host memory"}, nil
	case PathDevice:
		if !onDevice {
			return Choice{}, fmt.Errorf("%w: device path asked for a host buffer (use host)", ErrPathMismatch)
		}
		if !cudaAware {
			return Choice{}, fmt.Errorf("%w: device path needs an MPI built with CUDA support (use staged)", ErrNotCUDAAware)
		}
		return Choice{PathDevice, "forced: device pointer straight to MPI_Allreduce"}, nil
	}
	return Choice{}, pathError(string(requested))
}

// Reducer is the part of *mpi.Comm the allreducers use; the tests supply an
// in-process stand-in.
type Reducer interface {
	AllreduceFloat32(buf []float32, op mpi.Op) error
	AllreducePtr(ptr unsafe.Pointer, n int, dt mpi.Datatype, op mpi.Op) error
}

var _ Reducer = (*mpi.Comm)(nil)

// Allreducer reduces a Buffer in place across all ranks.
type Allreducer interface {
	Allreduce(b Buffer, op mpi.Op) error
	Path() Path
	// Close frees what the allreducer holds (the staged path's pinned
	// memory).
	Close() error
}

// NewAllreducer returns the strategy for a resolved path. mem is needed only
// by the staged path (for its pinned host memory) and may be nil otherwise.
func NewAllreducer(p Path, r Reducer, mem Memory) (Allreducer, error) {
	switch p {
	case PathHost:
		return hostAllreducer{r}, nil
	case PathDevice:
		return directAllreducer{r}, nil
	case PathStaged:
		if mem == nil {
			return nil, errors.New("device: the staged allreduce needs device memory access")
		}
		return &stagedAllreducer{r: r, mem: mem}, nil
	}
	return nil, fmt.Errorf("%w: NewAllreducer wants a resolved path, got %q", ErrPath, p)
}

type hostAllreducer struct{ r Reducer }

func (a hostAllreducer) Path() Path   { return PathHost }
func (a hostAllreducer) Close() error { return nil }
func (a hostAllreducer) Allreduce(b Buffer, op mpi.Op) error {
	h := b.Host()
	if h == nil && b.Len() > 0 {
		return fmt.Errorf("%w: host allreduce of a device buffer", ErrPathMismatch)
	}
	return a.r.AllreduceFloat32(h, op)
}

type directAllreducer struct{ r Reducer }

func (a directAllreducer) Path() Path   { return PathDevice }
func (a directAllreducer) Close() error { return nil }
func (a directAllreducer) Allreduce(b Buffer, op mpi.Op) error {
	d := b.Device()
	if d == nil {
		return fmt.Errorf("%w: device allreduce of a host buffer", ErrPathMismatch)
	}
	return a.r.AllreducePtr(d, b.Len(), mpi.Float32, op)
}

// stagedAllreducer copies the buffer to pinned host memory, reduces it
// there and copies it back. The pinned buffer is kept between calls (the
// converge buffer has the same size every window) and grows if needed.
type stagedAllreducer struct {
	r     Reducer
	mem   Memory
	pin   unsafe.Pointer
	bytes int
}

func (a *stagedAllreducer) Path() Path { return PathStaged }

func (a *stagedAllreducer) Allreduce(b Buffer, op mpi.Op) error {
	d := b.Device()
	if d == nil {
		return fmt.Errorf("%w: staged allreduce of a host buffer", ErrPathMismatch)
	}
	n := b.Len() * float32Bytes
	if n > a.bytes {
		if err := a.Close(); err != nil {
			return err
		}
		p, err := a.mem.AllocHost(n)
		if err != nil {
			return fmt.Errorf("device: pinned staging buffer of %d bytes: %w", n, err)
		}
		a.pin, a.bytes = p, n
	}
	if err := a.mem.CopyDtoH(a.pin, d, n); err != nil {
		return fmt.Errorf("device: staging to host: %w", err)
	}
	if err := a.r.AllreducePtr(a.pin, b.Len(), mpi.Float32, op); err != nil {
		return err
	}
	if err := a.mem.CopyHtoD(d, a.pin, n); err != nil {
		return fmt.Errorf("device: staging back to device: %w", err)
	}
	return nil
}

func (a *stagedAllreducer) Close() error {
	if a.pin == nil {
		return nil
	}
	err := a.mem.FreeHost(a.pin)
	a.pin, a.bytes = nil, 0
	return err
}
