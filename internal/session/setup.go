package session

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/hdet-dev/hdet/device"
	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/internal/config"
	"github.com/hdet-dev/hdet/internal/controller"
	"github.com/hdet-dev/hdet/internal/engine"
	"github.com/hdet-dev/hdet/internal/runlock"
	"github.com/hdet-dev/hdet/internal/signals"
	"github.com/hdet-dev/hdet/internal/watchdog"
	"github.com/hdet-dev/hdet/internal/workload"
	"github.com/hdet-dev/hdet/mpi/reduce"
	"github.com/hdet-dev/hdet/plugins"
	"github.com/hdet-dev/hdet/slurm"
)

// setup runs the phases every rank enters together: after each one the
// ranks agree whether any failed, so none waits in a collective for a rank
// that already gave up. The watchdog watches from the end of config loading.
func (s *session) setup(ctx context.Context) error {
	w := s.o.World
	if err := agree(w, s.loadConfig()); err != nil {
		return err
	}
	if err := agree(w, s.lockRunDir()); err != nil {
		return err
	}
	s.startWatchdog()
	for _, p := range []struct {
		name, pause string // pause: a test's moment to signal (HDET_TEST_PAUSE)
		fn          func(context.Context) error
	}{
		{"setup: replica groups", "", s.makeGroups},
		{"setup: device", "device", s.bindDevice},
		{"setup: replica", "data", s.makeReplica},
		{"setup: check replicas", "check", s.checkReplica},
		{"setup: explorers (rank 0)", "explorers", s.openExplorers},
		{"setup: resume", "resume", s.resume},
		{"setup: signals", "", s.stopBeforeTraining},
		{"setup: start", "", s.start},
	} {
		s.wd.Setup(p.name)
		signals.Pause(p.pause)
		if err := agree(w, p.fn(ctx)); err != nil {
			return err
		}
	}
	return nil
}

// load is how this run's config (and its checkpoints') loads: a --worker
// run's script says what the config leaves out.
func (s *session) load(data []byte, sets []string) (*config.Config, error) {
	if len(s.o.Worker) > 0 {
		return config.LoadWorker(data, sets)
	}
	return config.Load(data, sets)
}

func (s *session) loadConfig() error {
	cfg, err := s.load(s.o.Config, s.o.Sets)
	if err != nil {
		return &UsageError{Err: err}
	}
	s.cfg = cfg
	if s.sync, err = engine.ParseSyncMode(cfg.Train.Sync); err != nil && !(len(s.o.Worker) > 0 && cfg.Train.Sync == "") {
		return Usagef("train.sync: %v", err)
	}
	if s.slurm, err = slurm.FromOS(); err != nil {
		return err
	}
	w := s.o.World
	if err := s.slurm.Check(w.Rank(), w.Size(), w.LocalRank()); err != nil {
		return err
	}
	return s.layout()
}

// startWatchdog watches this rank (see package watchdog);
// --debug-collectives logs every collective on every rank.
func (s *session) startWatchdog() {
	w := s.o.World
	o := watchdog.Options{
		Dir: filepath.Join(s.cfg.Run.Dir, "heartbeats"), Rank: w.Rank(), Size: w.Size(),
		Timeout: time.Duration(s.cfg.Train.Watchdog), Abort: s.o.Abort, Log: s.o.Log,
	}
	if s.o.DebugCollectives {
		l := s.o.Log.Level(zerolog.DebugLevel) // every rank, in the run's log format
		o.Collectives = &l
	}
	s.wd = watchdog.Start(o)
}

