package metrics

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The typed records write the lines the one union struct before them
// wrote, byte for byte: testdata/everykind.jsonl (every field of every
// kind, NaN and infinite values, absent and empty ones) was written by
// that struct, and the report's fixtures are real runs of it. Each is read
// and written back, and TruncateAfter keeps what it keeps unchanged.
func TestRecordsWriteTodaysLines(t *testing.T) {
	files := []string{"testdata/everykind.jsonl"}
	fixtures, err := filepath.Glob("../report/testdata/*/metrics.jsonl")
	require.NoError(t, err)
	require.NotEmpty(t, fixtures)
	for _, path := range append(files, fixtures...) {
		t.Run(path, func(t *testing.T) {
			want, err := os.ReadFile(path)
			require.NoError(t, err)
			recs, truncated, err := ReadFile(path)
			require.NoError(t, err)
			require.False(t, truncated)
			require.Equal(t, strings.Count(string(want), "\n"), len(recs), "one record per line")

			out := filepath.Join(t.TempDir(), "metrics.jsonl")
			writeRecords(t, out, recs...)
			got, err := os.ReadFile(out)
			require.NoError(t, err)
			assert.Equal(t, string(want), string(got))

			// A resume in the main pass after its first window keeps
			// every line but the later windows and the end record.
			require.NoError(t, TruncateAfter(out, 1, 0))
			got, err = os.ReadFile(out)
			require.NoError(t, err)
			for _, line := range bytes.SplitAfter(got, []byte("\n")) {
				assert.Contains(t, string(want), string(line))
			}
		})
	}
}

// Every kind reads back as its own type, with the fields of its line.
func TestReadGivesEachKindItsType(t *testing.T) {
	recs, _, err := ReadFile("testdata/everykind.jsonl")
	require.NoError(t, err)
	var kinds []string
	for _, r := range recs {
		kinds = append(kinds, r.Type())
	}
	assert.Equal(t, []string{"start", "start", "window", "window", "window", "commit", "commit", "end", "end"}, kinds)
	starts, windows := Of[StartRecord](recs), Of[WindowRecord](recs)
	commits, ends := Of[CommitRecord](recs), Of[EndRecord](recs)
	assert.Equal(t, 150, starts[0].ResumedFrom)
	assert.Equal(t, 8, starts[0].WorldSize)
	assert.Equal(t, 1, windows[1].Pass)
	assert.True(t, windows[1].Anneal)
	require.Len(t, windows[0].Events, 2)
	assert.Equal(t, EventClamped, windows[0].Events[1].Kind)
	assert.Equal(t, 250, commits[0].Step)
	assert.True(t, commits[0].Committed["dropout"].Frozen)
	assert.Equal(t, Float(0.008), commits[0].Committed["lr"].PeakLR)
	assert.Equal(t, 702, ends[0].Step)
	assert.Equal(t, "b004e662950c4eb7", ends[0].Checksum)
}

// A kind this reader does not know (a later hdet's) is skipped.
func TestReadSkipsUnknownKinds(t *testing.T) {
	recs, truncated, err := Read(strings.NewReader(`{"type":"start"}` + "\n" + `{"type":"later","x":1}` + "\n" + `{"type":"end"}` + "\n"))
	require.NoError(t, err)
	assert.False(t, truncated)
	assert.Equal(t, []Record{StartRecord{}, EndRecord{}}, recs)
}
