package metrics

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func writeRecords(t *testing.T, path string, recs ...Record) {
	t.Helper()
	w, err := OpenWriter(path)
	require.NoError(t, err)
	for _, r := range recs {
		require.NoError(t, w.Write(r))
	}
	require.NoError(t, w.Close())
}

func TestWriterReaderRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "metrics.jsonl")
	writeRecords(t, path,
		StartRecord{Ranks: 2, TotalSteps: 10, WindowSteps: 5},
		WindowRecord{Window: 0, Step: 5, Losses: []Float{Float(math.NaN()), 1.5}},
		EndRecord{WallSeconds: 3})

	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, 3, strings.Count(string(b), "\n"), "one line per record")
	assert.Contains(t, string(b), `"losses":[null,1.5]`)

	recs, truncated, err := ReadFile(path)
	require.NoError(t, err)
	assert.False(t, truncated)
	require.Len(t, recs, 3)
	assert.Equal(t, 10, recs[0].(StartRecord).TotalSteps)
	assert.True(t, math.IsNaN(float64(recs[1].(WindowRecord).Losses[0])))
	assert.Equal(t, Float(1.5), recs[1].(WindowRecord).Losses[1])
	assert.Equal(t, 3.0, recs[2].(EndRecord).WallSeconds)
}

func TestReadTruncatedLastLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "metrics.jsonl")
	writeRecords(t, path,
		StartRecord{Ranks: 2},
		WindowRecord{Window: 0, Step: 5})
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString(`{"type":"window","window":1,"st`)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	recs, truncated, err := ReadFile(path)
	require.NoError(t, err)
	assert.True(t, truncated)
	assert.Len(t, recs, 2)

	// A resumed writer cuts the partial line, so the file reads clean again.
	writeRecords(t, path, WindowRecord{Window: 1, Step: 10})
	recs, truncated, err = ReadFile(path)
	require.NoError(t, err)
	assert.False(t, truncated)
	require.Len(t, recs, 3)
	assert.Equal(t, 10, recs[2].(WindowRecord).Step)
}

func TestReadErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		text string
		want error
	}{
		"not json":        {"hello world\nsecond line\n", ErrCorrupt},
		"single bad line": {"hello", ErrCorrupt},
		"bad middle line": {`{"type":"start"}` + "\nxx\n" + `{"type":"end"}` + "\n", ErrCorrupt},
		"no type":         {`{"type":"start"}` + "\n{}\n" + `{"type":"end"}` + "\n", ErrCorrupt},
		"empty":           {"", ErrNoStart},
		"no start":        {`{"type":"window","window":0}` + "\n", ErrNoStart},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := Read(strings.NewReader(tc.text))
			assert.ErrorIs(t, err, tc.want)
		})
	}
}

func TestReadSkipsBlankLines(t *testing.T) {
	recs, truncated, err := Read(strings.NewReader("\n" + `{"type":"start"}` + "\n\n" + `{"type":"end"}` + "\n\n"))
	require.NoError(t, err)
	assert.False(t, truncated)
	assert.Len(t, recs, 2)
}

// The writer syncs by batch: every SyncWindows window records, and after
// every other record.
func TestWriterSyncsByBatch(t *testing.T) {
	w, err := OpenWriter(filepath.Join(t.TempDir(), "metrics.jsonl"))
	require.NoError(t, err)
	defer w.Close()
	require.NoError(t, w.Write(StartRecord{}))
	assert.Equal(t, 0, w.unsynced)
	for i := 1; i < SyncWindows; i++ {
		require.NoError(t, w.Write(WindowRecord{Window: i}))
	}
	assert.Equal(t, SyncWindows-1, w.unsynced, "no sync before the batch is full")
	require.NoError(t, w.Write(WindowRecord{}))
	assert.Equal(t, 0, w.unsynced, "synced once the batch is full")
	require.NoError(t, w.Write(WindowRecord{}))
	require.NoError(t, w.Sync())
	assert.Equal(t, 0, w.unsynced)
}

func TestReadRefusesAnEndlessLine(t *testing.T) {
	line := `{"type":"start","x":"` + strings.Repeat("a", MaxLine) + "\"}\n"
	_, _, err := Read(strings.NewReader(line))
	require.ErrorIs(t, err, ErrCorrupt)
	assert.Contains(t, err.Error(), "line 1: line longer than")
}
