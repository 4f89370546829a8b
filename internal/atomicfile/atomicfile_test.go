package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWriteReplacesAndLeavesNoTemp(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	require.NoError(t, Write(p, []byte("one")))
	require.NoError(t, Write(p, []byte("two")))
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	assert.Equal(t, "two", string(b))
	fi, err := os.Stat(p)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), fi.Mode().Perm())
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file left")
}

func TestFailedFillKeepsTheOldFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	require.NoError(t, Write(p, []byte("old")))
	boom := errors.New("boom")
	err := WriteFunc(p, func(w io.Writer) error {
		_, _ = w.Write([]byte("half"))
		return boom
	})
	require.ErrorIs(t, err, boom)
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	assert.Equal(t, "old", string(b))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "the temporary file is removed")
}

func TestWriteIntoMissingDirFails(t *testing.T) {
	err := Write(filepath.Join(t.TempDir(), "no", "f"), []byte("x"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

// A full disk's error names the directory and its free space; other
// errors pass through unchanged.
func TestNoSpaceNamesTheFreeSpace(t *testing.T) {
	dir := t.TempDir()
	full := &os.PathError{Op: "write", Path: filepath.Join(dir, ".tmp-f-1"), Err: syscall.ENOSPC}
	err := NoSpace(full, dir)
	require.ErrorIs(t, err, syscall.ENOSPC)
	assert.Regexp(t, `^write .*/\.tmp-f-1: no space left on device \(the file system of `+regexp.QuoteMeta(dir)+` has [0-9.]+ [KMGTP]?i?B free of [0-9.]+ [KMGTP]?i?B\)$`, err.Error())

	quota := NoSpace(&os.PathError{Op: "write", Path: "x", Err: syscall.EDQUOT}, dir)
	assert.Contains(t, quota.Error(), "free of")

	other := errors.New("boom")
	assert.Same(t, other, NoSpace(other, dir))
	assert.NoError(t, NoSpace(nil, dir))
	assert.Equal(t, "512 B", bytesText(512))
	assert.Equal(t, "1.5 KiB", bytesText(1536))
	assert.Equal(t, "8.0 MiB", bytesText(8<<20))
}

// RemoveStale removes what a killed writer left and nothing else.
func TestRemoveStaleLeavesOtherFiles(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, Write(filepath.Join(dir, "keep"), []byte("x")))
	for _, name := range []string{".tmp-ckpt-000000000010.hdet-123", ".tmp-metrics.jsonl-9"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte("half"), 0o644))
	}
	require.NoError(t, os.Mkdir(filepath.Join(dir, ".tmp-dir"), 0o755))
	removed, err := RemoveStale(dir)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{".tmp-ckpt-000000000010.hdet-123", ".tmp-metrics.jsonl-9"}, removed)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.Equal(t, []string{".tmp-dir", "keep"}, names, "a directory is not a writer's temporary file")

	removed, err = RemoveStale(filepath.Join(dir, "missing"))
	require.NoError(t, err)
	assert.Empty(t, removed)
}
