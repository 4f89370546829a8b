package runlock

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A second holder is refused, naming the first; after release it succeeds
// and, the file emptied, reports no stale holder.
func TestSecondAcquireIsRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	l, stale, err := Acquire(dir)
	require.NoError(t, err)
	assert.Nil(t, stale)
	_, _, err = Acquire(dir) // a second open file description: flock refuses it
	var held *HeldError
	require.ErrorAs(t, err, &held)
	assert.Equal(t, os.Getpid(), held.Holder.PID)
	assert.Contains(t, err.Error(), "in use by another hdet run (pid ")
	require.NoError(t, l.Release())
	l, stale, err = Acquire(dir)
	require.NoError(t, err)
	assert.Nil(t, stale)
	require.NoError(t, l.Release())
}

// A lock file naming a process that is gone is taken over.
func TestStaleLockIsTakenOver(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command("true")
	require.NoError(t, cmd.Run())
	dead := cmd.Process.Pid
	require.NoError(t, os.WriteFile(filepath.Join(dir, FileName),
		[]byte(`{"host":"elsewhere","pid":`+strconv.Itoa(dead)+`,"start":"2026-01-02T03:04:05Z"}`), 0o644))
	l, stale, err := Acquire(dir)
	require.NoError(t, err)
	require.NotNil(t, stale)
	assert.Equal(t, dead, stale.PID)
	assert.Equal(t, "elsewhere", stale.Host)
	require.NoError(t, l.Release())
}

func TestBadDirectories(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	ckFile := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(ckFile, "checkpoints"), nil, 0o644))
	for name, dir := range map[string]string{
		"a file":                file,
		"under a file":          filepath.Join(file, "run"),
		"a name too long":       filepath.Join(t.TempDir(), strings.Repeat("n", 300)),
		"checkpoints is a file": ckFile,
	} {
		_, _, err := Acquire(dir)
		assert.ErrorIs(t, err, ErrBadDir, name)
	}
}
