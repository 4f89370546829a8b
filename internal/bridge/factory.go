package bridge

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/internal/checkpoint"
	"github.com/hdet-dev/hdet/internal/config"
	"github.com/hdet-dev/hdet/internal/engine"
	"github.com/hdet-dev/hdet/internal/plan"
	"github.com/hdet-dev/hdet/internal/workload"
	"github.com/hdet-dev/hdet/mpi/reduce"
)

// replica is a Worker as a run's replica: what it does beyond
// engine.Replica needs the rank's place in the run (the rendezvous of a
// restart, the ranks to agree with).
type replica struct {
	*Worker
	env     workload.Env
	runDir  string      // absolute: the script may change its directory
	started *startPoint // the checkpoint it was started to resume; nil: step 0
}

// startPoint is a checkpoint's place in the run.
type startPoint struct{ pass, step int }

var (
	_ workload.Factory      = Factory
	_ workload.Restarter    = replica{}
	_ workload.Agreer       = replica{}
	_ workload.Sharder      = replica{}
	_ workload.Explorers    = replica{}
	_ workload.Finisher     = replica{}
	_ workload.StateSaver   = replica{}
	_ workload.MainWindower = replica{}
)

// Factory starts --worker's command on this rank (the PyTorch bridge) and
// takes the run's length, window and sync mode from its script, writing
// the last two into env.Config.
func Factory(ctx context.Context, env workload.Env) (engine.Replica, int, error) {
	host, port, err := rendezvous(env)
	if err != nil {
		return nil, 0, err
	}
	w, peers := env.World, torchPeers(env)
	local := slices.Index(peers, w.LocalRank()) // LOCAL_RANK
	o := Options{
		Command: env.Command, Rank: w.Rank(), WorldSize: w.Size(), LocalRank: w.LocalRank(), LocalSize: w.LocalSize(),
		ReplicaSize: env.Layout.Size, ReplicaRank: env.Layout.Position(w.Rank()),
		ReplicaLocalRank: local, ReplicaLocalSize: len(peers),
		MasterAddr: host, MasterPort: port, SyncMode: env.Config.Train.Sync,
	}
	if o.GPU, o.GPUIndex, err = workerGPU(env.GPU, peers, local); err != nil {
		return nil, 0, err
	}
	started, err := startAt(env, &o)
	if err != nil {
		return nil, 0, err
	}
	wk, err := Start(ctx, o)
	if err != nil {
		return nil, 0, usageIf(err)
	}
	r := replica{Worker: wk, env: env, runDir: o.RunDir, started: started}
	steps, err := r.shape(env.Config)
	if err != nil {
		_ = wk.Close()
		return nil, 0, err
	}
	return r, steps, nil
}

// shape is the run's length, and the script's window and sync mode (which
// a configured one must match) in cfg.
func (r replica) shape(cfg *config.Config) (int, error) {
	cfg.Train.Sync = r.SyncMode()
	steps, err := RunSteps(cfg.Train.Steps, r.Hello())
	if err != nil {
		return 0, usageIf(err)
	}
	if cfg.Train.Window, err = RunWindow(cfg.Train.Window, steps, r.Hello()); err != nil {
		return 0, usageIf(err)
	}
	if cfg.Train.Window > steps {
		return 0, &workload.UsageError{Err: fmt.Errorf("train.window: got %d, want at most the run's %d steps", cfg.Train.Window, steps)}
	}
	return steps, nil
}

// startAt sets where the worker starts: at the newest checkpoint, when
// every rank's script saved its state there, else fresh in the search pass
// (docs/pytorch.md#resume). Every rank reads the checkpoint itself, as
// engine.Restore does next; the session then checks that it restored the
// same one (StartedAt).
func startAt(env workload.Env, o *Options) (*startPoint, error) {
	dir, err := filepath.Abs(env.Config.Run.Dir)
	if err != nil {
		return nil, err
	}
	o.RunDir, o.Pass = dir, plan.PassSearch
	have := []float64{0}
	var state string
	var at *startPoint
	if ck, _, _, err := checkpoint.Latest(env.CheckpointDir); err == nil {
		state = filepath.Join(StateDir(dir, o.Rank), StateFile(ck.Pass, ck.Step))
		if _, err := os.Stat(state); err == nil {
			have[0], at = 1, &startPoint{ck.Pass, ck.Step}
		}
	}
	if err := env.World.AllreduceFloat64(have, reduce.Min); err != nil {
		return nil, err
	}
	if have[0] == 0 { // some rank's script saved nothing there: none resumes
		return nil, nil
	}
	o.Pass, o.ResumeState, o.ResumeStep = at.pass, state, at.step
	return at, nil
}

// StartedAt is the checkpoint the worker was started to resume.
func (r replica) StartedAt() (pass, step int, ok bool) {
	if r.started == nil {
		return 0, 0, false
	}
	return r.started.pass, r.started.step, true
}

// SaveStateAt has the script save its state for hdet's checkpoint at step
// of pass, in this rank's state directory.
func (r replica) SaveStateAt(ctx context.Context, pass, step int) error {
	return r.SaveState(ctx, filepath.Join(StateDir(r.runDir, r.env.World.Rank()), StateFile(pass, step)), step, pass)
}

