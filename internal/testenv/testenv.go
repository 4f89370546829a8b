// Package testenv holds what hdet's tests share across packages: finding
// the tools a test needs (skip on a developer box, fail under CI) and a
// goroutine-safe output buffer.
package testenv

import (
	"bytes"
	"os"
	"os/exec"
	"sync"
	"testing"
)

// Python is Debian's interpreter, the one python3-torch installs into.
const Python = "/usr/bin/python3"

// NeedTool returns the path of a tool the test needs. Without it the test
// is skipped on a developer box but fails under CI, where `make test`
// installs it.
func NeedTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not installed; `make test` installs it: %v", name, err)
		}
		t.Skipf("%s is not installed (run `make test`, which installs it)", name)
	}
	return p
}

var torchCheck = sync.OnceValue(func() error { return exec.Command(Python, "-c", "import torch").Run() })

// NeedTorch skips without Debian's PyTorch on a developer box and fails
// under CI.
func NeedTorch(t testing.TB) {
	t.Helper()
	if err := torchCheck(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s with torch is required under CI (apt-get install -y python3-torch): %v", Python, err)
		}
		t.Skipf("no torch for %s (apt-get install -y python3-torch): %v", Python, err)
	}
}

// SyncBuffer is a bytes.Buffer safe to write from several goroutines (a
// logger, exec's output copier) while a test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
