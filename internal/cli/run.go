package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/rs/zerolog"

	"github.com/hdet-dev/hdet/examples"
	"github.com/hdet-dev/hdet/internal/engine"
	"github.com/hdet-dev/hdet/internal/logging"
	"github.com/hdet-dev/hdet/internal/session"
	"github.com/hdet-dev/hdet/internal/signals"
	"github.com/hdet-dev/hdet/mpi"
)

const runHelp = `usage: hdet run [CONFIG.yaml] [flags]

Runs HDET on every rank: launch it with mpirun -np N or srun, one rank per
GPU or CPU slot. Without CONFIG.yaml it runs the embedded default
(examples/mnist.yaml). --self-check instead checks the MPI setup: every rank
prints its rank, size and host, and one allreduce is verified.

flags:
`

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

type runFlags struct {
	sets        stringList
	runDir      string
	pluginDir   string
	progress    string
	logAllRanks bool
	logFormat   logging.Format
	debug       bool
	debugColl   bool
	selfCheck   bool
	noRequeue   bool
	worker      bool
	shareGPUs   bool
	path        string
	command     []string // after --, with --worker
	data        []byte   // the config
	source      string   // where the config came from
}

// parseRun reads hdet run's command line and its config file.
func parseRun(s Streams, args []string) (runFlags, error) {
	var f runFlags
	fs := newFlagSet(s, "run")
	fs.Var(&f.sets, "set", "override a config field, `key=value` (repeatable), e.g. train.window=50")
	fs.StringVar(&f.runDir, "run-dir", "", "run directory (overrides run.dir)")
	fs.StringVar(&f.pluginDir, "plugin-dir", "", "explorer plugin directory (default $HDET_PLUGIN_DIR, then plugins/ next to hdet)")
	fs.StringVar(&f.progress, "progress", "", "progress display: auto, plain or none (overrides run.progress)")
	fs.BoolVar(&f.logAllRanks, "log-all-ranks", false, "log info-level events on every rank, not only rank 0")
	fs.Func("log-format", "log lines: auto (for people on a terminal, JSON otherwise), json or console", func(v string) (err error) {
		f.logFormat, err = logging.ParseFormat(v)
		return err
	})
	fs.BoolVar(&f.debug, "debug", false, "debug logging (per-window checksums and values)")
	fs.BoolVar(&f.debugColl, "debug-collectives", false, "log every collective of the window loop with its duration, on every rank")
	fs.BoolVar(&f.selfCheck, "self-check", false, "check the MPI setup instead of training")
	fs.BoolVar(&f.worker, "worker", false, "train an external process instead of the built-in workload: hdet run [CONFIG] --worker -- CMD ARGS...")
	fs.BoolVar(&f.shareGPUs, "share-gpus", false, "let several ranks share a GPU when a node has more ranks than GPUs (a --worker script then sees its one GPU as cuda:0)")
	fs.StringVar(&f.path, "allreduce-path", "auto", "how the converge allreduce reaches MPI: auto, device, staged or host")
	fs.BoolVar(&f.noRequeue, "no-requeue", false, "under Slurm, do not requeue the job after a signal made the run checkpoint and stop")
	fs.Usage = func() { fmt.Fprint(s.Err, runHelp); fs.PrintDefaults() }
	if i := slices.Index(args, "--"); i >= 0 {
		args, f.command = args[:i], args[i+1:]
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return f, err
	}
	if f.worker != (len(f.command) > 0) {
		return f, Usagef("--worker needs the worker's command after --, and a command after -- needs --worker (hdet run [CONFIG] --worker -- python3 train.py ...)")
	}
	if f.worker {
		if _, err := exec.LookPath(f.command[0]); err != nil {
			return f, Usagef("--worker command: %v", err)
		}
	}
	if len(pos) > 1 {
		return f, Usagef("run takes at most one CONFIG.yaml, got %q", pos)
	}
	f.data, f.source = examples.MNIST, "embedded examples/mnist.yaml"
	if f.worker {
		f.data, f.source = nil, "the worker script (no config file)"
	}
	if len(pos) == 1 {
		b, err := os.ReadFile(pos[0])
		if err != nil {
			return f, Usagef("read config: %v", err)
		}
		f.data, f.source = b, pos[0]
	}
	if f.runDir != "" {
		f.sets = append(f.sets, "run.dir="+f.runDir)
	}
	if f.progress != "" {
		f.sets = append(f.sets, "run.progress="+f.progress)
	}
	return f, nil
}

