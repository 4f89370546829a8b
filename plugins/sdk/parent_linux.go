package sdk

import (
	"os"
	"os/signal"

	"golang.org/x/sys/unix"
)

// parentDeathSignal is what the kernel sends when hdet dies. Not SIGKILL:
// Linux sends it when the *thread* that forked us exits, which in a Go host
// can happen while hdet lives on, so the handler checks the parent first.
const parentDeathSignal = unix.SIGHUP

// armParentDeathSignal asks the kernel for parentDeathSignal on hdet's death,
// then checks hdet did not die before the request.
func armParentDeathSignal(parent int) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, parentDeathSignal)
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(parentDeathSignal), 0, 0, 0); err != nil {
		return // the poll in watchParent still applies
	}
	if os.Getppid() != parent {
		os.Exit(3)
	}
	go func() {
		for range ch {
			if os.Getppid() != parent {
				os.Exit(3)
			}
		}
	}()
}
