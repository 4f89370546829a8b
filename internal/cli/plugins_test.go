package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Bad input to `hdet plugins` exits 2 and names what was wrong; no process starts.
func TestPluginsUsageErrors(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "hdet-explorer-x")
	require.NoError(t, os.WriteFile(notExec, []byte("data"), 0o644))
	cases := map[string]struct {
		args []string
		want string
	}{
		"no subcommand":     {nil, "list"},
		"unknown":           {[]string{"show"}, "list, check"},
		"list argument":     {[]string{"list", "extra"}, "no arguments"},
		"list missing dir":  {[]string{"list", "--plugin-dir", filepath.Join(dir, "nope")}, "--plugin-dir"},
		"check no binary":   {[]string{"check"}, "one BINARY"},
		"check bad config":  {[]string{"check", "--config", "{", notExec}, "--config"},
		"check bad timeout": {[]string{"check", "--timeout", "0s", notExec}, "--timeout"},
		"check not exec":    {[]string{"check", notExec}, "not an executable"},
		"check missing":     {[]string{"check", "--plugin-dir", dir, "lr"}, "not an executable"},
		"check bad sha":     {[]string{"check", "--sha256", "xyz", "/bin/true"}, "64 hex digits"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var out, errb bytes.Buffer
			s := Streams{Out: &out, Err: &errb}
			assert.Equal(t, ExitUsage, exitCode(s, "plugins", runPlugins(s, tc.args)))
			assert.Contains(t, errb.String(), tc.want)
		})
	}
}

func TestPluginsListEmptyDir(t *testing.T) {
	var out, errb bytes.Buffer
	s := Streams{Out: &out, Err: &errb}
	dir := t.TempDir()
	require.NoError(t, runPlugins(s, []string{"list", "--plugin-dir", dir}))
	assert.Contains(t, out.String(), "no hdet-explorer-* binaries in "+dir)
}
