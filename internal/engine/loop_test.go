package engine

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/hparam/builtin"
	"github.com/hdet-dev/hdet/internal/controller"
	"github.com/hdet-dev/hdet/internal/metrics"
	"github.com/hdet-dev/hdet/mpi/reduce"
)

// Setup's explorer events (Options.Events) land in the first window's
// record; an unknown sync mode is refused before any window.
func TestSetupEventsReachTheFirstRecordAndSyncIsChecked(t *testing.T) {
	ctx := context.Background()
	ex, err := builtin.NewExplorer(builtin.LR)
	require.NoError(t, err)
	ctrl, err := controller.NewController(ctx, controller.RunShape{Ranks: 1, TotalSteps: 4, WindowSteps: 2, Seed: 1},
		[]controller.NamedExplorer{{Name: "lr", Explorer: ex, Config: []byte(`{"schedule":0.01,"auto":{"enabled":false}}`)}})
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "metrics.jsonl")
	mw, err := metrics.OpenWriter(path)
	require.NoError(t, err)
	require.NoError(t, mw.Write(metrics.StartRecord{Ranks: 1, TotalSteps: 4, WindowSteps: 2}))
	o := Options{Comm: soloComm{}, Replica: &lrReplica{buf: []float32{0}, nanFrom: -1}, Controller: ctrl, Steps: 4, Window: 2,
		Sync: "ring", Metrics: mw, Log: zerolog.Nop(),
		Events: []controller.Event{{Kind: controller.EventFrozen, Param: "lr", Op: "plan", Err: errors.New("boom")}}}
	_, err = Run(ctx, o)
	require.ErrorContains(t, err, `sync mode "ring": want local or gradients`)

	o.Sync = SyncLocal
	_, err = Run(ctx, o)
	require.NoError(t, err)
	require.NoError(t, mw.Close())
	recs, _, err := metrics.ReadFile(path)
	require.NoError(t, err)
	require.Len(t, recs, 3)
	wins := metrics.Of[metrics.WindowRecord](recs)
	require.Len(t, wins, 2)
	require.Len(t, wins[0].Events, 1)
	assert.Equal(t, metrics.EventFrozen, wins[0].Events[0].Kind)
	assert.Contains(t, wins[0].Events[0].Message, "boom")
	assert.Empty(t, wins[1].Events, "once only")
}

// pairComm is rank 0 of two, whose peer contributes peer to every float32
// sum (its gradient, then its contributor count of 1).
type pairComm struct {
	soloComm
	peer []float32
}

func (p pairComm) AllreduceFloat32(b []float32, _ reduce.Op) error {
	if len(b) == 1 {
		b[0]++
		return nil
	}
	for i := range b {
		b[i] += p.peer[i]
	}
	return nil
}

// The gradient mean is over the ranks that contributed: a rank with a
// non-finite gradient adds zeros and is not counted.
func TestGradientMeanOverContributors(t *testing.T) {
	r := &reducer{comm: pairComm{peer: []float32{2, 4}}, one: make([]float32, 1)}
	g := []float32{4, 8}
	require.NoError(t, r.AllreduceMean(g))
	assert.Equal(t, []float32{3, 6}, g, "both contributed")
	g = []float32{float32(math.NaN()), 1}
	require.NoError(t, r.AllreduceMean(g))
	assert.Equal(t, []float32{2, 4}, g, "only the peer's gradient, not halved")
}
