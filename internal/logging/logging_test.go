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

func TestFormats(t *testing.T) {
	var buf bytes.Buffer
	l := New(Options{Rank: 0, Format: Console, Destination: &buf})
	l.Info().Float64("wall_ms", 12.5).Msg("run finished")
	out := buf.String()
	assert.Regexp(t, `^\d\d:\d\d:\d\d INF run finished `, out, "for people: time, level, message, then the fields")
	assert.Contains(t, out, "rank=0")
	assert.Contains(t, out, "wall_ms=12.5")
	assert.NotContains(t, out, "\x1b[", "no colours where the lines reach no terminal")

	for _, f := range []Format{Auto, JSON, ""} {
		buf.Reset()
		l = New(Options{Rank: 0, Format: f, Destination: &buf})
		l.Info().Msg("for tools")
		require.Len(t, lines(t, &buf), 1, "format %q to a pipe or file is JSON", f)
	}
}

func TestParseFormat(t *testing.T) {
	for s, want := range map[string]Format{"": Auto, "auto": Auto, "json": JSON, "console": Console} {
		f, err := ParseFormat(s)
		require.NoError(t, err)
		assert.Equal(t, want, f)
	}
	_, err := ParseFormat("text")
	assert.EqualError(t, err, `log format "text": want auto, json or console`)
}
