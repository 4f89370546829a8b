package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/hdet-dev/hdet/bridge"
	"github.com/hdet-dev/hdet/checkpoint"
	"github.com/hdet-dev/hdet/config"
	"github.com/hdet-dev/hdet/device"
	"github.com/hdet-dev/hdet/engine"
	"github.com/hdet-dev/hdet/examples"
	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/internal/atomicfile"
	"github.com/hdet-dev/hdet/internal/logging"
	"github.com/hdet-dev/hdet/metrics"
	"github.com/hdet-dev/hdet/mpi"
	"github.com/hdet-dev/hdet/plugins"
	"github.com/hdet-dev/hdet/progress"
	"github.com/hdet-dev/hdet/report"
	"github.com/hdet-dev/hdet/slurm"
	"github.com/hdet-dev/hdet/watchdog"
	"github.com/hdet-dev/hdet/workload/mnist"
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
	debug       bool
	debugColl   bool
	selfCheck   bool
	noRequeue   bool
	worker      bool
	path        string
	command     []string // after --, with --worker
}

func runRun(s Streams, args []string) error {
	var f runFlags
	fs := newFlagSet(s, "run")
	fs.Var(&f.sets, "set", "override a config field, `key=value` (repeatable), e.g. train.window=50")
	fs.StringVar(&f.runDir, "run-dir", "", "run directory (overrides run.dir)")
	fs.StringVar(&f.pluginDir, "plugin-dir", "", "explorer plugin directory (default $HDET_PLUGIN_DIR, then plugins/ next to hdet)")
	fs.StringVar(&f.progress, "progress", "", "progress display: auto, plain or none (overrides run.progress)")
	fs.BoolVar(&f.logAllRanks, "log-all-ranks", false, "log info-level events on every rank, not only rank 0")
	fs.BoolVar(&f.debug, "debug", false, "debug logging (per-window checksums and values)")
	fs.BoolVar(&f.debugColl, "debug-collectives", false, "log every collective of the window loop with its duration, on every rank")
	fs.BoolVar(&f.selfCheck, "self-check", false, "check the MPI setup instead of training")
	fs.BoolVar(&f.worker, "worker", false, "train an external process instead of the built-in workload: hdet run [CONFIG] --worker -- CMD ARGS...")
	fs.StringVar(&f.path, "allreduce-path", "auto", "how the converge allreduce reaches MPI: auto, device, staged or host")
	fs.BoolVar(&f.noRequeue, "no-requeue", false, "under Slurm, do not requeue the job after a signal made the run checkpoint and stop")
	fs.Usage = func() { fmt.Fprint(s.Err, runHelp); fs.PrintDefaults() }
	if i := slices.Index(args, "--"); i >= 0 {
		args, f.command = args[:i], args[i+1:]
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if f.worker != (len(f.command) > 0) {
		return Usagef("--worker needs the worker's command after --, and a command after -- needs --worker (hdet run [CONFIG] --worker -- python3 train.py ...)")
	}
	if len(pos) > 1 {
		return Usagef("run takes at most one CONFIG.yaml, got %q", pos)
	}
	data, source := examples.MNIST, "embedded examples/mnist.yaml"
	if len(pos) == 1 {
		b, err := os.ReadFile(pos[0])
		if err != nil {
			return Usagef("read config: %v", err)
		}
		data, source = b, pos[0]
	}
	if f.runDir != "" {
		f.sets = append(f.sets, "run.dir="+f.runDir)
	}
	if f.progress != "" {
		f.sets = append(f.sets, "run.progress="+f.progress)
	}

	if err := mpi.Init(); err != nil {
		return fmt.Errorf("MPI: %w", err)
	}
	w := mpi.World()
	log := logging.New(logging.Options{Rank: w.Rank(), AllRanks: f.logAllRanks, Debug: f.debug})
	if f.selfCheck {
		err := selfCheck(s, w)
		return errors.Join(err, mpi.Finalize())
	}
	err = runWorld(s, w, log, f, data, source)
	if err != nil {
		var ue *UsageError
		code := ExitFailure
		switch {
		case errors.Is(err, errPeerFailed): // the failing rank says why
		case errors.As(err, &ue):
			fmt.Fprintf(s.Err, "hdet run: %v\n", err)
		default:
			log.Error().Err(err).Msg("run failed")
		}
		if errors.As(err, &ue) {
			code = ExitUsage
		}
		if errors.Is(err, engine.ErrStopped) {
			code = ExitPreempted
		}
		var ae agreedError
		if errors.As(err, &ae) || code == ExitPreempted {
			// Every rank knows and stops here: no collective is left hanging.
			_ = mpi.Finalize()
			os.Exit(code)
		}
		// Another rank may be blocked in a collective: end the whole job.
		mpi.Abort(code)
	}
	return errors.Join(err, mpi.Finalize())
}

// ExitPreempted is hdet run's exit code after a signal made it checkpoint and
// stop (Slurm preemption or time limit); the job can be resumed.
const ExitPreempted = 3

var errPeerFailed = errors.New("another rank failed during setup")

// agreedError is a setup failure every rank has learnt of through agree.
type agreedError struct{ error }

func (e agreedError) Unwrap() error { return e.error }

// agree makes every rank learn whether any rank failed setup, so no rank
// waits forever in the first collective for one that has already given up.
func agree(w *mpi.Comm, err error) error {
	code := []float64{0}
	if err != nil {
		code[0] = ExitFailure
		var ue *UsageError
		if errors.As(err, &ue) {
			code[0] = ExitUsage
		}
	}
	if rerr := w.AllreduceFloat64(code, mpi.Max); rerr != nil {
		return errors.Join(err, rerr)
	}
	switch {
	case err != nil:
		return agreedError{err}
	case code[0] == ExitUsage:
		return agreedError{&UsageError{Err: errPeerFailed}}
	case code[0] != 0:
		return agreedError{errPeerFailed}
	}
	return nil
}

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

// setup is what every rank builds before the window loop.
type setup struct {
	cfg      *config.Config
	slurm    slurm.Env
	replica  engine.Replica
	worker   *bridge.Worker  // --worker mode
	gpu      *device.Binding // nil in CPU mode
	converge device.Allreducer
	steps    int
	ctrl     *hparam.Controller // rank 0
	closers  []func()
	mw       *metrics.Writer   // rank 0
	resume   *checkpoint.State // rank 0 while setting up, then every rank; nil for a fresh run
}

func (st *setup) close() {
	for i := len(st.closers) - 1; i >= 0; i-- {
		st.closers[i]()
	}
}

func runWorld(s Streams, w *mpi.Comm, log zerolog.Logger, f runFlags, data []byte, source string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	// SIGUSR1/SIGTERM (Slurm's warning, preemption) raise a flag; the ranks
	// agree on it at the next converge, checkpoint and stop.
	var preempt atomic.Bool
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1, syscall.SIGTERM)
	defer signal.Stop(sig)
	go func() {
		for range sig {
			preempt.Store(true)
		}
	}()
	st := &setup{}
	defer st.close()
	// Setup runs in phases that every rank enters together: after each one
	// the ranks agree whether any failed, so none waits in a collective for
	// a rank that already gave up.
	if err := agree(w, st.loadConfig(w, f, data)); err != nil {
		return err
	}
	wd := startWatchdog(st.cfg, w, log, f.debugColl)
	defer wd.Stop()
	wd.Setup("setup: device")
	if err := agree(w, st.bindDevice(w, log, f)); err != nil {
		return err
	}
	wd.Setup("setup: replica")
	if err := agree(w, st.makeReplica(ctx, w, f)); err != nil {
		return err
	}
	wd.Setup("setup: check replicas")
	if err := agree(w, st.checkReplica(w)); err != nil {
		return err
	}
	wd.Setup("setup: explorers and resume (rank 0)")
	if err := agree(w, st.rankZero(ctx, w, log, f)); err != nil {
		return err
	}
	wd.Setup("setup: share resume")
	if err := st.shareResume(w); err != nil {
		return err
	}
	wd.Setup("setup: start")
	if err := agree(w, st.start(ctx, w, log)); err != nil {
		return err
	}
	startStep := 0
	if st.resume != nil {
		startStep = st.resume.Step
	}
	if w.Rank() == 0 {
		log.Info().Str("config", source).Int("ranks", w.Size()).Int("steps", st.steps).Int("window", st.cfg.Train.Window).
			Str("sync", st.cfg.Train.Sync).Strs("explored", st.ctrl.Names()).Str("run_dir", st.cfg.Run.Dir).
			Int("start_step", startStep).Fields(st.slurm.Fields()).Msg("starting HDET run")
	}
	cfgYAML, err := st.cfg.YAML()
	if err != nil {
		return err
	}
	saver := &checkpoint.Saver{
		Dir: filepath.Join(st.cfg.Run.Dir, "checkpoints"), Every: st.cfg.Run.CheckpointEvery,
		Interval: time.Duration(st.cfg.Run.CheckpointMinutes * float64(time.Minute)), Keep: st.cfg.Run.Keep,
		Rank: w.Rank(), Ranks: w.Size(), Config: cfgYAML, ParamCount: st.replica.ParamCount(),
		Buffer: func() []float32 { return st.replica.SyncBuffer(true) }, Log: log,
		MaxFailing: time.Duration(st.cfg.Run.CheckpointMaxFailing),
	}
	if w.Rank() == 0 {
		saver.BeforeWrite = st.mw.Sync
		saver.Controller = func(ctx context.Context) ([]byte, error) {
			b, evs, err := st.ctrl.SaveState(ctx)
			for _, e := range evs {
				log.Warn().Str("param", e.Param).Msg(e.String())
			}
			return b, err
		}
	}
	var prog engine.Progress
	if w.Rank() == 0 {
		mode, err := progress.ParseMode(st.cfg.Run.Progress)
		if err != nil {
			return err
		}
		prog = progress.New(s.Out, mode, startStep) // under mpirun a rank's stdout is a pty when mpirun's is
	}
	start := time.Now()
	tc := st.cfg.Train
	rollbackDir := saver.Dir
	if st.worker != nil {
		rollbackDir = "" // the script's own state is not in the checkpoints (see rankZero)
	}
	res, err := engine.Run(ctx, engine.Options{
		Comm: wd.Comm(w), Replica: st.replica, Controller: st.ctrl,
		Steps: st.steps, Window: tc.Window, Sync: tc.Sync, EvalEvery: tc.EvalEvery,
		StartStep: startStep, Converge: wd.Allreducer(st.converge), Metrics: st.mw, Progress: prog, Checkpoint: saver, Stop: preempt.Load,
		Fault: engine.Fault{NaN: faultAt(tc.FaultNaNRank, tc.FaultNaNWindow), NaNAll: faultAt(0, tc.FaultNaNAllWindow),
			Stop: faultAt(tc.FaultStopRank, tc.FaultStopWindow), Diverge: faultAt(tc.FaultDivergeRank, tc.FaultDivergeWindow)},
		Log:   log,
		Watch: wd, DivergenceFactor: tc.DivergenceFactor, MaxRollbacks: tc.MaxRollbacks, CheckpointDir: rollbackDir,
	})
	wd.Stop() // the window loop's collectives are over
	if errors.Is(err, engine.ErrStopped) && w.Rank() == 0 {
		log.Warn().Int("step", res.Steps).Msg("stopped by a signal after checkpointing; launch the same command again to resume")
		if st.slurm.InSlurm() && !f.noRequeue {
			if rerr := slurm.Requeue(context.Background(), st.slurm.JobID); rerr != nil {
				log.Error().Err(rerr).Msg("requeue failed")
			} else {
				log.Info().Str("job", st.slurm.JobID).Msg("job requeued")
			}
		}
	}
	if err != nil {
		return err
	}
	if w.Rank() != 0 {
		return nil
	}
	if err := checkpoint.WriteModel(filepath.Join(st.cfg.Run.Dir, "model.bin"), st.replica.SyncBuffer(false)[:st.replica.ParamCount()]); err != nil {
		return err
	}
	if err := st.mw.Write(metrics.Record{Type: metrics.TypeEnd, Time: now(), Step: res.Steps,
		Eval:     &metrics.Eval{Loss: metrics.Float(res.TestLoss), Accuracy: metrics.Float(res.TestAccuracy)},
		Checksum: res.Checksum, WallSeconds: time.Since(start).Seconds()}); err != nil {
		return err
	}
	fmt.Fprintf(s.Out, "test accuracy %.4f, test loss %.4f after %d steps on %d ranks\nrun directory: %s\n",
		res.TestAccuracy, res.TestLoss, res.Steps, w.Size(), st.cfg.Run.Dir)
	index, err := report.Write(st.cfg.Run.Dir, "", report.Options{CSV: true})
	if err != nil {
		// The run itself succeeded; `hdet report` can be run again later.
		log.Warn().Err(err).Msg("writing the report failed")
		return nil
	}
	fmt.Fprintf(s.Out, "report: %s\n", index)
	return nil
}

