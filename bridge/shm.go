package bridge

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

// shmBuffer is a float32 file mapped shared into both hdet and the worker:
// the worker copies its parameters in, MPI all-reduces the mapping in place,
// the worker copies them back. Under /dev/shm it never touches a disk.
type shmBuffer struct {
	file *os.File
	mem  []byte
	data []float32
}

// shmDir is where buffers are created: tmpfs when the system has it.
func shmDir() string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}

// newSHM creates and maps a buffer of n floats. The space is allocated up
// front: a tmpfs that is too small then fails here with ENOSPC instead of
// killing the process with SIGBUS at first touch.
func newSHM(dir, pattern string, n int) (*shmBuffer, error) {
	if n <= 0 {
		return nil, fmt.Errorf("shared buffer of %d floats", n)
	}
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return nil, fmt.Errorf("create shared buffer: %w", err)
	}
	s := &shmBuffer{file: f}
	size := int64(n) * 4
	if err := syscall.Fallocate(int(f.Fd()), 0, 0, size); err != nil && !errors.Is(err, syscall.EOPNOTSUPP) {
		s.close()
		return nil, fmt.Errorf("allocate %d bytes of shared buffer %s: %w", size, f.Name(), err)
	}
	if err := f.Truncate(size); err != nil {
		s.close()
		return nil, fmt.Errorf("size shared buffer %s: %w", f.Name(), err)
	}
	if s.mem, err = syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED); err != nil {
		s.close()
		return nil, fmt.Errorf("map shared buffer %s: %w", f.Name(), err)
	}
	s.data = unsafe.Slice((*float32)(unsafe.Pointer(&s.mem[0])), n)
	return s, nil
}

func (s *shmBuffer) path() string { return s.file.Name() }

func (s *shmBuffer) close() {
	if s.mem != nil {
		_ = syscall.Munmap(s.mem)
	}
	s.mem, s.data = nil, nil
	name := s.file.Name()
	_ = s.file.Close()
	_ = os.Remove(name)
}
