// Package testenv holds what hdet's tests share across packages: the one
// rule for what a test needs from the machine (a tool, data, root, the
// project venv's PyTorch: skip on a developer box, fail under CI, where
// `make test` provides it), the interpreter of the PyTorch tests and a
// goroutine-safe output buffer.
package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// Python is the interpreter that runs the tests' PyTorch scripts: the
// project venv's, <repository root>/.venv/bin/python (`make venv` makes it
// from python/requirements.lock), or $HDET_PYTHON when set (the Makefile
// sets it to that venv's). Fixed when the package loads.
var Python = python()

func python() string {
	if p := os.Getenv("HDET_PYTHON"); p != "" {
		return p
	}
	return filepath.Join(moduleRoot(), ".venv", "bin", "python")
}

// moduleRoot is the directory holding go.mod, found by walking up from the
// working directory (a test runs in its package's folder); RepoRoot when
// the working directory is outside the repository.
func moduleRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		return RepoRoot()
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return RepoRoot()
		}
		dir = parent
	}
}

// How `make test` provides what a test needs, for Need's messages.
const (
	GetTool  = "`make test` installs it"
	GetTorch = "`make venv` creates .venv; `make test` runs it"
	GetData  = "run `make data`; `make test` runs it first"
	GetRoot  = "CI runs as root"
	GetPTY   = "a Linux machine with /dev/ptmx; CI has one"
)

// CI reports whether the tests run under CI (CI set), where everything a
// test needs must be there: `make test` installs it.
func CI() bool { return os.Getenv("CI") != "" }

// Need is the one rule for what a test needs from the machine: when missing
// is not nil (it says what is missing), the test is skipped on a developer
// box and fails under CI. get says how to get it (GetTool, GetData, ...).
func Need(t testing.TB, missing error, get string) {
	if missing == nil {
		return
	}
	t.Helper()
	if CI() {
		t.Fatalf("%v (required under CI: %s)", missing, get)
	} else {
		t.Skipf("%v (%s)", missing, get)
	}
}

// NeedTool returns the path of a tool the test needs (Need's rule).
func NeedTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Need(t, fmt.Errorf("%s is not installed: %w", name, err), GetTool)
	}
	return p
}

var torchCheck = sync.OnceValue(func() error { return exec.Command(Python, "-c", "import torch").Run() })

// NeedTorch needs PyTorch under Python, the project venv's (Need's rule).
func NeedTorch(t testing.TB) {
	t.Helper()
	if err := torchCheck(); err != nil {
		Need(t, fmt.Errorf("no torch for %s: %w", Python, err), GetTorch)
	}
}

// NeedRoot needs root for what (Need's rule): "the multi-host test bed
// (network namespaces)".
func NeedRoot(t testing.TB, what string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Need(t, fmt.Errorf("%s needs root", what), GetRoot)
	}
}

// NeedData returns dir when every one of files is in it; what names the
// data in the message (Need's rule, with `make data` to get it).
func NeedData(t testing.TB, what, dir string, files ...string) string {
	t.Helper()
	var errs []error
	for _, f := range files {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		Need(t, fmt.Errorf("%s is missing in %s: %w", what, dir, errors.Join(errs...)), GetData)
	}
	return dir
}

// NeedMNIST returns the MNIST folder `make data` fills (data/mnist in the
// repository), for tests that train on it (Need's rule).
func NeedMNIST(t testing.TB) string {
	t.Helper()
	return NeedData(t, "MNIST", filepath.Join(RepoRoot(), "data", "mnist"), "t10k-labels-idx1-ubyte.gz")
}

// RepoRoot is the repository's root directory (where go.mod is).
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(filepath.Dir(file)))
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