// faultAt turns a test-only fault setting into the engine's (off when
// either number is negative).
func faultAt(rank, window int) *engine.FaultAt {
	if rank < 0 || window < 0 {
		return nil
	}
	return &engine.FaultAt{Rank: rank, Window: window}
}

// startWatchdog watches this rank from the end of config loading on (see
// package watchdog); --debug-collectives logs every collective on every rank.
func startWatchdog(cfg *config.Config, w *mpi.Comm, log zerolog.Logger, debugCollectives bool) *watchdog.Watchdog {
	o := watchdog.Options{
		Dir: filepath.Join(cfg.Run.Dir, "heartbeats"), Rank: w.Rank(), Size: w.Size(),
		Timeout: time.Duration(cfg.Train.Watchdog), Abort: mpi.Abort, Log: log,
	}
	if debugCollectives {
		l := logging.New(logging.Options{Rank: w.Rank(), AllRanks: true, Debug: true})
		o.Collectives = &l
	}
	return watchdog.Start(o)
}

func now() float64 { return float64(time.Now().UnixMilli()) / 1e3 }

func (st *setup) loadConfig(w *mpi.Comm, f runFlags, data []byte) error {
	cfg, err := config.Load(data, f.sets)
	if err != nil {
		return &UsageError{Err: err}
	}
	st.cfg = cfg
	if st.slurm, err = slurm.FromOS(); err != nil {
		return err
	}
	return st.slurm.Check(w.Rank(), w.Size(), w.LocalRank())
}

