// Package forkthread starts child processes from one OS thread that never
// exits. Linux sends a child's Pdeathsig when the thread that forked it
// ends, not the process, and a goroutine's thread may end while hdet lives
// on: children started here die with hdet and only with hdet.
package forkthread

import (
	"os/exec"
	"runtime"
	"sync"
)

type request struct {
	cmd  *exec.Cmd
	done chan error
}

var thread = sync.OnceValue(func() chan request {
	ch := make(chan request)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread lives as long as hdet
		for req := range ch {
			req.done <- req.cmd.Start()
		}
	}()
	return ch
})

// Start is cmd.Start on the fork thread.
func Start(cmd *exec.Cmd) error {
	req := request{cmd: cmd, done: make(chan error, 1)}
	thread() <- req
	return <-req.done
}
