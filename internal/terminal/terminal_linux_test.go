package terminal

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hdet-dev/hdet/internal/testenv"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWritesToTerminal checks the mpirun launcher test on real processes:
// one whose stdout is a pseudo-terminal, one whose stdout is a file.
func TestWritesToTerminal(t *testing.T) {
	_, slave := testenv.OpenPTY(t)
	file, err := os.Create(filepath.Join(t.TempDir(), "out"))
	require.NoError(t, err)
	defer file.Close()
	for _, tc := range []struct {
		stdout *os.File
		want   bool
	}{{slave, true}, {file, false}} {
		cmd := exec.Command("sleep", "30")
		cmd.Stdout = tc.stdout
		require.NoError(t, cmd.Start())
		got := WritesToTerminal(cmd.Process.Pid, 1)
		require.NoError(t, cmd.Process.Kill())
		_ = cmd.Wait()
		assert.Equal(t, tc.want, got, "stdout %s", tc.stdout.Name())
	}
}

func TestIs(t *testing.T) {
	_, slave := testenv.OpenPTY(t)
	assert.True(t, Is(slave))
	file, err := os.Create(filepath.Join(t.TempDir(), "out"))
	require.NoError(t, err)
	defer file.Close()
	assert.False(t, Is(file))
	assert.False(t, Is(new(strings.Builder)), "no file descriptor")
}
