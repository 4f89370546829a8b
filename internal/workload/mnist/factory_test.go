package mnist

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/config"
	"github.com/hdet-dev/hdet/internal/engine"
	"github.com/hdet-dev/hdet/internal/workload"
	"github.com/hdet-dev/hdet/mpi/reduce"
)

// one is a world of one rank.
type one struct{}

func (one) Rank() int                                    { return 0 }
func (one) Size() int                                    { return 1 }
func (one) LocalRank() int                               { return 0 }
func (one) LocalSize() int                               { return 1 }
func (one) AllreduceFloat64([]float64, reduce.Op) error  { return nil }
func (one) BcastMessage(m []byte, _ int) ([]byte, error) { return m, nil }

// The factory builds the config's MLP, takes the run's length from
// train.epochs when train.steps is 0, and makes what the user configured
// wrong a usage error; the replica restarts its main pass drawn anew.
func TestFactoryBuildsTheConfiguredReplica(t *testing.T) {
	dir := t.TempDir()
	writeIdx(t, filepath.Join(dir, "train-images-idx3-ubyte"), []int{8, 2, 2}, make([]byte, 32))
	writeIdx(t, filepath.Join(dir, "train-labels-idx1-ubyte"), []int{8}, []byte{0, 1, 2, 3, 4, 5, 6, 7})
	writeIdx(t, filepath.Join(dir, "t10k-images-idx3-ubyte"), []int{1, 2, 2}, make([]byte, 4))
	writeIdx(t, filepath.Join(dir, "t10k-labels-idx1-ubyte"), []int{1}, []byte{9})
	cfg := config.Default()
	cfg.Workload.Data, cfg.Workload.Hidden, cfg.Workload.BatchSize = dir, []int{3}, 2
	cfg.Train.Steps, cfg.Train.Epochs, cfg.Train.Window = 0, 3, 4
	r, steps, err := Factory(context.Background(), workload.Env{Config: &cfg, World: one{}})
	require.NoError(t, err)
	assert.Equal(t, 12, steps, "3 epochs of 4 batches")
	assert.Equal(t, 4*3+3+3*10+10, r.ParamCount())
	rs, ok := engine.As[workload.Restarter](r)
	require.True(t, ok)
	drawn, err := rs.RestartMainPass(context.Background())
	require.NoError(t, err)
	assert.True(t, drawn, "the warm start applies again")

	cfg.Train.Window = 13
	_, _, err = Factory(context.Background(), workload.Env{Config: &cfg, World: one{}})
	var ue *workload.UsageError
	require.ErrorAs(t, err, &ue)
	assert.Contains(t, err.Error(), "train.window: got 13, want at most the run's 12 steps (3 epochs)")

	cfg.Train.Window, cfg.Workload.BatchSize = 4, 9
	_, _, err = Factory(context.Background(), workload.Env{Config: &cfg, World: one{}})
	require.ErrorAs(t, err, &ue)
	assert.Contains(t, err.Error(), "workload: batch_size: 9")

	cfg.Workload.Data = filepath.Join(dir, "absent")
	_, _, err = Factory(context.Background(), workload.Env{Config: &cfg, World: one{}})
	require.ErrorAs(t, err, &ue)
	assert.Contains(t, err.Error(), "workload.data: ")
}
