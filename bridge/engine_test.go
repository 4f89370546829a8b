package bridge

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/engine"
	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/mpi"
)

// hub lets n goroutines run collectives with each other: every rank hands
// in its contribution and gets everyone's, in rank order.
type hub struct {
	n       int
	mu      sync.Mutex
	cond    *sync.Cond
	round   int
	count   int
	readers int
	slots   []any
}

func newHub(n int) *hub {
	h := &hub{n: n, slots: make([]any, n)}
	h.cond = sync.NewCond(&h.mu)
	return h
}

func (h *hub) exchange(rank int, v any) []any {
	h.mu.Lock()
	defer h.mu.Unlock()
	for h.readers > 0 { // the previous round is still being read
		h.cond.Wait()
	}
	r := h.round
	h.slots[rank] = v
	if h.count++; h.count == h.n {
		h.round, h.count, h.readers = h.round+1, 0, h.n
		h.cond.Broadcast()
	}
	for h.round == r {
		h.cond.Wait()
	}
	out := slices.Clone(h.slots)
	if h.readers--; h.readers == 0 {
		h.cond.Broadcast()
	}
	return out
}

// hubComm is one rank's engine.Comm over a hub, standing in for MPI.
type hubComm struct {
	h    *hub
	rank int
}

func (c hubComm) Rank() int { return c.rank }
func (c hubComm) Size() int { return c.h.n }

func (c hubComm) AllreduceFloat32(buf []float32, op mpi.Op) error {
	if op != mpi.Sum {
		return fmt.Errorf("hubComm: only Sum")
	}
	all := c.h.exchange(c.rank, slices.Clone(buf))
	clear(buf)
	for _, a := range all {
		for i, v := range a.([]float32) {
			buf[i] += v
		}
	}
	return nil
}

func (c hubComm) AllreduceFloat64(buf []float64, op mpi.Op) error {
	all := c.h.exchange(c.rank, slices.Clone(buf))
	for i := range buf {
		buf[i] = all[0].([]float64)[i]
		for _, a := range all[1:] {
			v := a.([]float64)[i]
			switch op {
			case mpi.Sum:
				buf[i] += v
			case mpi.Max:
				buf[i] = max(buf[i], v)
			default:
				buf[i] = min(buf[i], v)
			}
		}
	}
	return nil
}

func (c hubComm) AllgatherFloat64(send, recv []float64) error {
	for r, a := range c.h.exchange(c.rank, slices.Clone(send)) {
		copy(recv[r*len(send):], a.([]float64))
	}
	return nil
}

func (c hubComm) BcastMessage(msg []byte, root int) ([]byte, error) {
	return c.h.exchange(c.rank, msg)[root].([]byte), nil
}

// TestUnderEngine runs two python workers under the real engine window loop
// (local mode, lr and weight decay explored): they train with different
// values, and every converge leaves both with the same parameters.
func TestUnderEngine(t *testing.T) {
	needTorch(t)
	const ranks, steps, window = 2, 12, 4
	ctx := context.Background()
	lr, err := hparam.NewBuiltinExplorer(hparam.BuiltinLR)
	require.NoError(t, err)
	wd, err := hparam.NewBuiltinExplorer(hparam.BuiltinWeightDecay)
	require.NoError(t, err)
	ctrl, err := hparam.NewController(ctx, hparam.RunShape{Ranks: ranks, TotalSteps: steps, WindowSteps: window, Seed: 3},
		[]hparam.NamedExplorer{
			{Name: "lr", Explorer: lr, Config: []byte(`{"schedule": {"kind": "onecycle", "max_lr": 0.05}, "spread": {"alpha": 0.5}}`)},
			{Name: "weight_decay", Explorer: wd, Config: []byte(`{"schedule": 0.001}`)},
		})
	require.NoError(t, err)

	h := newHub(ranks)
	workers := make([]started, ranks)
	results := make([]engine.Result, ranks)
	errs := make([]error, ranks)
	for r := range workers {
		opts := pythonOptions(t, SyncLocal, "--steps", fmt.Sprint(steps))
		opts.Rank, opts.WorldSize = r, ranks
		workers[r] = startPython(t, opts)
	}
	var wg sync.WaitGroup
	for r, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := engine.Options{Comm: hubComm{h, r}, Replica: w, Steps: steps, Window: window, Sync: engine.SyncLocal, Log: zerolog.Nop()}
			if r == 0 {
				o.Controller = ctrl
			}
			results[r], errs[r] = engine.Run(ctx, o)
		}()
	}
	wg.Wait()
	for r := range workers {
		require.NoError(t, errs[r], "rank %d: %s", r, workers[r].out)
	}
	assert.Equal(t, steps, results[0].Steps)
	assert.Equal(t, results[0].Checksum, results[1].Checksum, "same parameters on both ranks after the last converge")
	assert.Equal(t, workers[0].SyncBuffer(true), workers[1].SyncBuffer(true), "parameters and optimizer state averaged")
	a0, a1 := workers[0].Applied(), workers[1].Applied()
	require.Len(t, a0["lr"], window)
	assert.NotEqual(t, a0["lr"], a1["lr"], "the ranks trained with different learning rates")
	assert.Len(t, a0["weight_decay"], window)
	for r, w := range workers {
		require.NoError(t, w.Close(), "rank %d: %s", r, w.out)
		assert.Contains(t, w.out.String(), "worker.py finished 12 steps")
	}
}
