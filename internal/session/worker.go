package session

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/internal/bridge"
	"github.com/hdet-dev/hdet/internal/engine"
)

// workerGPU is what the worker sees as CUDA_VISIBLE_DEVICES, and where its
// own GPU is in it (cuda:index): in GPU mode its torch world's GPUs on this
// node in LOCAL_RANK order, as torchrun leaves them (scripts pick
// cuda:LOCAL_RANK), or where they cannot all be listed its own GPU alone; in
// CPU mode what the rank inherited.
func (s *session) workerGPU(localRank int) (string, int) {
	switch {
	case s.gpu == nil:
		return os.Getenv("CUDA_VISIBLE_DEVICES"), -1
	case s.worldGPUs != "":
		return s.worldGPUs, localRank
	case s.gpu.MIG != "":
		return s.gpu.MIG, 0
	}
	return s.gpu.UUID, 0
}

// torchPeers are the node-local ranks of the script's torch world on this
// node, in LOCAL_RANK order: the node's ranks, or with replica groups its
// replica's ranks on this node.
func (s *session) torchPeers() []int {
	if s.lay.Size > 1 {
		return s.hostPeers
	}
	peers := make([]int, s.o.World.LocalSize())
	for i := range peers {
		peers[i] = i
	}
	return peers
}

// torchWorld is the communicator of the ranks whose scripts form one
// torch.distributed world: the run, or with replica groups the replica.
func (s *session) torchWorld() World {
	if s.lay.Size > 1 {
		return s.inside
	}
	return s.o.World
}

// rendezvous is the torch.distributed address every rank's script in its
// torch world uses: the world's first rank picks a free port on its host
// and broadcasts host:port. Replicas on one host each pick their own port
// on their own first rank; the kernel hands each a different free one.
func (s *session) rendezvous() (string, int, error) {
	w := s.torchWorld()
	var msg []byte
	var perr error
	if w.Rank() == 0 {
		host, err := s.o.Host()
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

// startWorker launches the --worker command on this rank and takes the
// run's length from it.
func (s *session) startWorker(ctx context.Context) error {
	w := s.o.World
	host, port, err := s.rendezvous()
	if err != nil {
		return err
	}
	peers := s.torchPeers()
	local := slices.Index(peers, w.LocalRank()) // LOCAL_RANK
	o := bridge.Options{
		Command: s.o.Worker, Rank: w.Rank(), WorldSize: w.Size(), LocalRank: w.LocalRank(), LocalSize: w.LocalSize(),
		ReplicaSize: s.lay.Size, ReplicaRank: s.lay.Position(w.Rank()),
		ReplicaLocalRank: local, ReplicaLocalSize: len(peers),
		MasterAddr: host, MasterPort: port, SyncMode: string(s.sync),
	}
	o.GPU, o.GPUIndex = s.workerGPU(local)
	if err := s.workerStart(&o); err != nil {
		return err
	}
	wk, err := bridge.Start(ctx, o)
	if err != nil {
		return usageIf(err)
	}
	s.worker, s.replica = wk, wk
	// After a failure the worker is only killed; a finished run closes it
	// itself (closeWorker) to learn how the script ended.
	s.closers = append(s.closers, func() { _ = wk.Close() })
	s.sync = engine.SyncMode(wk.SyncMode()) // the script's, which a configured mode must match
	s.cfg.Train.Sync = wk.SyncMode()
	if s.steps, err = bridge.RunSteps(s.cfg.Train.Steps, wk.Hello()); err != nil {
		return usageIf(err)
	}
	if s.cfg.Train.Window, err = bridge.RunWindow(s.cfg.Train.Window, s.steps, wk.Hello()); err != nil {
		return usageIf(err)
	}
	if s.cfg.Train.Window > s.steps {
		return Usagef("train.window: got %d, want at most the run's %d steps", s.cfg.Train.Window, s.steps)
	}
	return nil
}

// mainWindow is the main pass's window (controller.RunShape.MainWindowSteps,
// docs/performance.md), 0 for T. A worker script in gradients mode has
// nothing to average there: its DDP keeps every rank's parameters the same,
// so it hands them over only as often as checkpoints (run.checkpoint_every)
// and evaluations (train.eval_every) need them, at the same steps as with
// T-step windows. A stop request waits for the window's end.
func (s *session) mainWindow() int {
	t, tc := s.cfg.Train.Window, s.cfg.Train
	if s.worker == nil || s.sync != engine.SyncGradients || tc.ReplicaSize > 1 || t < 1 {
		return 0
	}
	windows := (s.steps + t - 1) / t
	k := windows
	if e := s.cfg.Run.CheckpointEvery; e > 0 {
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

// restartWorker starts every rank's script again for the main pass, with a
// new rendezvous port (rank 0's pick, as at the start).
func (s *session) restartWorker(ctx context.Context) error {
	_, port, err := s.rendezvous()
	if err != nil {
		return err
	}
	return usageIf(s.worker.Restart(ctx, port))
}

// usageIf makes a disagreement between the script and the configuration
// (or between ranks' scripts), or a script's setting hdet cannot use, a
// usage error: exit 2.
func usageIf(err error) error {
	if errors.Is(err, bridge.ErrConflict) || errors.Is(err, bridge.ErrSetting) {
		return &UsageError{Err: err}
	}
	return err
}

// closeWorker ends the worker after the loop (STOP, then its exit status):
// a script that fails while finishing fails the job.
func (s *session) closeWorker() error {
	if s.worker == nil {
		return nil
	}
	if err := s.worker.Close(); err != nil {
		return fmt.Errorf("worker: %w", err)
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
