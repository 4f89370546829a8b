package plugins

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func decodeLines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), line)
		out = append(out, m)
	}
	return out
}

func TestHCLogWritesZerologWithLevelNameAndArgs(t *testing.T) {
	var buf bytes.Buffer
	l := NewHCLogger(zerolog.New(&buf).Level(zerolog.DebugLevel)).Named("hdet-explorer-lr").With("instance", "lr/hidden")
	l.Debug("starting plugin", "path", "/bin/x", "args", []string{"a"})
	l.Warn("odd", "lonely")
	l.Error("failed", "error", errors.New("boom"))
	l.Trace("dropped: below the zerolog level")

	lines := decodeLines(t, &buf)
	require.Len(t, lines, 3)
	assert.Equal(t, "debug", lines[0]["level"])
	assert.Equal(t, "starting plugin", lines[0]["message"])
	assert.Equal(t, "hdet-explorer-lr", lines[0]["plugin"])
	assert.Equal(t, "lr/hidden", lines[0]["instance"])
	assert.Equal(t, "/bin/x", lines[0]["path"])
	assert.Equal(t, "lonely", lines[1]["EXTRA_VALUE_AT_END"])
	assert.Equal(t, "error", lines[2]["level"])
	assert.Equal(t, "boom", lines[2]["error"])
}

func TestHCLogLevelFollowsZerolog(t *testing.T) {
	l := NewHCLogger(zerolog.New(nil).Level(zerolog.WarnLevel))
	assert.Equal(t, hclog.Warn, l.GetLevel())
	assert.False(t, l.IsInfo())
	assert.True(t, l.IsWarn())
	l.SetLevel(hclog.Trace)
	assert.True(t, l.IsTrace())
	assert.Equal(t, hclog.Off, NewHCLogger(zerolog.Nop()).GetLevel())
}

func TestHCLogStandardLogger(t *testing.T) {
	var buf bytes.Buffer
	l := NewHCLogger(zerolog.New(&buf))
	l.StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Warn}).Print("from the std logger")
	lines := decodeLines(t, &buf)
	require.Len(t, lines, 1)
	assert.Equal(t, "warn", lines[0]["level"])
	assert.Equal(t, "from the std logger", lines[0]["message"])
}