// bindDevice finds this rank's GPU (none: CPU mode) and chooses how the
// converge allreduce reaches MPI. Both workloads hand hdet host memory (the
// bridge copies CUDA tensors through shared memory), so the path is host.
func (s *session) bindDevice(context.Context) error {
	w, log := s.o.World, s.o.Log
	path, err := device.ParsePath(s.o.AllreducePath)
	if err != nil {
		return Usagef("--allreduce-path: %v", err)
	}
	inv, err := device.Discover(device.SystemNVML())
	switch {
	case device.CPUMode(err):
		if s.rank == 0 {
			log.Info().Str("reason", err.Error()).Msg("CPU mode")
		}
	case err != nil:
		return fmt.Errorf("GPU discovery: %w", err)
	default:
		vis := device.VisibleFromEnv(os.LookupEnv)
		req := device.BindRequest{Rank: w.Rank(), LocalRank: w.LocalRank(), LocalSize: w.LocalSize(), AllowShare: s.o.ShareGPUs}
		b, err := device.Bind(inv, vis, req)
		switch {
		case errors.Is(err, device.ErrTooManyRanks):
			return Usagef("GPU binding: %v (hdet run --share-gpus)", err)
		case err != nil:
			return Usagef("GPU binding: %v", err)
		}
		s.gpu = workload.GPU{Own: cmp.Or(b.MIG, b.UUID), Group: func(locals []int) (string, error) {
			return device.GroupVisible(inv, vis, req, locals)
		}}
		// Every rank says which GPU it took, whatever the log level.
		log.Log().Int("local_rank", b.LocalRank).Str("gpu_uuid", b.UUID).Int("numa_node", b.NUMANode).Int("cuda_device", b.CUDAOrdinal).Msg(b.String())
	}
	choice, err := device.ResolvePath(path, false, s.o.CUDAAware)
	if err != nil {
		return Usagef("--allreduce-path %s: %v (hdet's workloads hand over host buffers)", path, err)
	}
	if s.converge, err = device.NewAllreducer(choice.Path, s.convergeComm(), nil); err != nil {
		return err
	}
	if s.rank == 0 {
		log.Info().Str("path", string(choice.Path)).Msg(choice.String())
	}
	return nil
}

// checkReplica makes sure every rank's replica has the same shape (an
// external script could differ per rank) and accepts every explored name.
// Sharded parameters (FSDP2) differ by position: their shapes are compared
// across the replicas, position by position, as the converge averages them
// (Agree compares the rest of every rank's script).
func (s *session) checkReplica(ctx context.Context) error {
	shape := []float64{float64(s.replica.ParamCount()), float64(len(s.replica.SyncBuffer(true))), float64(s.steps)}
	sharded := s.sharded()
	if err := s.agree(ctx); err != nil {
		return err
	}
	over := s.o.World
	if sharded {
		over = s.cross
	}
	lo, hi, err := spanOf(over, shape)
	if err != nil {
		return err
	}
	switch {
	case sharded && !slices.Equal(lo, hi):
		return Usagef("the FSDP2 shards at position %d differ across the replicas: %g..%g parameters, %g..%g floats of sync buffer; every replica must shard the same model the same way (fully_shard on the same modules, the same train.replica_size)",
			s.lay.Position(s.rank), lo[0], hi[0], lo[1], hi[1])
	case !slices.Equal(lo, hi):
		return fmt.Errorf("the ranks' replicas differ: parameters %g..%g, sync buffer %g..%g floats, steps %g..%g", lo[0], hi[0], lo[1], hi[1], lo[2], hi[2])
	}
	accepted := s.replica.Hyperparameters()
	for i, e := range s.cfg.Explorers {
		if !slices.Contains(accepted, e.Name) {
			return Usagef("explorers[%d].name: the workload does not accept %q (it accepts %s)", i, e.Name, strings.Join(accepted, ", "))
		}
	}
	return nil
}

// agree checks that every rank built the same replica beyond its shape
// (workload.Agreer: every rank's script, its settings).
func (s *session) agree(ctx context.Context) error {
	a, ok := engine.As[workload.Agreer](s.replica)
	if !ok {
		return nil
	}
	return a.Agree(ctx, s.o.World)
}

// spanOf is the elementwise minimum and maximum of v over c's ranks.
func spanOf(c World, v []float64) (lo, hi []float64, err error) {
	lo, hi = slices.Clone(v), slices.Clone(v)
	err = errors.Join(c.AllreduceFloat64(lo, reduce.Min), c.AllreduceFloat64(hi, reduce.Max))
	return lo, hi, err
}

