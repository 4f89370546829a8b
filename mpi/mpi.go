// Package mpi is a thin cgo binding to the system MPI (Open MPI by default,
// found through pkg-config): the world communicator, Split, in-place
// allreduce, allgather, broadcast and barrier, and the CUDA-awareness query.
// It is what hdet needs, not a general binding.
//
// It promises:
//   - MPI's errors come back as Go errors (*Error, with MPI's own text): the
//     world and every communicator Split makes use MPI_ERRORS_RETURN, and
//     arguments MPI would misread fail first with ErrArgument;
//   - one MPI call at a time, from any goroutine: hdet asks for
//     MPI_THREAD_SERIALIZED and a package mutex keeps calls from overlapping,
//     so callers need no runtime.LockOSThread (Abort alone skips the mutex,
//     so it works while another goroutine is blocked in a collective);
//   - buffers past MPI's int count: Allreduce and Bcast move them in pieces
//     of at most 1 GiB, cut the same way on every rank;
//   - a loop of collectives costs what the same loop costs from C: before a
//     call the goroutine passes through the Go scheduler if 5 ms have gone by
//     since it last did (yield.go), so Go's sysmon never finds it running
//     for 10 ms and takes its thread's P in the middle of a collective;
//   - a process started without mpirun is a world of one rank (an MPI
//     singleton), where every collective is the identity.
//
// It does not: offer point-to-point, non-blocking or one-sided calls,
// datatypes beyond float32, float64 and bytes, or reductions beyond sum, max
// and min; run two calls at once (a collective holds every other MPI call of
// the process until it returns); time out (a dead or stuck rank makes a
// collective hang: bounding it is the caller's job, hdet's watchdog); or
// start MPI twice in a process (Init once, Finalize once, as MPI requires).
package mpi

