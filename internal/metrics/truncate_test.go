package metrics

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A run resumed at the search pass's last window end keeps the commit
// written before that checkpoint (the relaunch does not commit again);
// one resumed earlier in the search pass drops it with the windows after.
func TestTruncateAfterKeepsACommitBeforeTheCheckpoint(t *testing.T) {
	recs := []Record{StartRecord{}, WindowRecord{Pass: 0, Window: 0, Step: 4}, WindowRecord{Pass: 0, Window: 1, Step: 8},
		CommitRecord{Step: 8}, WindowRecord{Pass: 1, Window: 0, Step: 4}}
	for _, c := range []struct {
		name       string
		pass, step int
		want       []string
	}{
		{"at the commit", 0, 8, []string{"start", "window", "window", "commit"}},
		{"before it", 0, 4, []string{"start", "window"}},
		{"in the main pass", 1, 4, []string{"start", "window", "window", "commit", "window"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "metrics.jsonl")
			w, err := OpenWriter(path)
			require.NoError(t, err)
			for _, r := range recs {
				require.NoError(t, w.Write(r))
			}
			require.NoError(t, w.Close())
			require.NoError(t, TruncateAfter(path, c.pass, c.step))
			got, _, err := ReadFile(path)
			require.NoError(t, err)
			var kinds []string
			for _, r := range got {
				kinds = append(kinds, r.Type())
			}
			assert.Equal(t, c.want, kinds)
		})
	}
}