// bindDevice finds this rank's GPU (none: CPU mode) and chooses how the
// converge allreduce reaches MPI. Both workloads hand hdet host memory (the
// bridge copies CUDA tensors through shared memory), so the path is host.
func (st *setup) bindDevice(w *mpi.Comm, log zerolog.Logger, f runFlags) error {
	path, err := device.ParsePath(f.path)
	if err != nil {
		return Usagef("--allreduce-path: %v", err)
	}
	inv, err := device.Discover(device.SystemNVML())
	switch {
	case device.CPUMode(err):
		if w.Rank() == 0 {
			log.Info().Str("reason", err.Error()).Msg("CPU mode")
		}
	case err != nil:
		return fmt.Errorf("GPU discovery: %w", err)
	default:
		b, err := device.Bind(inv, device.VisibleFromEnv(os.LookupEnv), device.BindRequest{Rank: w.Rank(), LocalRank: w.LocalRank(), LocalSize: w.LocalSize()})
		if err != nil {
			return Usagef("GPU binding: %v", err)
		}
		st.gpu = &b
		// Every rank says which GPU it took, whatever the log level.
		log.Log().Int("local_rank", b.LocalRank).Str("gpu_uuid", b.UUID).Int("numa_node", b.NUMANode).Int("cuda_device", b.CUDAOrdinal).Msg(b.String())
	}
	choice, err := device.ResolvePath(path, false, mpi.CUDAAware())
	if err != nil {
		return Usagef("--allreduce-path %s: %v (hdet's workloads hand over host buffers)", path, err)
	}
	if st.converge, err = device.NewAllreducer(choice.Path, w, nil); err != nil {
		return err
	}
	if w.Rank() == 0 {
		log.Info().Str("path", string(choice.Path)).Msg(choice.String())
	}
	return nil
}

