// Package tests holds hdet's end-to-end tests: they build the real binaries
// and launch them under real mpirun, real plugins and a real Slurm.
package tests

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hdet-dev/hdet/internal/testenv"

	"github.com/stretchr/testify/require"
)

// repoRoot is the repository root (the parent of tests/).
func repoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	require.True(t, ok)
	return filepath.Dir(filepath.Dir(file))
}

var (
	buildMu    sync.Mutex
	buildCache = map[string]string{}
	binDir     string
)

// testTags are the build tags of every binary the tests build: testhooks
// links the setup pauses that tests signal at (signals.PauseEnv), which
// release binaries leave out.
const testTags = "testhooks"

// buildBinary builds the main package pkg (relative to the module root, like
// "./cmd/hdet") once per test process and returns the binary's path.
func buildBinary(t testing.TB, pkg string) string {
	t.Helper()
	return buildTagged(t, pkg, filepath.Base(pkg), testTags)
}

// buildTagged builds pkg with the build tags into the binary name.
func buildTagged(t testing.TB, pkg, name, tags string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := buildCache[name]; ok {
		return p
	}
	if binDir == "" {
		d, err := os.MkdirTemp("", "hdet-e2e-bin-")
		require.NoError(t, err)
		binDir = d
	}
	out := filepath.Join(binDir, name)
	cmd := exec.Command("go", "build", "-tags", tags, "-o", out, pkg)
	cmd.Dir = repoRoot(t)
	cmd.Env = append(os.Environ(), "CGO_CFLAGS=-Wno-deprecated-declarations")
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build %s:\n%s", pkg, b)
	buildCache[name] = out
	return out
}

// mpirunCmd prepares `mpirun -np n --oversubscribe args...` as root-safe.
func mpirunCmd(ctx context.Context, t testing.TB, n int, args ...string) *exec.Cmd {
	t.Helper()
	mpirun := testenv.NeedTool(t, "mpirun")
	full := append([]string{"-np", strconv.Itoa(n), "--oversubscribe", "--bind-to", "none"}, args...)
	cmd := exec.CommandContext(ctx, mpirun, full...)
	cmd.Env = append(os.Environ(), "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
	cmd.WaitDelay = 10 * time.Second
	return cmd
}
