// Command hdet runs Hyperparameter-Divergent Ensemble Training under MPI.
package main

import (
	"os"

	"github.com/hdet-dev/hdet/internal/cli"
	"github.com/hdet-dev/hdet/internal/signals"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "run" {
		// First: a signal during MPI, data or plugin setup is not lost.
		signals.Catch()
	}
	os.Exit(cli.Main(os.Args[1:]))
}