// runRun parses the command line, starts MPI and runs the session. It
// leaves MPI running: main finalises (or aborts) it, then writes the
// report, so that no rank waits on rank 0's report.
func runRun(s Streams, args []string) Outcome {
	f, err := parseRun(s, args)
	if err != nil {
		return Outcome{Code: exitCode(s, "run", err)}
	}
	// SIGUSR1/SIGTERM (Slurm's warning, preemption), caught since main's
	// first line, and a first Ctrl-C make the ranks agree to checkpoint and
	// stop (before training, or at the next converge).
	signals.Catch() // main already did; here for callers of Main
	ctx, cancel, interrupted := runSignals()
	defer cancel()
	signals.Pause("mpi")
	if err := mpi.Init(); err != nil {
		return Outcome{Code: exitCode(s, "run", fmt.Errorf("MPI: %w", err))}
	}
	w := mpi.World()
	log := logging.New(logging.Options{Rank: w.Rank(), AllRanks: f.logAllRanks, Debug: f.debug, Format: f.logFormat})
	if f.selfCheck { // every rank took part in its one allreduce: MPI ends normally
		return Outcome{Code: exitCode(s, "run", selfCheck(s, w)), MPI: true}
	}
	out, err := session.Run(ctx, session.Options{
		World: w, Out: s.Out, Log: log, Config: f.data, Source: f.source, Sets: f.sets, PluginDir: f.pluginDir,
		Worker: f.command, ShareGPUs: f.shareGPUs, AllreducePath: f.path, CUDAAware: mpi.CUDAAware(), DebugCollectives: f.debugColl,
		NoRequeue: f.noRequeue, Host: mpi.ProcessorName, Abort: mpi.Abort,
		Stop:  func() bool { return signals.Received() || interrupted.Load() },
		Split: func(color, key int) (session.World, error) { return splitWorld(w, color, key) },
	})
	return runOutcome(s, log, out, err)
}

// runSignals: a first SIGINT (Ctrl-C) raises stop, on which the ranks agree
// to checkpoint and stop (exit 3) as for SIGUSR1/SIGTERM (package signals);
// a second SIGINT cancels ctx.
func runSignals() (ctx context.Context, cancel func(), stop *atomic.Bool) {
	ctx, cancelCtx := context.WithCancel(context.Background())
	stop = new(atomic.Bool)
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt)
	go func() {
		for range sig {
			if stop.Swap(true) {
				cancelCtx() // the second Ctrl-C
				continue
			}
			fmt.Fprintln(os.Stderr, "hdet: interrupted: checkpointing at the end of this window, then stopping (Ctrl-C again to stop now)")
		}
	}()
	// Stop guarantees no more sends, so closing ends the goroutine.
	return ctx, func() { signal.Stop(sig); close(sig); cancelCtx() }, stop
}

// runOutcome maps a run's end to its exit code, in one place: 0, 2 for
// what the user typed or configured, 3 after a signal made the run
// checkpoint and stop, 1 otherwise. After an agreed error (every rank
// knows of it) or a script's failure after the run, the job ends with
// MPI_Finalize; any other error may leave a rank blocked in a collective,
// so main aborts the job.
func runOutcome(s Streams, log zerolog.Logger, out session.Outcome, err error) Outcome {
	o := Outcome{MPI: true, After: out.Report}
	if err == nil {
		return o
	}
	o.After = nil
	var ue *UsageError
	switch {
	case errors.Is(err, engine.ErrStopped):
		o.Code = ExitPreempted
	case errors.Is(err, session.ErrPeerFailed): // the failing rank says why
		o.Code = ExitFailure
	case session.AfterRun(err): // nothing of the run is lost: the report is written
		log.Error().Err(err).Msg("script failed after the run")
		o.Code = ExitFailure
	case errors.As(err, &ue):
		fmt.Fprintf(s.Err, "hdet run: %v\n", err)
		o.Code = ExitUsage
	default:
		log.Error().Err(err).Msg("run failed")
		o.Code = ExitFailure
	}
	if errors.As(err, &ue) {
		o.Code = ExitUsage
	}
	o.Abort = !session.Agreed(err)
	return o
}

// ExitPreempted is hdet run's exit code after a signal made it checkpoint and
// stop (Slurm preemption or time limit); the job can be resumed.
const ExitPreempted = 3

func selfCheck(s Streams, w *mpi.Comm) error {
	host, err := mpi.ProcessorName()
	if err != nil {
		return err
	}
	buf := []float64{float64(w.Rank() + 1)}
	if err := w.AllreduceFloat64(buf, mpi.Sum); err != nil {
		return err
	}
	n := w.Size()
	want := float64(n*(n+1)) / 2
	if buf[0] != want {
		return fmt.Errorf("allreduce check failed: sum of rank+1 over %d ranks is %g, want %g", n, buf[0], want)
	}
	fmt.Fprintf(s.Out, "rank %d/%d on %s (local rank %d): allreduce verified (sum %g), CUDA-aware MPI: %v\n",
		w.Rank(), n, host, w.LocalRank(), buf[0], mpi.CUDAAware())
	return nil
}

// splitWorld is MPI_Comm_split on w, for replica groups.
func splitWorld(w *mpi.Comm, color, key int) (session.World, error) {
	c, err := w.Split(color, key)
	if err != nil {
		return nil, err
	}
	return c, nil
}