// openExplorers (rank 0) starts the explorer plugins and the controller.
func (s *session) openExplorers(ctx context.Context) error {
	if s.rank != 0 {
		return nil
	}
	cfg := s.cfg
	if own, ok := engine.As[workload.Explorers](s.replica); ok {
		ex, notes, err := own.Explorers(cfg.Explorers)
		if err != nil {
			return err
		}
		for _, n := range notes {
			s.o.Log.Warn().Msg(n)
		}
		cfg.Explorers = ex
	}
	var named []controller.NamedExplorer
	if len(cfg.Explorers) > 0 {
		dir, err := plugins.Dir(s.o.PluginDir)
		if err != nil {
			return err
		}
		s.closers = append(s.closers, plugins.KillAll)
		for i, e := range cfg.Explorers {
			ex, err := s.openExplorer(ctx, dir, i, e)
			if err != nil {
				return err
			}
			named = append(named, ex)
		}
	}
	ctrl, err := controller.NewController(ctx, controller.RunShape{Ranks: s.replicas(), TotalSteps: s.steps, WindowSteps: cfg.Train.Window, MainWindowSteps: s.mainWindow(), Seed: cfg.Train.Seed, Probe: s.replica.CanProbe()}, named)
	if err != nil {
		if errors.Is(err, hparam.ErrInvalid) || errors.Is(err, controller.ErrExplorer) {
			return Usagef("explorers: %v%s", err, s.settingsHint())
		}
		return err
	}
	s.ctrl = ctrl
	return nil
}

func (s *session) settingsHint() string {
	if own, ok := engine.As[workload.Explorers](s.replica); ok {
		return own.SettingsHint()
	}
	return ""
}

func (s *session) openExplorer(ctx context.Context, dir string, i int, e config.Explorer) (controller.NamedExplorer, error) {
	log := s.o.Log
	bin, err := plugins.Resolve(dir, e.Plugin)
	if err != nil {
		return controller.NamedExplorer{}, Usagef("explorers[%d].plugin: %q: %v (plugin directory %s; `make build` puts the built-in explorers in bin/plugins)", i, e.Plugin, err, dir)
	}
	ex, err := plugins.Open(ctx, plugins.Spec{Name: e.Name, Binary: bin, Checksum: e.SHA256, Timeout: time.Duration(e.Timeout)}, log,
		func(ev plugins.Event) {
			log.Warn().Str("explorer", ev.Name).Str("kind", ev.Kind).Str("op", ev.Op).AnErr("cause", ev.Err).Msg("explorer failure")
		})
	if err != nil {
		if plugins.IsConfigError(err) {
			return controller.NamedExplorer{}, Usagef("explorers[%d] (%s): %v", i, e.Name, err)
		}
		return controller.NamedExplorer{}, fmt.Errorf("explorers[%d] (%s): %w", i, e.Name, err)
	}
	s.closers = append(s.closers, func() { _ = ex.Close() })
	block := []byte("{}")
	if e.Config != nil {
		if block, err = json.Marshal(e.Config); err != nil {
			return controller.NamedExplorer{}, Usagef("explorers[%d].config: %v", i, err)
		}
	}
	return controller.NamedExplorer{Name: e.Name, Explorer: ex, Config: block}, nil
}

// lockRunDir makes rank 0 hold the run directory for the run's life, so a
// second launch into it is refused rather than training alongside.
func (s *session) lockRunDir() error {
	if s.rank != 0 {
		return nil
	}
	lk, stale, err := runlock.Acquire(s.cfg.Run.Dir)
	switch {
	case errors.Is(err, runlock.ErrHeld) || errors.Is(err, runlock.ErrBadDir):
		return &UsageError{Err: err}
	case err != nil:
		return err
	case stale != nil:
		s.o.Log.Warn().Str("holder", stale.String()).Msg("taking over the run directory's lock from a run that is gone")
	}
	s.closers = append(s.closers, func() { _ = lk.Release() })
	return nil
}

// stopBeforeTraining ends the run with engine.ErrStopped (exit 3) when any
// rank caught a signal during setup, before the run directory is written:
// nothing was trained, so a relaunch runs as this one would have.
func (s *session) stopBeforeTraining(context.Context) error {
	got := []float64{0}
	if s.o.Stop != nil && s.o.Stop() {
		got[0] = 1
	}
	if err := s.o.World.AllreduceFloat64(got, reduce.Max); err != nil || got[0] == 0 {
		return err
	}
	if s.rank == 0 {
		s.o.Log.Warn().Msg("a signal arrived during setup: stopping before training; launch the same command again to run")
		s.requeue()
	}
	return engine.ErrStopped
}
