package bridge

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// shmBuffer is an anonymous float32 file (memfd) mapped shared into both
// hdet and the worker: the worker copies its parameters in, MPI
// all-reduces the mapping in place, the worker copies them back. The worker
// inherits the file at exec; having no name, it cannot outlive the two
// processes, so nothing is left in /dev/shm whatever way they end.
type shmBuffer struct {
	file *os.File
	mem  []byte
	data []float32
}

// newSHM creates the (empty) file, before the worker starts.
func newSHM(name string) (*shmBuffer, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("create shared buffer: %w", err)
	}
	return &shmBuffer{file: os.NewFile(uintptr(fd), name)}, nil
}

// mapFloats sizes the file to n floats and maps it. The space is allocated
// up front: a tmpfs that is too small then fails here with ENOSPC instead
// of killing a process with SIGBUS at first touch.
func (s *shmBuffer) mapFloats(n int) error {
	if n <= 0 {
		return fmt.Errorf("shared buffer of %d floats", n)
	}
	size := int64(n) * 4
	fd := int(s.file.Fd())
	if err := syscall.Fallocate(fd, 0, 0, size); err != nil && !errors.Is(err, syscall.EOPNOTSUPP) {
		return fmt.Errorf("allocate %d bytes of shared buffer: %w", size, err)
	}
	if err := s.file.Truncate(size); err != nil {
		return fmt.Errorf("size shared buffer: %w", err)
	}
	mem, err := syscall.Mmap(fd, 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("map shared buffer: %w", err)
	}
	s.mem = mem
	s.data = unsafe.Slice((*float32)(unsafe.Pointer(&mem[0])), n)
	return nil
}

func (s *shmBuffer) close() {
	if s.mem != nil {
		_ = syscall.Munmap(s.mem)
	}
	s.mem, s.data = nil, nil
	_ = s.file.Close()
}
