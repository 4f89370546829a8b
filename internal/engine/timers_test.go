package engine

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/hparam/builtin"
	"github.com/hdet-dev/hdet/internal/controller"
	"github.com/hdet-dev/hdet/internal/metrics"
	"github.com/hdet-dev/hdet/mpi/reduce"
)

// slowComm is a world of one rank whose float32 allreduces take pause.
type slowComm struct {
	soloComm
	pause time.Duration
}

func (c slowComm) AllreduceFloat32([]float32, reduce.Op) error {
	time.Sleep(c.pause)
	return nil
}

// gradReplica all-reduces a gradient every step, as a replica in
// gradients mode does, and takes pause to evaluate.
type gradReplica struct {
	lrReplica
	pause time.Duration
}

func (r *gradReplica) Evaluate(context.Context) (float64, float64, error) {
	time.Sleep(r.pause)
	return 1, 0.5, nil
}

func (r *gradReplica) TrainWindow(ctx context.Context, w Window) (WindowResult, error) {
	for range w.Steps {
		if err := w.Grads.AllreduceMean([]float32{1}); err != nil {
			return WindowResult{}, err
		}
	}
	return r.lrReplica.TrainWindow(ctx, w)
}

// The reducer counts the time of its allreduces until taken.
func TestReducerCountsItsAllreduces(t *testing.T) {
	r := &reducer{comm: slowComm{pause: 2 * time.Millisecond}, one: make([]float32, 1)}
	require.NoError(t, r.AllreduceMean([]float32{1, 2}))
	assert.GreaterOrEqual(t, r.taken(), 4*time.Millisecond, "two allreduces, 2 ms each")
	assert.Zero(t, r.taken(), "counting starts again")
}

// In gradients mode every window record carries the time of its per-step
// gradient allreduces, and a window that evaluated the evaluation's time;
// the others have none.
func TestWindowRecordCarriesAllreduceAndEvalSeconds(t *testing.T) {
	ctx := context.Background()
	ex, err := builtin.NewExplorer(builtin.LR)
	require.NoError(t, err)
	ctrl, err := controller.NewController(ctx, controller.RunShape{Ranks: 1, TotalSteps: 12, WindowSteps: 3, Seed: 1},
		[]controller.NamedExplorer{{Name: "lr", Explorer: ex, Config: []byte(`{"schedule":0.01,"auto":{"enabled":false}}`)}})
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "metrics.jsonl")
	mw, err := metrics.OpenWriter(path)
	require.NoError(t, err)
	require.NoError(t, mw.Write(metrics.StartRecord{}))
	rep := &gradReplica{lrReplica: lrReplica{buf: []float32{0}, nanFrom: -1}, pause: 5 * time.Millisecond}
	_, err = Run(ctx, Options{Comm: slowComm{pause: time.Millisecond}, Replica: rep, Controller: ctrl, Steps: 12, Window: 3,
		Sync: SyncGradients, EvalEvery: 2, Metrics: mw, Log: zerolog.Nop()})
	require.NoError(t, err)
	require.NoError(t, mw.Close())
	recs, _, err := metrics.ReadFile(path)
	require.NoError(t, err)
	var evaluated []int
	for _, r := range metrics.Of[metrics.WindowRecord](recs) {
		// 3 steps x 2 allreduces of 1 ms each.
		assert.GreaterOrEqual(t, r.AllreduceSeconds, 0.006, "window %d", r.Window)
		assert.Less(t, r.AllreduceSeconds, r.FanoutSeconds+1e-9, "window %d: inside fanout", r.Window)
		if r.Eval != nil {
			evaluated = append(evaluated, r.Window)
			assert.GreaterOrEqual(t, r.EvalSeconds, 0.005, "window %d", r.Window)
		} else {
			assert.Zero(t, r.EvalSeconds, "window %d", r.Window)
		}
	}
	assert.Equal(t, []int{1, 3}, evaluated)
}
