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
	data []float32
	// old mappings stay mapped until close: a slice handed out before a
	// resize must not turn into a segfault.
	old [][]byte
	cur []byte
}

// shmDir is where buffers are created: tmpfs when the system has it.
func shmDir() string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}

func newSHM(dir, pattern string, floats int) (*shmBuffer, error) {
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return nil, fmt.Errorf("create shared buffer: %w", err)
	}
	s := &shmBuffer{file: f}
	if err := s.resize(floats); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// resize makes the mapping hold n floats, growing the file when needed. The
// space is allocated up front: a tmpfs that is too small then fails here
// with ENOSPC instead of killing the process with SIGBUS at first touch.
func (s *shmBuffer) resize(n int) error {
	if n <= 0 {
		return fmt.Errorf("shared buffer of %d floats", n)
	}
	if n == len(s.data) {
		return nil
	}
	size := int64(n) * 4
	st, err := s.file.Stat()
	if err != nil {
		return fmt.Errorf("shared buffer: %w", err)
	}
	if st.Size() < size {
		if err := syscall.Fallocate(int(s.file.Fd()), 0, 0, size); err != nil && !errors.Is(err, syscall.EOPNOTSUPP) {
			return fmt.Errorf("allocate %d bytes of shared buffer %s: %w", size, s.file.Name(), err)
		}
		if err := s.file.Truncate(size); err != nil {
			return fmt.Errorf("size shared buffer %s: %w", s.file.Name(), err)
		}
	}
	b, err := syscall.Mmap(int(s.file.Fd()), 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("map shared buffer %s: %w", s.file.Name(), err)
	}
	if s.cur != nil {
		s.old = append(s.old, s.cur)
	}
	s.cur = b
	s.data = unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n)
	return nil
}

func (s *shmBuffer) path() string { return s.file.Name() }

func (s *shmBuffer) close() {
	for _, b := range append(s.old, s.cur) {
		if b != nil {
			_ = syscall.Munmap(b)
		}
	}
	s.old, s.cur, s.data = nil, nil, nil
	name := s.file.Name()
	_ = s.file.Close()
	_ = os.Remove(name)
}
