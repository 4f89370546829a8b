package session

import (
	"context"
	"maps"
	"slices"
	"strings"

	"github.com/hdet-dev/hdet/internal/bridge"
	"github.com/hdet-dev/hdet/internal/engine"
	"github.com/hdet-dev/hdet/internal/workload"
	"github.com/hdet-dev/hdet/internal/workload/mnist"
)

// workloads are the built-in workloads by workload.kind, the one place
// they are listed (a new one is its package's Factory here); --worker's
// command is the PyTorch bridge's.
var workloads = map[string]workload.Factory{
	"mnist": mnist.Factory,
}

// makeReplica builds this rank's replica with its workload's Factory and
// learns the run's length.
func (s *session) makeReplica(ctx context.Context) error {
	factory, ok := workloads[s.cfg.Workload.Kind]
	if len(s.o.Worker) > 0 {
		factory, ok = bridge.Factory, true
	}
	if !ok {
		return Usagef("workload.kind: got %q, want one of %s", s.cfg.Workload.Kind, strings.Join(slices.Sorted(maps.Keys(workloads)), ", "))
	}
	r, steps, err := factory(ctx, s.env())
	if err != nil {
		return err
	}
	s.replica, s.steps = r, steps
	s.sync = engine.SyncMode(s.cfg.Train.Sync) // a script's, which a configured mode must match
	if f, ok := r.(workload.Finisher); ok {
		// After a failure its process is only killed; a finished run
		// ends it itself (endReplica) to learn how it ended.
		s.closers = append(s.closers, func() { _ = f.Finish() })
	}
	if WrapReplica == nil {
		return nil
	}
	s.replica, err = WrapReplica(s.replica, s.rank, s.cfg.Train.Window)
	return err
}

// env is where this rank stands, for a workload's Factory.
func (s *session) env() workload.Env {
	return workload.Env{Config: s.cfg, CheckpointDir: s.checkpointDir(), World: s.o.World, Layout: s.lay, Inside: s.inside,
		HostPeers: s.hostPeers, GPU: s.gpu, Host: s.o.Host, Command: s.o.Worker}
}

// mainWindow is the main pass's window (workload.MainWindower), 0 for T.
func (s *session) mainWindow() int {
	m, ok := engine.As[workload.MainWindower](s.replica)
	if !ok {
		return 0
	}
	return m.MainWindow(s.cfg, s.steps)
}

// sharded reports a replica whose parameters are sharded across its
// replica's ranks (workload.Sharder).
func (s *session) sharded() bool {
	sh, ok := engine.As[workload.Sharder](s.replica)
	return ok && sh.Sharded()
}

// endReplica ends a replica that holds a process after the loop
// (workload.Finisher): a script that fails while finishing fails the job.
func (s *session) endReplica() error {
	f, ok := engine.As[workload.Finisher](s.replica)
	if !ok {
		return nil
	}
	return f.Finish()
}
