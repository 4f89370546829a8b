package progress

import (
	"strings"
	"testing"
	"time"

	"github.com/hdet-dev/hdet/internal/terminal"
	"github.com/hdet-dev/hdet/internal/testenv"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAutoOnTerminalRedrawsInPlace(t *testing.T) {
	master, slave := testenv.OpenPTY(t)
	t.Setenv("OMPI_COMM_WORLD_RANK", "") // not launched by mpirun
	r := New(slave, Auto, 0, 0)
	require.True(t, r.terminal)
	r.Update(0, 100, 300, 1.5, 0.01)
	r.Update(0, 200, 300, 1.2, 0.01)
	r.Update(0, 300, 300, 1.0, 0.01)
	r.Done()

	var got strings.Builder
	buf := make([]byte, 4096)
	require.NoError(t, master.SetReadDeadline(time.Now().Add(5*time.Second)))
	for strings.Count(got.String(), "\x1b[K") < 3 || !strings.Contains(got.String(), "\n") {
		n, err := master.Read(buf)
		require.NoError(t, err, "read so far: %q", got.String())
		got.Write(buf[:n])
	}
	out := got.String()
	assert.Equal(t, 3, strings.Count(out, "\r\x1b[Kstep "), out)
	assert.Contains(t, out, "\r\x1b[Kstep 300/300 (100.0%)  loss 1")
	// One line in all: only Done ends it (the terminal turns \n into \r\n).
	assert.Equal(t, 1, strings.Count(out, "\n"), out)
}

func TestAutoUnderMPIFollowsTheLauncher(t *testing.T) {
	_, slave := testenv.OpenPTY(t)
	t.Setenv("OMPI_COMM_WORLD_RANK", "0")
	// The test's parent (go test) writes to a pipe or file, not a terminal
	// here, so a rank's pseudo-terminal stdout must not count as one.
	if terminal.Launcher(1) {
		t.Skip("the test runner's parent writes to a terminal")
	}
	assert.False(t, New(slave, Auto, 0, 0).terminal)
}