// workerGPU is what the worker sees as CUDA_VISIBLE_DEVICES: this rank's GPU
// by UUID, or what the rank inherited in CPU mode.
func (st *setup) workerGPU() string {
	if st.gpu == nil {
		return os.Getenv("CUDA_VISIBLE_DEVICES")
	}
	if st.gpu.MIG != "" {
		return st.gpu.MIG
	}
	return st.gpu.UUID
}

// makeReplica builds this rank's replica: the built-in MNIST MLP, or the
// external worker process of --worker, and the run's length.
func (st *setup) makeReplica(ctx context.Context, w *mpi.Comm, f runFlags) error {
	cfg := st.cfg
	if f.worker {
		return st.startWorker(ctx, w, f.command)
	}
	ds, err := mnist.Load(cfg.Workload.Data)
	if err != nil {
		return &UsageError{Err: fmt.Errorf("workload.data: %w", err)}
	}
	mc := mnist.DefaultConfig()
	wl := cfg.Workload
	mc.Hidden, mc.BatchSize, mc.Optimizer = wl.Hidden, wl.BatchSize, wl.Optimizer
	mc.LR, mc.Momentum, mc.WeightDecay, mc.Dropout, mc.LabelSmoothing = wl.LR, wl.Momentum, wl.WeightDecay, wl.Dropout, wl.LabelSmoothing
	mc.Beta2, mc.Eps = wl.Beta2, wl.Eps
	mc.Seed, mc.Rank, mc.WorldSize, mc.Data = cfg.Train.Seed, w.Rank(), w.Size(), ds
	mc.ProbeExamples = cfg.Train.ProbeExamples
	r, err := mnist.New(mc)
	if err != nil {
		return &UsageError{Err: fmt.Errorf("workload: %w", err)}
	}
	st.replica = r
	st.steps = cfg.Train.Steps
	if st.steps == 0 {
		st.steps = cfg.Train.Epochs * r.StepsPerEpoch()
		if cfg.Train.Window > st.steps {
			return Usagef("train.window: got %d, want at most the run's %d steps (%d epochs)", cfg.Train.Window, st.steps, cfg.Train.Epochs)
		}
	}
	return nil
}

