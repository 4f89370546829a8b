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

	"github.com/hdet-dev/hdet/internal/session"
)

// Exit codes (docs/design.md §5).
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
)

// UsageError marks an error caused by what the user typed or configured; it
// makes hdet exit with ExitUsage. The session's setup raises the same type.
type UsageError = session.UsageError

// Usagef builds a UsageError.
func Usagef(format string, a ...any) error {
	return &UsageError{Err: fmt.Errorf(format, a...)}
}

// Outcome is how a command ended, for main: the exit code and, after `hdet
// run` started MPI, whether to finalise it or abort the job, and what to do
// after MPI_Finalize (rank 0's report).
type Outcome struct {
	Code  int
	MPI   bool
	Abort bool
	After func() error
}

// command is one hdet subcommand; run ends MPI-free commands, outcome the
// one that starts MPI.
type command struct {
	summary string
	run     func(io Streams, args []string) error
	outcome func(io Streams, args []string) Outcome
}

// Streams are the command's standard streams, replaceable in tests.
type Streams struct {
	Out, Err io.Writer
}

var commands = map[string]command{
	"version":  {summary: "print the version", run: runVersion},
	"schedule": {summary: "print a schedule step by step (onecycle: PyTorch's OneCycleLR)", run: runSchedule},
	"run":      {summary: "run HDET training under mpirun or srun (or --self-check MPI)", outcome: runRun},
	"plugins":  {summary: "list explorer plugins or check one", run: runPlugins},
	"devices":  {summary: "list this node's NVIDIA GPUs (CPU mode without a driver)", run: runDevices},
	"bench":    {summary: "measure the converge allreduce (bench allreduce)", run: runBench},
	"sbatch":   {summary: "print an sbatch script that runs a config under Slurm", run: runSbatch},
	"report":   {summary: "plots, summary.md and index.html of a run (or --compare runs)", run: runReport},
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

// Main runs hdet with args (without the program name) and returns how it
// ended; main ends MPI when the outcome says so.
func Main(args []string) Outcome {
	s := Streams{Out: os.Stdout, Err: os.Stderr}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(s.Err)
		if len(args) == 0 {
			return Outcome{Code: ExitUsage}
		}
		return Outcome{Code: ExitOK}
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(s.Err, "hdet: unknown command %q\n", args[0])
		usage(s.Err)
		return Outcome{Code: ExitUsage}
	}
	if cmd.outcome != nil {
		return cmd.outcome(s, args[1:])
	}
	return Outcome{Code: exitCode(s, args[0], cmd.run(s, args[1:]))}
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
