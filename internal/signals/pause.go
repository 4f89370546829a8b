//go:build testhooks

package signals

import (
	"fmt"
	"os"
	"time"
)

// Pause is a setup point (see PauseEnv); it returns at once unless the
// environment names it ("" names none: an unset variable must not pause).
// Only binaries built with `-tags testhooks` link this one.
func Pause(point string) {
	if point == "" || os.Getenv(PauseEnv) != point {
		return
	}
	fmt.Fprintf(os.Stderr, "hdet: test pause at %s (pid %d)\n", point, os.Getpid())
	select {
	case <-got:
	case <-time.After(PauseLimit):
	}
}