// startWorker launches the --worker command on this rank. Rank 0 picks the
// torch.distributed rendezvous port and broadcasts it, since every rank's
// script must use the same one.
func (st *setup) startWorker(ctx context.Context, w *mpi.Comm, command []string) error {
	var msg []byte
	var perr error
	if w.Rank() == 0 {
		host, err := mpi.ProcessorName()
		port, lerr := freePort()
		if perr = errors.Join(err, lerr); perr == nil {
			msg = []byte(net.JoinHostPort(host, strconv.Itoa(port)))
		}
	}
	msg, err := w.BcastMessage(msg, 0)
	if err != nil || perr != nil {
		return errors.Join(perr, err)
	}
	host, portStr, err := net.SplitHostPort(string(msg))
	if err != nil {
		return fmt.Errorf("rendezvous address %q: %w", msg, err)
	}
	port, _ := strconv.Atoi(portStr)
	wk, err := bridge.Start(ctx, bridge.Options{
		Command: command, Rank: w.Rank(), WorldSize: w.Size(), LocalRank: w.LocalRank(),
		MasterAddr: host, MasterPort: port, GPU: st.workerGPU(), SyncMode: st.cfg.Train.Sync,
	})
	if err != nil {
		return err
	}
	st.worker, st.replica = wk, wk
	st.closers = append(st.closers, func() { _ = wk.Close() })
	st.steps = st.cfg.Train.Steps
	if sched := wk.Hello().Schedule; sched != nil {
		if st.steps == 0 {
			st.steps = sched.TotalSteps
		} else if st.steps != sched.TotalSteps {
			return Usagef("train.steps: got %d, but the worker's OneCycleLR has total_steps %d; give the same length (or leave train.steps 0)", st.steps, sched.TotalSteps)
		}
	}
	if st.steps == 0 {
		return Usagef("train.steps: the worker's scheduler does not say how long the run is; set train.steps")
	}
	if st.cfg.Train.Window > st.steps {
		return Usagef("train.window: got %d, want at most the run's %d steps", st.cfg.Train.Window, st.steps)
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// checkReplica makes sure every rank's replica has the same shape (an
// external script could differ per rank) and accepts every explored name.
func (st *setup) checkReplica(w *mpi.Comm) error {
	shape := []float64{float64(st.replica.ParamCount()), float64(len(st.replica.SyncBuffer(true))), float64(st.steps)}
	lo, hi := slices.Clone(shape), slices.Clone(shape)
	if err := errors.Join(w.AllreduceFloat64(lo, mpi.Min), w.AllreduceFloat64(hi, mpi.Max)); err != nil {
		return err
	}
	if !slices.Equal(lo, hi) {
		return fmt.Errorf("the ranks' replicas differ: parameters %g..%g, sync buffer %g..%g floats, steps %g..%g", lo[0], hi[0], lo[1], hi[1], lo[2], hi[2])
	}
	accepted := st.replica.Hyperparameters()
	for i, e := range st.cfg.Explorers {
		if !slices.Contains(accepted, e.Name) {
			return Usagef("explorers[%d].name: the workload does not accept %q (it accepts %s)", i, e.Name, strings.Join(accepted, ", "))
		}
	}
	return nil
}

// rankZero starts the explorers and finds a checkpoint to resume from.
func (st *setup) rankZero(ctx context.Context, w *mpi.Comm, log zerolog.Logger, f runFlags) error {
	if w.Rank() != 0 {
		return nil
	}
	if err := st.openExplorers(ctx, w, log, f); err != nil {
		return err
	}
	if st.worker != nil {
		// The script's own state (data position, RNG) is not in hdet's
		// checkpoints, so a worker run always starts from the beginning.
		return nil
	}
	return st.findResume(ctx, w, log)
}

// findResume loads the newest valid checkpoint of the run directory, if any,
// into the controller (rank 0), after checking it belongs to this run.
func (st *setup) findResume(ctx context.Context, w *mpi.Comm, log zerolog.Logger) error {
	dir := filepath.Join(st.cfg.Run.Dir, "checkpoints")
	ck, path, skipped, err := checkpoint.Latest(dir)
	for _, sk := range skipped {
		log.Warn().Str("path", sk.Path).AnErr("cause", sk.Err).Msg("skipping a damaged checkpoint; falling back to the one before")
	}
	if errors.Is(err, checkpoint.ErrNone) {
		if len(skipped) > 0 {
			return Usagef("run.dir %s: every checkpoint is damaged (newest: %v); move them away to start afresh", st.cfg.Run.Dir, skipped[0].Err)
		}
		// No checkpoint to resume, but another run's log: appending to it
		// would mix two runs in one metrics.jsonl.
		if fi, err := os.Stat(filepath.Join(st.cfg.Run.Dir, "metrics.jsonl")); err == nil && fi.Size() > 0 {
			return Usagef("run.dir %s already holds a run's metrics.jsonl and no checkpoint to resume from; use another run.dir or remove it", st.cfg.Run.Dir)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("run.dir: %w", err)
	}
	if err := st.compatible(ck, path); err != nil {
		return err
	}
	if ck.Ranks != w.Size() {
		log.Warn().Int("checkpoint_ranks", ck.Ranks).Int("ranks", w.Size()).Msg("resuming with a different number of ranks: parameters are shared, the spread is recomputed")
	}
	evs, err := st.ctrl.LoadState(ctx, ck.Controller)
	if err != nil {
		return Usagef("checkpoint %s: controller state: %v", path, err)
	}
	for _, e := range evs {
		log.Warn().Str("param", e.Param).Msg(e.String())
	}
	log.Info().Str("path", path).Int("step", ck.Step).Msg("resuming from checkpoint")
	st.resume = ck
	return nil
}

// compatible refuses a checkpoint written by another run or for another
// model shape, naming what differs.
func (st *setup) compatible(ck *checkpoint.State, path string) error {
	old, err := config.Load(ck.Config, nil)
	if err != nil {
		return Usagef("checkpoint %s: its config does not load: %v", path, err)
	}
	cur, why := st.cfg, []string{}
	if fmt.Sprint(old.Workload.Hidden) != fmt.Sprint(cur.Workload.Hidden) || old.Workload.Kind != cur.Workload.Kind {
		why = append(why, fmt.Sprintf("the model's shape (workload %s %v in the checkpoint, %s %v now)", old.Workload.Kind, old.Workload.Hidden, cur.Workload.Kind, cur.Workload.Hidden))
	}
	if old.Workload.Optimizer != cur.Workload.Optimizer {
		why = append(why, fmt.Sprintf("workload.optimizer (%s in the checkpoint, %s now)", old.Workload.Optimizer, cur.Workload.Optimizer))
	}
	if old.Train.Seed != cur.Train.Seed {
		why = append(why, fmt.Sprintf("train.seed (%d in the checkpoint, %d now): it is another run's", old.Train.Seed, cur.Train.Seed))
	}
	if ck.ParamCount != st.replica.ParamCount() || len(ck.Buffer) != len(st.replica.SyncBuffer(true)) {
		why = append(why, fmt.Sprintf("the parameter count (%d in the checkpoint, %d now)", ck.ParamCount, st.replica.ParamCount()))
	}
	if ck.Step == st.steps && len(why) == 0 {
		return Usagef("run.dir %s holds a finished run (its last checkpoint is at step %d of %d); use another run.dir for a new run", st.cfg.Run.Dir, ck.Step, st.steps)
	}
	if ck.Step > st.steps {
		why = append(why, fmt.Sprintf("the run length (the checkpoint is at step %d, the run has %d steps)", ck.Step, st.steps))
	}
	if len(why) > 0 {
		return Usagef("run.dir %s holds a checkpoint (%s) that does not fit this config: %s; use another run.dir to start afresh",
			st.cfg.Run.Dir, filepath.Base(path), strings.Join(why, "; "))
	}
	return nil
}

// shareResume sends rank 0's checkpoint to every rank and loads it.
func (st *setup) shareResume(w *mpi.Comm) error {
	var msg []byte
	if w.Rank() == 0 && st.resume != nil {
		msg = checkpoint.Encode(st.resume)
	}
	msg, err := w.BcastMessage(msg, 0)
	if err != nil || len(msg) == 0 {
		return err
	}
	if st.resume, err = checkpoint.Decode(msg); err != nil {
		return err
	}
	copy(st.replica.SyncBuffer(true), st.resume.Buffer)
	return nil
}

// start opens the run directory (rank 0) and applies a warm start (every rank).
func (st *setup) start(ctx context.Context, w *mpi.Comm, log zerolog.Logger) error {
	if st.resume == nil && st.cfg.Train.WarmStart != "" {
		theta0, err := checkpoint.ReadModel(st.cfg.Train.WarmStart, st.replica.ParamCount())
		if err != nil {
			return Usagef("train.warm_start: %v", err)
		}
		engine.WarmStart(st.replica.SyncBuffer(false)[:st.replica.ParamCount()], theta0, st.cfg.Train.WarmNoise, st.cfg.Train.Seed, w.Rank())
		if w.Rank() == 0 {
			log.Info().Str("model", st.cfg.Train.WarmStart).Float64("nu", st.cfg.Train.WarmNoise).Msg("warm noisy start")
		}
	}
	if w.Rank() != 0 {
		return nil
	}
	return st.openRunDir(ctx, w)
}

func (st *setup) openExplorers(ctx context.Context, w *mpi.Comm, log zerolog.Logger, f runFlags) error {
	cfg := st.cfg
	var named []hparam.NamedExplorer
	if len(cfg.Explorers) > 0 {
		dir, err := plugins.Dir(f.pluginDir)
		if err != nil {
			return err
		}
		st.closers = append(st.closers, plugins.KillAll)
		for i, e := range cfg.Explorers {
			bin, err := plugins.Resolve(dir, e.Plugin)
			if err != nil {
				return Usagef("explorers[%d].plugin: %q: %v (plugin directory %s; `make build` puts the built-in explorers in bin/plugins)", i, e.Plugin, err, dir)
			}
			ex, err := plugins.Open(ctx, plugins.Spec{Name: e.Name, Binary: bin, Checksum: e.SHA256, Timeout: time.Duration(e.Timeout)}, log,
				func(ev plugins.Event) {
					log.Warn().Str("explorer", ev.Name).Str("kind", ev.Kind).Str("op", ev.Op).AnErr("cause", ev.Err).Msg("explorer failure")
				})
			if err != nil {
				if plugins.IsConfigError(err) {
					return Usagef("explorers[%d] (%s): %v", i, e.Name, err)
				}
				return fmt.Errorf("explorers[%d] (%s): %w", i, e.Name, err)
			}
			st.closers = append(st.closers, func() { _ = ex.Close() })
			block := []byte("{}")
			if e.Config != nil {
				if block, err = json.Marshal(e.Config); err != nil {
					return Usagef("explorers[%d].config: %v", i, err)
				}
			}
			named = append(named, hparam.NamedExplorer{Name: e.Name, Explorer: ex, Config: block})
		}
	}
	ctrl, err := hparam.NewController(ctx, hparam.RunShape{Ranks: w.Size(), TotalSteps: st.steps, WindowSteps: cfg.Train.Window, Seed: cfg.Train.Seed, Probe: st.replica.CanProbe()}, named)
	if err != nil {
		if errors.Is(err, hparam.ErrInvalid) || errors.Is(err, hparam.ErrExplorer) {
			return Usagef("explorers: %v", err)
		}
		return err
	}
	st.ctrl = ctrl
	return nil
}

func (st *setup) openRunDir(ctx context.Context, w *mpi.Comm) error {
	cfg := st.cfg
	if err := os.MkdirAll(cfg.Run.Dir, 0o755); err != nil {
		return Usagef("run.dir: %v", err)
	}
	b, err := cfg.YAML()
	if err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(cfg.Run.Dir, "config.yaml"), b); err != nil {
		return Usagef("run.dir: %v", err)
	}
	hash, err := cfg.Hash()
	if err != nil {
		return err
	}
	mpath := filepath.Join(cfg.Run.Dir, "metrics.jsonl")
	resumed := 0
	if st.resume != nil {
		// Windows after the checkpoint will run again: drop their records.
		resumed = st.resume.Step
		if err := metrics.TruncateAfter(mpath, resumed); err != nil {
			return fmt.Errorf("metrics.jsonl: %w", err)
		}
	}
	mw, err := metrics.OpenWriter(mpath)
	if err != nil {
		return Usagef("run.dir: %v", err)
	}
	st.mw = mw
	st.closers = append(st.closers, func() { _ = mw.Close() })
	// The spreads and bounds in force are the configured ones, which the
	// first plan carries (the controller hands the same plan to the loop).
	plan, _, err := st.ctrl.Plan(ctx)
	if err != nil {
		return Usagef("explorers: plan of window 0: %v", err)
	}
	var params []metrics.Param
	for i, d := range st.ctrl.Descriptors() {
		pp := plan.Params[i]
		params = append(params, metrics.Param{Name: pp.Name, Scale: string(d.Scale), Spread: string(pp.Spread.Kind),
			Alpha: pp.Spread.Alpha, Lower: pp.Bounds.Lower, Upper: pp.Bounds.Upper})
	}
	return mw.Write(metrics.Record{Type: metrics.TypeStart, Time: now(), Ranks: w.Size(), TotalSteps: st.steps,
		WindowSteps: cfg.Train.Window, SyncMode: cfg.Train.Sync, Hyperparameters: params, ConfigHash: hash, ResumedFrom: resumed})
}
