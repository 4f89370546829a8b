// Package cli implements the hdet command line. Each command lives in its own
// file; this file dispatches and defines the exit codes.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
)

// Exit codes (DESIGN §3).
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
)

// UsageError marks an error caused by what the user typed or configured; it
// makes hdet exit with ExitUsage.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef builds a UsageError.
func Usagef(format string, a ...any) error {
	return &UsageError{Err: fmt.Errorf(format, a...)}
}

// command is one hdet subcommand.
type command struct {
	summary string
	run     func(io Streams, args []string) error
}

// Streams are the command's standard streams, replaceable in tests.
type Streams struct {
	Out, Err io.Writer
}

var commands = map[string]command{
	"version":  {"print the version", runVersion},
	"schedule": {"print a schedule step by step (onecycle: PyTorch's OneCycleLR)", runSchedule},
	"run":      {"run HDET training under mpirun or srun (or --self-check MPI)", runRun},
	"plugins":  {"list explorer plugins or check one", runPlugins},
	"devices":  {"list this node's NVIDIA GPUs (CPU mode without a driver)", runDevices},
	"bench":    {"measure the converge allreduce (bench allreduce)", runBench},
	"sbatch":   {"print an sbatch script that runs a config under Slurm", runSbatch},
	"report":   {"plots, summary.md and index.html of a run (or --compare runs)", runReport},
}

// Version is set at build time with -ldflags "-X .../internal/cli.Version=...".
var Version = "dev"

func runVersion(s Streams, args []string) error {
	if len(args) > 0 {
		return Usagef("version takes no arguments, got %q", args)
	}
	fmt.Fprintf(s.Out, "hdet %s\n", Version)
	return nil
}

// Main runs hdet with args (without the program name) and returns the exit code.
func Main(args []string) int {
	s := Streams{Out: os.Stdout, Err: os.Stderr}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(s.Err)
		if len(args) == 0 {
			return ExitUsage
		}
		return ExitOK
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(s.Err, "hdet: unknown command %q\n", args[0])
		usage(s.Err)
		return ExitUsage
	}
	return exitCode(s, args[0], cmd.run(s, args[1:]))
}

func exitCode(s Streams, name string, err error) int {
	if err == nil {
		return ExitOK
	}
	if errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	fmt.Fprintf(s.Err, "hdet %s: %v\n", name, err)
	var ue *UsageError
	if errors.As(err, &ue) {
		return ExitUsage
	}
	return ExitFailure
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: hdet COMMAND [ARGS]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'hdet COMMAND -h' for a command's flags.")
}

// newFlagSet returns a flag set whose parse errors are usage errors and whose
// help goes to s.Err.
func newFlagSet(s Streams, name string) *flag.FlagSet {
	fs := flag.NewFlagSet("hdet "+name, flag.ContinueOnError)
	fs.SetOutput(s.Err)
	return fs
}

// parseFlags parses args, turning flag errors into usage errors.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &UsageError{Err: err}
	}
	return nil
}

// parseInterspersed parses flags that may come before or after positional
// arguments (hdet sbatch CONFIG --nodes 2), where flag.Parse alone stops at
// the first positional one. Everything after "--" is positional.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}
