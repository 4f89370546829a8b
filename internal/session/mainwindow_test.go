package session

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/internal/bridge"
	"github.com/hdet-dev/hdet/internal/config"
	"github.com/hdet-dev/hdet/internal/engine"
)

// A worker script in gradients mode hands over in the main pass only where
// a checkpoint or an evaluation falls: T times the gcd of their cadences,
// the whole run without either, never past the longest window; local
// mode, replica groups and the built-in workload keep T (0).
func TestMainWindow(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		builtin                  bool
		sync                     engine.SyncMode
		window, steps, ckpt, evl int
		replicaSize              int
		want                     int
	}{
		{"checkpoints every 10 windows", false, engine.SyncGradients, 9, 300, 10, 0, 1, 90},
		{"evaluations every 4 windows too", false, engine.SyncGradients, 9, 300, 10, 4, 1, 18},
		{"evaluations every 3 windows", false, engine.SyncGradients, 9, 300, 10, 3, 1, 0},
		{"neither: the whole run", false, engine.SyncGradients, 9, 300, 0, 0, 1, 306},
		{"fewer windows than the cadence", false, engine.SyncGradients, 5, 40, 10, 0, 1, 40},
		{"at most the longest window", false, engine.SyncGradients, 1 << 19, 1 << 22, 0, 0, 1, hparam.MaxWindowSteps},
		{"local mode averages every window", false, engine.SyncLocal, 9, 300, 10, 0, 1, 0},
		{"replica groups average every window", false, engine.SyncGradients, 9, 300, 10, 0, 2, 0},
		{"the built-in workload", true, engine.SyncGradients, 9, 300, 10, 0, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.Train.Window, cfg.Train.EvalEvery, cfg.Train.ReplicaSize, cfg.Run.CheckpointEvery = tc.window, tc.evl, tc.replicaSize, tc.ckpt
			s := &session{cfg: &cfg, sync: tc.sync, steps: tc.steps}
			if !tc.builtin {
				s.worker = &bridge.Worker{}
			}
			assert.Equal(t, tc.want, s.mainWindow())
		})
	}
}
