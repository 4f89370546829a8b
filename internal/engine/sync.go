package engine

import (
	"fmt"
	"math"
	"time"

	"github.com/hdet-dev/hdet/mpi/reduce"
)

// SyncMode is how the ranks communicate inside a window (docs/design.md §1).
type SyncMode string

// The sync modes; ParseSyncMode refuses anything else.
const (
	SyncGradients SyncMode = "gradients" // gradients all-reduced every step, per-rank step sizes
	SyncLocal     SyncMode = "local"     // no communication inside a window; optimizer state averaged too
)

// SyncModes lists the valid modes, for messages.
var SyncModes = []SyncMode{SyncLocal, SyncGradients}

// ParseSyncMode returns the mode named s, or an error naming the allowed ones.
func ParseSyncMode(s string) (SyncMode, error) {
	for _, m := range SyncModes {
		if string(m) == s {
			return m, nil
		}
	}
	return "", fmt.Errorf("sync mode %q: want %s or %s", s, SyncLocal, SyncGradients)
}

// reducer averages gradients across ranks in `gradients` mode, over the
// ranks that contributed one.
type reducer struct {
	comm  Comm
	one   []float32     // scratch: this rank's contribution count
	spent time.Duration // in the two allreduces, since taken() last asked
}

func (r *reducer) AllreduceMean(g []float32) error {
	// A non-finite gradient would poison every rank: this rank contributes
	// zeros instead (its window is flagged unhealthy by its loss), and the
	// sum is divided by the ranks that did contribute.
	r.one[0] = 1
	if !finite32(g) {
		clear(g)
		r.one[0] = 0
	}
	t := time.Now()
	if err := r.comm.AllreduceFloat32(g, reduce.Sum); err != nil {
		return fmt.Errorf("gradient allreduce: %w", err)
	}
	if err := r.comm.AllreduceFloat32(r.one, reduce.Sum); err != nil {
		return fmt.Errorf("gradient contributor count: %w", err)
	}
	r.spent += time.Since(t)
	if r.one[0] == 0 {
		return nil // every rank's gradient was non-finite: zeros, no step
	}
	inv := 1 / r.one[0]
	for i := range g {
		g[i] *= inv
	}
	return nil
}

// taken returns the time spent in the allreduces since it was last called
// and starts counting again.
func (r *reducer) taken() time.Duration {
	d := r.spent
	r.spent = 0
	return d
}

func finite32(b []float32) bool {
	for _, v := range b {
		f := float64(v)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return false
		}
	}
	return true
}

// hostConverge is the converge on the host slice through Comm.
type hostConverge struct{ c Comm }

func (h hostConverge) AllreduceSum(buf []float32) error { return h.c.AllreduceFloat32(buf, reduce.Sum) }