// workerGPU is what the worker sees as CUDA_VISIBLE_DEVICES, and where its
// own GPU is in it (cuda:index): in GPU mode its torch world's GPUs on this
// node in LOCAL_RANK order, as torchrun leaves them (scripts pick
// cuda:LOCAL_RANK), or where they cannot all be listed its own GPU alone; in
// CPU mode what the rank inherited.
func workerGPU(gpu workload.GPU, peers []int, local int) (string, int, error) {
	if gpu.Own == "" {
		return os.Getenv("CUDA_VISIBLE_DEVICES"), -1, nil
	}
	world, err := gpu.Group(peers)
	switch {
	case err != nil:
		return "", 0, &workload.UsageError{Err: fmt.Errorf("GPU binding: %w", err)}
	case world != "":
		return world, local, nil
	}
	return gpu.Own, 0, nil
}

// torchPeers are the node-local ranks of the script's torch world on this
// node, in LOCAL_RANK order: the node's ranks, or with replica groups its
// replica's ranks on this node.
func torchPeers(env workload.Env) []int {
	if env.Layout.Size > 1 {
		return env.HostPeers
	}
	peers := make([]int, env.World.LocalSize())
	for i := range peers {
		peers[i] = i
	}
	return peers
}

// rendezvous is the torch.distributed address every rank's script in its
// torch world (the run, or with replica groups the replica) uses: the
// world's first rank picks a free port on its host and broadcasts
// host:port. Replicas on one host each pick their own port on their own
// first rank; the kernel hands each a different free one.
func rendezvous(env workload.Env) (string, int, error) {
	w := env.World
	if env.Layout.Size > 1 {
		w = env.Inside
	}
	var msg []byte
	var perr error
	if w.Rank() == 0 {
		host, err := env.Host()
		port, lerr := freePort()
		if perr = errors.Join(err, lerr); perr == nil {
			msg = []byte(net.JoinHostPort(host, strconv.Itoa(port)))
		}
	}
	msg, err := w.BcastMessage(msg, 0)
	if err != nil || perr != nil {
		return "", 0, errors.Join(perr, err)
	}
	host, portStr, err := net.SplitHostPort(string(msg))
	if err != nil {
		return "", 0, fmt.Errorf("rendezvous address %q: %w", msg, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return "", 0, fmt.Errorf("rendezvous address %q: %w", msg, err)
	}
	return host, port, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// RestartMainPass starts every rank's script again for the main pass, with
// a new rendezvous port (rank 0's pick, as at the start). Its parameters
// are the script's own: the warm start is not applied again.
func (r replica) RestartMainPass(ctx context.Context) (bool, error) {
	_, port, err := rendezvous(r.env)
	if err != nil {
		return false, err
	}
	return false, usageIf(r.Restart(ctx, port))
}

// Agree checks that every rank's script agrees with rank 0's (see the
// package function Agree). Every rank fails alike, with a usage error,
// when any rank's script differs: the one that differs says how, the
// others that another rank differs (else the first rank to exit, which
// sets mpirun's exit code, could be one that failed later for another
// reason).
func (r replica) Agree(_ context.Context, world workload.Comm) error {
	mine := Agree(world, r.Worker)
	differs := []float64{0}
	if mine != nil {
		differs[0] = 1
	}
	err := world.AllreduceFloat64(differs, reduce.Max)
	switch {
	case mine != nil:
		return usageIf(mine)
	case err != nil:
		return err
	case differs[0] > 0:
		return &workload.UsageError{Err: fmt.Errorf("%w: another rank's script differs from rank 0's (its message says how); every rank must build the same model and call hdet.attach with the same arguments", ErrConflict)}
	}
	return nil
}

// Sharded reports a script whose model is sharded across its replica's
// ranks (FSDP2).
func (r replica) Sharded() bool { return r.Hello().Sharded }

// Explorers merges the script's explorers with the configured ones (the
// package function Explorers).
func (r replica) Explorers(configured []config.Explorer) ([]config.Explorer, []string, error) {
	ex, notes, err := Explorers(configured, r.Hello())
	return ex, notes, usageIf(err)
}

// SettingsHint says where the script's settings come from.
func (r replica) SettingsHint() string { return SettingsHint(r.Hello()) }

// Finish ends the worker after the loop (STOP, then its exit status): a
// script that fails while finishing fails the job. After a failure, or
// once finished, it only kills what is left (Close).
func (r replica) Finish() error {
	if err := r.Close(); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	return nil
}

// MainWindow is the main pass's window (controller.RunShape.MainWindowSteps,
// docs/performance.md), 0 for T. A script in gradients mode has nothing to
// average there: its DDP keeps every rank's parameters the same, so it
// hands them over only as often as checkpoints (run.checkpoint_every) and
// evaluations (train.eval_every) need them, at the same steps as with
// T-step windows. A stop request waits for the window's end.
func (r replica) MainWindow(cfg *config.Config, steps int) int {
	t, tc := cfg.Train.Window, cfg.Train
	if r.SyncMode() != SyncGradients || tc.ReplicaSize > 1 || t < 1 {
		return 0
	}
	windows := (steps + t - 1) / t
	k := windows
	if e := cfg.Run.CheckpointEvery; e > 0 {
		k = e
	}
	if tc.EvalEvery > 0 {
		k = gcd(k, tc.EvalEvery)
	}
	k = min(k, windows, hparam.MaxWindowSteps/t)
	if k <= 1 {
		return 0
	}
	return k * t
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// usageIf makes a disagreement between the script and the configuration
// (or between ranks' scripts), or a script's setting hdet cannot use, a
// usage error: exit 2.
func usageIf(err error) error {
	if errors.Is(err, ErrConflict) || errors.Is(err, ErrSetting) {
		return &workload.UsageError{Err: err}
	}
	return err
}
