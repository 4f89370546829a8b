// Command hdet runs Hyperparameter-Divergent Ensemble Training under MPI.
package main

import (
	"fmt"
	"os"
	"runtime"

	"github.com/hdet-dev/hdet/internal/cli"
	"github.com/hdet-dev/hdet/internal/signals"
	"github.com/hdet-dev/hdet/mpi"
)

// MPI_Finalize must run on the thread that called MPI_Init: the main
// goroutine, which runs the command, stays on the main thread.
func init() { runtime.LockOSThread() }

func main() {
	if len(os.Args) > 1 && os.Args[1] == "run" {
		// First: a signal during MPI, data or plugin setup is not lost.
		signals.Catch()
	}
	out := cli.Main(os.Args[1:])
	code := out.Code
	if out.MPI {
		if out.Abort {
			mpi.Abort(code) // a rank may be blocked in a collective: end the whole job
		}
		if err := mpi.Finalize(); err != nil {
			fmt.Fprintf(os.Stderr, "hdet: %v\n", err)
			code = max(code, cli.ExitFailure)
		}
	}
	// After MPI_Finalize: the other ranks are free while rank 0 writes the report.
	if out.After != nil {
		if err := out.After(); err != nil {
			fmt.Fprintf(os.Stderr, "hdet: %v\n", err)
			code = max(code, cli.ExitFailure)
		}
	}
	os.Exit(code)
}
