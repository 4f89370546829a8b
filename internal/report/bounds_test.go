package report

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/metrics"
)

// A start record's rank count is not trusted to size what the report draws.
func TestLoadBoundsRanksFromTheFile(t *testing.T) {
	for _, start := range []string{`{"type":"start","ranks":1000000000}`, `{"type":"start","ranks":-4}`} {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, MetricsFile), []byte(start+"\n"), 0o644))
		_, err := Load(dir)
		require.ErrorIs(t, err, metrics.ErrCorrupt)
		assert.Contains(t, err.Error(), "start record: ranks")
	}
}
