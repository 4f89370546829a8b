package metrics

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A record that cannot be written is held, Sync fails while it is (so no
// checkpoint covers it), and the next write puts it in its place: no window
// is lost, none written twice, the file stays whole.
func TestWriterHoldsWhatAFullDiskRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "metrics.jsonl")
	w, err := OpenWriter(path)
	require.NoError(t, err)
	require.NoError(t, w.Write(StartRecord{Ranks: 2}))

	good := w.f
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	require.NoError(t, err)
	defer full.Close()
	w.f = full // every write now fails with ENOSPC
	err = w.Write(WindowRecord{Window: 0, Step: 5})
	require.ErrorIs(t, err, syscall.ENOSPC)
	assert.Contains(t, err.Error(), "1 record(s) held in memory")
	assert.Contains(t, err.Error(), "free of", "the message says how much room there is")
	err = w.Write(WindowRecord{Window: 1, Step: 10})
	assert.Contains(t, err.Error(), "2 record(s) held")
	require.Error(t, w.Sync(), "no checkpoint while records are held")

	w.f = good // the disk has room again
	require.NoError(t, w.Sync(), "Sync writes what was held")
	require.NoError(t, w.Write(WindowRecord{Window: 2, Step: 15}))
	require.NoError(t, w.Close())
	recs, truncated, err := ReadFile(path)
	require.NoError(t, err)
	assert.False(t, truncated)
	var windows []int
	for _, r := range Of[WindowRecord](recs) {
		windows = append(windows, r.Window)
	}
	assert.Equal(t, []int{0, 1, 2}, windows)
}

// On a real full file system a write can be short: the part of a line
// that reached the file is cut off again, so the next record does not
// land after half a line (which would make the file unreadable).
func TestWriterCutsAShortWrite(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("mounting a tmpfs needs root; CI runs as root")
		}
		t.Skip("mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", dir).CombinedOutput()
	require.NoError(t, err, "%s", out)
	defer func() { _ = exec.Command("umount", dir).Run() }()
	path := filepath.Join(dir, "metrics.jsonl")
	w, err := OpenWriter(path)
	require.NoError(t, err)
	require.NoError(t, w.Write(StartRecord{Ranks: 2}))
	// Fill the rest of the file system but for less than a record.
	var st syscall.Statfs_t
	require.NoError(t, syscall.Statfs(dir, &st))
	fill, err := os.Create(filepath.Join(dir, "fill"))
	require.NoError(t, err)
	_, _ = fill.Write(make([]byte, int(st.Bavail)*int(st.Bsize)-100))
	require.NoError(t, fill.Close())

	big := WindowRecord{Window: 0, Step: 5, Losses: make([]Float, 400)}
	var lastErr error
	for lastErr == nil {
		lastErr = w.Write(big)
		big.Window, big.Step = big.Window+1, big.Step+5
	}
	require.ErrorIs(t, lastErr, syscall.ENOSPC)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.True(t, strings.HasSuffix(string(b), "\n"), "no part of a line is left: %d bytes, %q... err %v", len(b), b[max(0, len(b)-80):], lastErr)
	require.NoError(t, os.Remove(filepath.Join(dir, "fill")))
	require.NoError(t, w.Write(EndRecord{}))
	require.NoError(t, w.Close())
	recs, truncated, err := ReadFile(path)
	require.NoError(t, err)
	assert.False(t, truncated)
	for i, r := range Of[WindowRecord](recs) {
		assert.Equal(t, i, r.Window, "each window once, in order")
	}
	assert.Len(t, Of[WindowRecord](recs), len(recs)-2)
	assert.Equal(t, TypeEnd, recs[len(recs)-1].Type())
}
