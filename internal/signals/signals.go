// Package signals catches SIGUSR1 and SIGTERM (Slurm's warning before the
// time limit, preemption) from the first instruction of `hdet run`, so one
// that arrives while MPI, the data and the plugins start is remembered and
// honoured once the ranks can act on it, instead of being lost.
package signals

import (
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

var (
	once     sync.Once
	received atomic.Value // os.Signal: the first one caught
	got      = make(chan struct{})
)

// Catch starts catching SIGUSR1 and SIGTERM for the rest of the process
// (called again it does nothing). Only `hdet run` calls it: it replaces the
// default action (ending the process) with a request to checkpoint and stop.
func Catch() {
	once.Do(func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGUSR1, syscall.SIGTERM)
		go func() {
			for s := range ch {
				if received.CompareAndSwap(nil, s) {
					close(got)
				}
			}
		}()
	})
}

// Received reports whether a signal was caught; engine.Options.Stop polls it.
func Received() bool { return received.Load() != nil }

// Which is the first signal caught, nil if none.
func Which() os.Signal {
	s, _ := received.Load().(os.Signal)
	return s
}

// PauseEnv names a setup point where `hdet run` waits, in a binary built
// with `-tags testhooks` (the end-to-end tests build hdet so): it prints
// "hdet: test pause at POINT (pid PID)" on stderr and waits for a signal, at
// most PauseLimit, so a test can signal it at that moment. A release binary
// links the no-op Pause and ignores the variable.
const PauseEnv = "HDET_TEST_PAUSE"

// PauseLimit bounds a test pause.
const PauseLimit = 20 * time.Second