/*
#cgo pkg-config: ompi
#include <stdlib.h>
#include <mpi.h>
#if defined(OPEN_MPI) && OPEN_MPI
#include <mpi-ext.h>
#endif

static MPI_Comm hdet_comm_world(void) { return MPI_COMM_WORLD; }
static MPI_Datatype hdet_float(void) { return MPI_FLOAT; }
static MPI_Datatype hdet_double(void) { return MPI_DOUBLE; }
static MPI_Datatype hdet_byte(void) { return MPI_BYTE; }
static MPI_Op hdet_op(int op) {
	switch (op) {
	case 1: return MPI_MAX;
	case 2: return MPI_MIN;
	default: return MPI_SUM;
	}
}
// MPI_IN_PLACE is (void *)1 in Open MPI: it must never sit in a Go pointer
// variable, or the runtime finds an invalid pointer when it copies the stack.
static int hdet_allreduce_in_place(void *buf, int n, MPI_Datatype dt, MPI_Op op, MPI_Comm c) {
	return MPI_Allreduce(MPI_IN_PLACE, buf, n, dt, op, c);
}
static int hdet_allgatherv_in_place(void *buf, const int *counts, const int *displs, MPI_Datatype dt, MPI_Comm c) {
	return MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, displs, dt, c);
}
static int hdet_set_errors_return(MPI_Comm c) { return MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN); }
static int hdet_split_shared(MPI_Comm c, MPI_Comm *out) {
	return MPI_Comm_split_type(c, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, out);
}
static int hdet_cuda_aware(void) {
#if defined(OMPI_HAVE_MPI_EXT_CUDA) && OMPI_HAVE_MPI_EXT_CUDA
	return MPIX_Query_cuda_support();
#else
	return 0;
#endif
}
static int hdet_thread_serialized(void) { return MPI_THREAD_SERIALIZED; }
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"unsafe"

	"github.com/hdet-dev/hdet/mpi/reduce"
)

// Op and Datatype live in the pure package reduce; these aliases keep
// mpi.Sum and friends for callers that already link MPI.
type (
	Op       = reduce.Op
	Datatype = reduce.Datatype
)

// The reductions and element types, as in package reduce.
const (
	Sum     = reduce.Sum
	Max     = reduce.Max
	Min     = reduce.Min
	Float32 = reduce.Float32
	Float64 = reduce.Float64
)

// ErrNotInitialized is returned by calls made before Init or after Finalize.
var ErrNotInitialized = errors.New("mpi: not initialized")

// ErrArgument marks a call rejected before reaching MPI (bad op, size overflow).
var ErrArgument = errors.New("mpi: invalid argument")

// Error is an error code returned by an MPI call, with MPI's own text.
type Error struct {
	Op   string // the MPI call, e.g. "MPI_Bcast"
	Code int
	Text string // from MPI_Error_string
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s (MPI error %d)", e.Op, e.Text, e.Code) }

var (
	mu          sync.Mutex // serialises every MPI call (see package doc)
	initialized bool
	world       *Comm
)

func check(op string, rc C.int) error {
	if rc == C.MPI_SUCCESS {
		return nil
	}
	buf := make([]byte, C.MPI_MAX_ERROR_STRING)
	var n C.int
	text := "unknown error"
	if C.MPI_Error_string(rc, (*C.char)(unsafe.Pointer(&buf[0])), &n) == C.MPI_SUCCESS {
		text = string(buf[:n])
	}
	return &Error{Op: op, Code: int(rc), Text: text}
}

// call makes one MPI call under the package lock, once MPI is initialised,
// after letting the Go scheduler run if it is due (yieldIfDue).
func call(op string, f func() C.int) error {
	yieldIfDue()
	mu.Lock()
	defer mu.Unlock()
	if !initialized {
		return ErrNotInitialized
	}
	return check(op, f())
}

// Init initialises MPI at MPI_THREAD_SERIALIZED and sets MPI_ERRORS_RETURN on
// the world communicator. A process started without mpirun becomes a world of
// one rank (an MPI singleton). Calling Init twice is an error.
func Init() error {
	mu.Lock()
	defer mu.Unlock()
	if initialized {
		return errors.New("mpi: Init called twice")
	}
	var provided C.int
	if err := check("MPI_Init_thread", C.MPI_Init_thread(nil, nil, C.hdet_thread_serialized(), &provided)); err != nil {
		return err
	}
	if provided < C.hdet_thread_serialized() {
		C.MPI_Abort(C.hdet_comm_world(), 1)
		return fmt.Errorf("mpi: the MPI library provides thread level %d, hdet needs MPI_THREAD_SERIALIZED", int(provided))
	}
	c := C.hdet_comm_world()
	if err := check("MPI_Comm_set_errhandler", C.hdet_set_errors_return(c)); err != nil {
		return err
	}
	w, err := newComm(c)
	if err != nil {
		return err
	}
	world = w
	initialized = true
	return nil
}

func newComm(c C.MPI_Comm) (*Comm, error) {
	var rank, size C.int
	if err := check("MPI_Comm_rank", C.MPI_Comm_rank(c, &rank)); err != nil {
		return nil, err
	}
	if err := check("MPI_Comm_size", C.MPI_Comm_size(c, &size)); err != nil {
		return nil, err
	}
	var local C.MPI_Comm
	if err := check("MPI_Comm_split_type", C.hdet_split_shared(c, &local)); err != nil {
		return nil, err
	}
	var lrank, lsize C.int
	if err := check("MPI_Comm_rank", C.MPI_Comm_rank(local, &lrank)); err != nil {
		return nil, err
	}
	if err := check("MPI_Comm_size", C.MPI_Comm_size(local, &lsize)); err != nil {
		return nil, err
	}
	if err := check("MPI_Comm_free", C.MPI_Comm_free(&local)); err != nil {
		return nil, err
	}
	return &Comm{c: c, rank: int(rank), size: int(size), localRank: int(lrank), localSize: int(lsize)}, nil
}

// Finalize shuts MPI down. Every rank must call it before exiting normally.
func Finalize() error {
	mu.Lock()
	defer mu.Unlock()
	if !initialized {
		return ErrNotInitialized
	}
	initialized = false
	world = nil
	return check("MPI_Finalize", C.MPI_Finalize())
}

// Abort ends every rank of the job with code. It does not take the package
// lock, so a watchdog can call it while a collective is blocked.
func Abort(code int) {
	C.MPI_Abort(C.hdet_comm_world(), C.int(code))
}

// World returns the world communicator, or nil before Init.
func World() *Comm {
	mu.Lock()
	defer mu.Unlock()
	return world
}

// CUDAAware reports whether the MPI library accepts device pointers
// (MPIX_Query_cuda_support where mpi-ext.h offers it; false otherwise).
func CUDAAware() bool {
	mu.Lock()
	defer mu.Unlock()
	return C.hdet_cuda_aware() != 0
}

// ProcessorName is MPI_Get_processor_name (the host name, usually).
func ProcessorName() (string, error) {
	mu.Lock()
	defer mu.Unlock()
	buf := make([]byte, C.MPI_MAX_PROCESSOR_NAME)
	var n C.int
	if err := check("MPI_Get_processor_name", C.MPI_Get_processor_name((*C.char)(unsafe.Pointer(&buf[0])), &n)); err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// Comm is a communicator.
type Comm struct {
	c                    C.MPI_Comm
	rank, size           int
	localRank, localSize int
}

// Rank is this process's rank in the communicator.
func (c *Comm) Rank() int { return c.rank }

// Size is the number of ranks.
func (c *Comm) Size() int { return c.size }

// LocalRank is this process's rank among the ranks on its node.
func (c *Comm) LocalRank() int { return c.localRank }

// LocalSize is the number of ranks on this process's node.
func (c *Comm) LocalSize() int { return c.localSize }

func count(n int) (C.int, error) {
	if n > math.MaxInt32 {
		return 0, fmt.Errorf("%w: %d elements exceed MPI's int count", ErrArgument, n)
	}
	return C.int(n), nil
}

func op(o Op) (C.MPI_Op, error) {
	if !o.Valid() {
		return nil, fmt.Errorf("%w: unknown reduction %v", ErrArgument, o)
	}
	return C.hdet_op(C.int(o)), nil
}

func dtype(d Datatype) (C.MPI_Datatype, error) {
	switch d {
	case Float32:
		return C.hdet_float(), nil
	case Float64:
		return C.hdet_double(), nil
	}
	return nil, fmt.Errorf("%w: unknown datatype %d", ErrArgument, int(d))
}

// AllreducePtr reduces count elements of type dt at ptr in place across all
// ranks, in pieces of at most 1 GiB (see chunked). ptr may be a device
// pointer when CUDAAware() is true. Empty buffers are a no-op.
func (c *Comm) AllreducePtr(ptr unsafe.Pointer, n int, dt Datatype, o Op) error {
	if n == 0 {
		return nil
	}
	mop, err := op(o)
	if err != nil {
		return err
	}
	mdt, err := dtype(dt)
	if err != nil {
		return err
	}
	return chunked(ptr, n, elemSize(dt), func(p unsafe.Pointer, n int) error {
		return call("MPI_Allreduce", func() C.int { return C.hdet_allreduce_in_place(p, C.int(n), mdt, mop, c.c) })
	})
}

// AllreduceFloat32 reduces buf in place across all ranks; MPI reads and
// writes the slice's own memory.
func (c *Comm) AllreduceFloat32(buf []float32, o Op) error {
	if len(buf) == 0 {
		return nil
	}
	return c.AllreducePtr(unsafe.Pointer(unsafe.SliceData(buf)), len(buf), Float32, o)
}

// AllreduceFloat64 reduces buf in place across all ranks.
func (c *Comm) AllreduceFloat64(buf []float64, o Op) error {
	if len(buf) == 0 {
		return nil
	}
	return c.AllreducePtr(unsafe.Pointer(unsafe.SliceData(buf)), len(buf), Float64, o)
}

// AllgathervFloat32 puts buf together in place from every rank's part:
// rank i holds counts[i] values right after the parts of the ranks before
// it, and every rank ends with every part (MPI_Allgatherv), so each rank
// sends its part once where a sum-allreduce of the buffer would move all of
// it. Every rank passes the same counts, one per rank, adding up to
// len(buf), which must stay under 2^31 values (MPI's int offsets).
func (c *Comm) AllgathervFloat32(buf []float32, counts []int) error {
	if len(counts) != c.size {
		return fmt.Errorf("%w: allgatherv with %d counts on %d ranks", ErrArgument, len(counts), c.size)
	}
	cs, ds := make([]C.int, c.size), make([]C.int, c.size)
	off := 0
	for i, n := range counts {
		if n < 0 {
			return fmt.Errorf("%w: allgatherv count %d of rank %d", ErrArgument, n, i)
		}
		cs[i], ds[i] = C.int(n), C.int(off)
		if off += n; off > math.MaxInt32 {
			return fmt.Errorf("%w: allgatherv of %d or more values exceeds MPI's int offsets", ErrArgument, off)
		}
	}
	if off != len(buf) {
		return fmt.Errorf("%w: allgatherv counts add up to %d, the buffer holds %d", ErrArgument, off, len(buf))
	}
	if len(buf) == 0 {
		return nil
	}
	return call("MPI_Allgatherv", func() C.int {
		return C.hdet_allgatherv_in_place(unsafe.Pointer(unsafe.SliceData(buf)), unsafe.SliceData(cs), unsafe.SliceData(ds), C.hdet_float(), c.c)
	})
}

// overlap reports whether a and b share memory, which MPI forbids between
// a collective's send and receive buffers.
func overlap(a, b []float64) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa, pb := uintptr(unsafe.Pointer(&a[0])), uintptr(unsafe.Pointer(&b[0]))
	const w = unsafe.Sizeof(a[0])
	return pa < pb+uintptr(len(b))*w && pb < pa+uintptr(len(a))*w
}

// AllgatherFloat64 gathers len(send) values from every rank into recv, in
// rank order; len(recv) must be Size()*len(send), and the two
// must not overlap.
func (c *Comm) AllgatherFloat64(send, recv []float64) error {
	if len(recv) != c.size*len(send) {
		return fmt.Errorf("%w: allgather of %d values from %d ranks needs %d receive slots, got %d",
			ErrArgument, len(send), c.size, c.size*len(send), len(recv))
	}
	if len(send) == 0 {
		return nil
	}
	if overlap(send, recv) {
		return fmt.Errorf("%w: allgather's send and receive buffers overlap", ErrArgument)
	}
	cn, err := count(len(send))
	if err != nil {
		return err
	}
	return call("MPI_Allgather", func() C.int {
		return C.MPI_Allgather(unsafe.Pointer(unsafe.SliceData(send)), cn, C.hdet_double(),
			unsafe.Pointer(unsafe.SliceData(recv)), cn, C.hdet_double(), c.c)
	})
}

// Bcast sends root's buf to every rank, in pieces of at most 1 GiB; all
// ranks pass buffers of equal length.
func (c *Comm) Bcast(buf []byte, root int) error {
	if len(buf) == 0 {
		return call("MPI_Bcast", func() C.int { return C.MPI_Bcast(nil, 0, C.hdet_byte(), C.int(root), c.c) })
	}
	return chunked(unsafe.Pointer(unsafe.SliceData(buf)), len(buf), 1, func(p unsafe.Pointer, n int) error {
		return call("MPI_Bcast", func() C.int { return C.MPI_Bcast(p, C.int(n), C.hdet_byte(), C.int(root), c.c) })
	})
}

// BcastMessage sends a message of any length from root: its length first,
// then its bytes. Non-root ranks pass nil and receive the message.
func (c *Comm) BcastMessage(msg []byte, root int) ([]byte, error) {
	var hdr [8]byte
	if c.rank == root {
		binary.LittleEndian.PutUint64(hdr[:], uint64(len(msg)))
	}
	if err := c.Bcast(hdr[:], root); err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint64(hdr[:])
	if n > math.MaxInt {
		return nil, fmt.Errorf("%w: broadcast message of %d bytes", ErrArgument, n)
	}
	if c.rank != root {
		msg = make([]byte, n)
	}
	if err := c.Bcast(msg, root); err != nil {
		return nil, err
	}
	return msg, nil
}

// Barrier blocks until every rank has reached it.
func (c *Comm) Barrier() error {
	return call("MPI_Barrier", func() C.int { return C.MPI_Barrier(c.c) })
}
