package bridge

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/internal/config"
	"github.com/hdet-dev/hdet/internal/engine"
	"github.com/hdet-dev/hdet/internal/workload"
)

// The worker sees its torch world's GPUs where they can all be listed, its
// own alone where not, what the rank inherited in CPU mode; a binding that
// fails is a usage error.
func TestWorkerGPU(t *testing.T) {
	t.Setenv("CUDA_VISIBLE_DEVICES", "inherited")
	vis, idx, err := workerGPU(workload.GPU{}, []int{0, 1}, 1)
	require.NoError(t, err)
	assert.Equal(t, "inherited", vis)
	assert.Equal(t, -1, idx)

	group := func(list string, err error) func([]int) (string, error) {
		return func(locals []int) (string, error) {
			assert.Equal(t, []int{2, 3}, locals)
			return list, err
		}
	}
	vis, idx, err = workerGPU(workload.GPU{Own: "GPU-b", Group: group("GPU-a,GPU-b", nil)}, []int{2, 3}, 1)
	require.NoError(t, err)
	assert.Equal(t, "GPU-a,GPU-b", vis)
	assert.Equal(t, 1, idx)
	vis, idx, err = workerGPU(workload.GPU{Own: "MIG-b", Group: group("", nil)}, []int{2, 3}, 1)
	require.NoError(t, err)
	assert.Equal(t, "MIG-b", vis)
	assert.Equal(t, 0, idx)

	_, _, err = workerGPU(workload.GPU{Own: "GPU-b", Group: group("", errors.New("no GPU left"))}, []int{2, 3}, 1)
	var ue *workload.UsageError
	require.ErrorAs(t, err, &ue)
	assert.EqualError(t, err, "GPU binding: no GPU left")
}

// The script's torch world on this node: every node-local rank, or with
// replica groups the replica's ranks here.
func TestTorchPeers(t *testing.T) {
	assert.Equal(t, []int{0, 1, 2}, torchPeers(workload.Env{World: localWorld{size: 3}, Layout: engine.Layout{World: 6, Size: 1}}))
	assert.Equal(t, []int{1, 3}, torchPeers(workload.Env{World: localWorld{size: 4}, Layout: engine.Layout{World: 4, Size: 2}, HostPeers: []int{1, 3}}))
}

// localWorld is a workload.Comm of size ranks on this node; only its size
// is used.
type localWorld struct {
	workload.Comm
	size int
}

func (l localWorld) LocalSize() int { return l.size }

// A script in gradients mode hands over in the main pass only where a
// checkpoint or an evaluation falls: T times the gcd of their cadences, the
// whole run without either, never past the longest window; local mode and
// replica groups keep T (0).
func TestMainWindow(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		sync                     string
		window, steps, ckpt, evl int
		replicaSize              int
		want                     int
	}{
		{"checkpoints every 10 windows", SyncGradients, 9, 300, 10, 0, 1, 90},
		{"evaluations every 4 windows too", SyncGradients, 9, 300, 10, 4, 1, 18},
		{"evaluations every 3 windows", SyncGradients, 9, 300, 10, 3, 1, 0},
		{"neither: the whole run", SyncGradients, 9, 300, 0, 0, 1, 306},
		{"fewer windows than the cadence", SyncGradients, 5, 40, 10, 0, 1, 40},
		{"at most the longest window", SyncGradients, 1 << 19, 1 << 22, 0, 0, 1, hparam.MaxWindowSteps},
		{"local mode averages every window", SyncLocal, 9, 300, 10, 0, 1, 0},
		{"replica groups average every window", SyncGradients, 9, 300, 10, 0, 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.Train.Window, cfg.Train.EvalEvery, cfg.Train.ReplicaSize, cfg.Run.CheckpointEvery = tc.window, tc.evl, tc.replicaSize, tc.ckpt
			r := replica{Worker: &Worker{mode: tc.sync}}
			assert.Equal(t, tc.want, r.MainWindow(&cfg, tc.steps))
		})
	}
}
