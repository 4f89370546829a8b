package session

import (
	"github.com/hdet-dev/hdet/internal/workload"
	"github.com/hdet-dev/hdet/internal/workload/mnist"
)

// workloads are the built-in workloads by workload.kind (a new one is its
// package's Factory here, and its kind in config's check of
// workload.kind); --worker's command is the PyTorch bridge's.
var workloads = map[string]workload.Factory{
	"mnist": mnist.Factory,
}

// env is where this rank stands, for a workload's Factory.
func (s *session) env() workload.Env {
	return workload.Env{Config: s.cfg, World: s.o.World, Layout: s.lay, Inside: s.inside, HostPeers: s.hostPeers,
		Host: s.o.Host, Command: s.o.Worker}
}
