package forkthread

import (
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A child started from a goroutine whose locked thread then exits keeps
// running: its Pdeathsig is tied to the fork thread, which does not exit.
func TestChildOutlivesTheCallersThread(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	done := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		done <- Start(cmd)
	}()
	require.NoError(t, <-done)
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	time.Sleep(200 * time.Millisecond) // time for the caller's thread to exit
	require.NoError(t, cmd.Process.Signal(syscall.Signal(0)), "the child died with the caller's thread")
	var ws syscall.WaitStatus
	pid, err := syscall.Wait4(cmd.Process.Pid, &ws, syscall.WNOHANG, nil)
	require.NoError(t, err)
	require.Zero(t, pid, "the child exited: %v", ws)
}

// Started directly from such a goroutine, the same child is killed: the
// test above would fail without the fork thread.
func TestPlainStartDiesWithTheThread(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	done := make(chan error)
	go func() {
		runtime.LockOSThread()
		done <- cmd.Start()
	}()
	require.NoError(t, <-done)
	err := cmd.Wait()
	require.Error(t, err)
	require.Equal(t, syscall.SIGKILL, err.(*exec.ExitError).Sys().(syscall.WaitStatus).Signal())
}
