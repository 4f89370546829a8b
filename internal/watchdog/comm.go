package watchdog

import (
	"github.com/hdet-dev/hdet/internal/engine"
	"github.com/hdet-dev/hdet/mpi/reduce"
)

// Comm wraps c so that each collective is timed by the watchdog (and logged
// with its duration when Options.Collectives is set).
func (w *Watchdog) Comm(c engine.Comm) engine.Comm {
	if w == nil {
		return c
	}
	if g, ok := c.(engine.SliceGatherer); ok {
		return gatherComm{comm: comm{Comm: c, w: w}, g: g}
	}
	return comm{Comm: c, w: w}
}

// gatherComm is comm for a communicator that is also an
// engine.SliceGatherer (a replica's, under MPI): the wrapper keeps it one.
type gatherComm struct {
	comm
	g engine.SliceGatherer
}

func (c gatherComm) AllgathervFloat32(buf []float32, counts []int) error {
	defer c.w.collective("allgatherv")()
	return c.g.AllgathervFloat32(buf, counts)
}

type comm struct {
	engine.Comm
	w *Watchdog
}

func (c comm) AllreduceFloat32(buf []float32, op reduce.Op) error {
	defer c.w.collective("allreduce")()
	return c.Comm.AllreduceFloat32(buf, op)
}

func (c comm) AllreduceFloat64(buf []float64, op reduce.Op) error {
	defer c.w.collective("allreduce")()
	return c.Comm.AllreduceFloat64(buf, op)
}

func (c comm) AllgatherFloat64(send, recv []float64) error {
	defer c.w.collective("allgather")()
	return c.Comm.AllgatherFloat64(send, recv)
}

func (c comm) BcastMessage(msg []byte, root int) ([]byte, error) {
	defer c.w.collective("bcast")()
	return c.Comm.BcastMessage(msg, root)
}

// Converger wraps the converge allreduce the same way.
func (w *Watchdog) Converger(c engine.Converger) engine.Converger {
	if w == nil || c == nil {
		return c
	}
	return converger{Converger: c, w: w}
}

type converger struct {
	engine.Converger
	w *Watchdog
}

func (c converger) AllreduceSum(buf []float32) error {
	defer c.w.collective("converge allreduce")()
	return c.Converger.AllreduceSum(buf)
}
