// Command hdet runs Hyperparameter-Divergent Ensemble Training under MPI.
package main

import (
	"os"

	"github.com/hdet-dev/hdet/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:])) }
