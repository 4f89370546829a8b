package signals

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A signal sent to the process is remembered. With -tags testhooks a pause
// at the point named in the environment holds until the signal arrives;
// without, Pause returns at once whatever the environment says.
func TestCaughtSignalIsRemembered(t *testing.T) {
	Catch()
	Catch()
	assert.False(t, Received())
	t.Setenv(PauseEnv, "here")
	done := make(chan struct{})
	go func() {
		Pause("here")
		close(done)
	}()
	if hooked {
		select {
		case <-done:
			t.Fatal("the pause ended before any signal")
		case <-time.After(100 * time.Millisecond):
		}
	} else {
		select {
		case <-done:
		case <-time.After(PauseLimit):
			t.Fatal("a build without testhooks paused")
		}
	}
	require.NoError(t, syscall.Kill(syscall.Getpid(), syscall.SIGUSR1))
	select {
	case <-done:
	case <-time.After(PauseLimit):
		t.Fatal("the pause did not end on the signal")
	}
	require.Eventually(t, Received, PauseLimit, 5*time.Millisecond)
	assert.Equal(t, syscall.SIGUSR1, Which())
	require.NoError(t, syscall.Kill(syscall.Getpid(), syscall.SIGTERM))
	Pause("elsewhere") // not named: returns at once
	assert.Equal(t, syscall.SIGUSR1, Which(), "the first signal is kept")
}
