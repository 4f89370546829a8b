// Package terminal tells whether an output stream reaches a person's
// terminal, under mpirun too, for the progress line and the log format.
package terminal

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/mattn/go-isatty"
)

// Is reports whether w is a terminal device.
func Is(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

// UnderMPI reports whether this process is a rank that Open MPI's mpirun
// launched, whose output mpirun forwards to its own.
func UnderMPI() bool { return os.Getenv("OMPI_COMM_WORLD_RANK") != "" }

// Launcher reports whether the launcher, this process's parent, writes its
// file descriptor fd (1 stdout, 2 stderr) to a terminal: where a rank's
// forwarded output ends up. A remote rank's parent is a daemon that does
// not.
func Launcher(fd uintptr) bool { return WritesToTerminal(os.Getppid(), fd) }

// WritesToTerminal reports whether process pid's file descriptor fd is a
// terminal device (Linux /proc; false where it cannot tell).
func WritesToTerminal(pid int, fd uintptr) bool {
	target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%d", pid, fd))
	return err == nil && (strings.HasPrefix(target, "/dev/pts/") || strings.HasPrefix(target, "/dev/tty"))
}
