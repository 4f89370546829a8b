package signals

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A signal sent to the process is remembered, and a pause at the point
// named in the environment returns when it arrives.
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
	require.NoError(t, syscall.Kill(syscall.Getpid(), syscall.SIGUSR1))
	select {
	case <-done:
	case <-time.After(PauseLimit):
		t.Fatal("the pause did not end on the signal")
	}
	assert.True(t, Received())
	assert.Equal(t, syscall.SIGUSR1, Which())
	require.NoError(t, syscall.Kill(syscall.Getpid(), syscall.SIGTERM))
	Pause("elsewhere") // not named: returns at once
	assert.Equal(t, syscall.SIGUSR1, Which(), "the first signal is kept")
}
