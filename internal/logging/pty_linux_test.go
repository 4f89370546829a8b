package logging

import (
	"testing"
	"time"

	"github.com/hdet-dev/hdet/internal/terminal"
	"github.com/hdet-dev/hdet/internal/testenv"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAutoFollowsTheTerminal(t *testing.T) {
	master, slave := testenv.OpenPTY(t)
	t.Setenv("OMPI_COMM_WORLD_RANK", "") // not launched by mpirun
	l := New(Options{Rank: 0, Destination: slave})
	l.Info().Msg("to a person")
	buf := make([]byte, 4096)
	require.NoError(t, master.SetReadDeadline(time.Now().Add(5*time.Second)))
	n, err := master.Read(buf)
	require.NoError(t, err)
	assert.Contains(t, string(buf[:n]), "to a person")
	assert.NotContains(t, string(buf[:n]), `"message"`, "console format on a terminal")

	// Under mpirun the launcher's stderr decides; go test's parent writes
	// to no terminal here.
	t.Setenv("OMPI_COMM_WORLD_RANK", "0")
	if terminal.Launcher(2) {
		t.Skip("the test runner's parent writes to a terminal")
	}
	assert.False(t, reachesTerminal(slave))
	l = New(Options{Rank: 0, Destination: slave, Format: JSON})
	l.Info().Msg("to a tool")
	n, err = master.Read(buf)
	require.NoError(t, err)
	assert.Contains(t, string(buf[:n]), `"message":"to a tool"`, "--log-format json even on a terminal")
}
