package logging

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func lines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m), l)
		out = append(out, m)
	}
	return out
}

func TestRankZeroLogsEventsWithRank(t *testing.T) {
	var buf bytes.Buffer
	l := New(Options{Rank: 0, Destination: &buf})
	l.Info().Msg("window done")
	got := lines(t, &buf)
	require.Len(t, got, 1)
	assert.Equal(t, float64(0), got[0]["rank"])
	assert.Equal(t, "window done", got[0]["message"])
}

func TestOtherRanksOnlyWarnUnlessAllRanks(t *testing.T) {
	var buf bytes.Buffer
	l := New(Options{Rank: 3, Destination: &buf})
	l.Info().Msg("quiet")
	l.Warn().Msg("loud")
	got := lines(t, &buf)
	require.Len(t, got, 1)
	assert.Equal(t, "loud", got[0]["message"])
	assert.Equal(t, float64(3), got[0]["rank"])

	buf.Reset()
	l = New(Options{Rank: 3, AllRanks: true, Destination: &buf})
	l.Info().Msg("now heard")
	assert.Len(t, lines(t, &buf), 1)
}
