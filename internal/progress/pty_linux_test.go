package progress

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal pair, so auto mode is tested against a
// real terminal device.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	fd := int(m.Fd())
	require.NoError(t, unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0))
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	require.NoError(t, err)
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return m, s
}

func TestAutoOnTerminalRedrawsInPlace(t *testing.T) {
	master, slave := openPTY(t)
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

// TestWritesToTerminal checks the mpirun launcher test on real processes:
// one whose stdout is a pseudo-terminal, one whose stdout is a file.
func TestWritesToTerminal(t *testing.T) {
	_, slave := openPTY(t)
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
		got := writesToTerminal(cmd.Process.Pid)
		require.NoError(t, cmd.Process.Kill())
		_ = cmd.Wait()
		assert.Equal(t, tc.want, got, "stdout %s", tc.stdout.Name())
	}
}

func TestAutoUnderMPIFollowsTheLauncher(t *testing.T) {
	_, slave := openPTY(t)
	t.Setenv("OMPI_COMM_WORLD_RANK", "0")
	// The test's parent (go test) writes to a pipe or file, not a terminal
	// here, so a rank's pseudo-terminal stdout must not count as one.
	if writesToTerminal(os.Getppid()) {
		t.Skip("the test runner's parent writes to a terminal")
	}
	assert.False(t, New(slave, Auto, 0, 0).terminal)
}
