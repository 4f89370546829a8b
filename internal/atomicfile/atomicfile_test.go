package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
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
