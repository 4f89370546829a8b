package watchdog

import (
	"unsafe"

	"github.com/hdet-dev/hdet/device"
	"github.com/hdet-dev/hdet/engine"
	"github.com/hdet-dev/hdet/mpi"
)

// Comm wraps c so that each collective is timed by the watchdog (and logged
// with its duration when Options.Collectives is set).
func (w *Watchdog) Comm(c engine.Comm) engine.Comm {
	if w == nil {
		return c
	}
	return comm{Comm: c, w: w}
}

type comm struct {
	engine.Comm
	w *Watchdog
}

func (c comm) AllreduceFloat32(buf []float32, op mpi.Op) error {
	defer c.w.collective("allreduce")()
	return c.Comm.AllreduceFloat32(buf, op)
}

func (c comm) AllreducePtr(ptr unsafe.Pointer, n int, dt mpi.Datatype, op mpi.Op) error {
	defer c.w.collective("allreduce")()
	return c.Comm.AllreducePtr(ptr, n, dt, op)
}

func (c comm) AllreduceFloat64(buf []float64, op mpi.Op) error {
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

// Allreducer wraps the converge allreducer the same way.
func (w *Watchdog) Allreducer(a device.Allreducer) device.Allreducer {
	if w == nil || a == nil {
		return a
	}
	return allreducer{Allreducer: a, w: w}
}

type allreducer struct {
	device.Allreducer
	w *Watchdog
}

func (a allreducer) Allreduce(b device.Buffer, op mpi.Op) error {
	defer a.w.collective("converge allreduce")()
	return a.Allreducer.Allreduce(b, op)
}
