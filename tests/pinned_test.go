package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pinnedBase is a short run (6 windows of 10 steps on a tiny MLP) with a
// checkpoint after every window, so a resume can start from any of them.
const pinnedBase = `
workload: {hidden: [32], batch_size: 32}
train: {steps: 60, window: 10, seed: 11, sync: %s, eval_every: 2}
run: {progress: none, checkpoint_every: 1, keep: 100}
`

const pinnedFixed = `
explorers:
  - name: lr
    plugin: hdet-explorer-lr
    config: {schedule: {kind: onecycle, max_lr: 0.004}, spread: {alpha: 0.5}, auto: {enabled: false}}
  - name: dropout
    plugin: hdet-explorer-dropout
    config: {schedule: 0.1, spread: {alpha: 0.05}, auto: {enabled: false}}
`

// pinnedAuto lets the explorers move their bases (the controller's plan
// changes with the observed losses), in one pass (auto.commit continue).
const pinnedAuto = `
explorers:
  - name: lr
    plugin: hdet-explorer-lr
    config: {schedule: {kind: onecycle, max_lr: 0.004}, spread: {alpha: 0.5}, auto: {start: 20, commit: continue}}
  - name: weight_decay
    plugin: hdet-explorer-weight-decay
    config: {schedule: 0.01, spread: {kind: geometric, alpha: 2}, auto: {start: 0, commit: continue}}
`

const pinnedAutoSum = "f7250d94ddc12dfb"

func pinnedCfg(sync, explorers string) string {
	return strings.Replace(pinnedBase, "%s", sync, 1) + explorers
}

// The final parameters of a few short configs, pinned so a refactoring
// keeps behaviour bit for bit. Only an intended change of the algorithm
// (docs/design.md §1) or of the built-in trainer's arithmetic may re-pin them,
// saying so in its commit.
func TestPinnedChecksums(t *testing.T) {
	cases := []struct{ name, cfg, want string }{
		{"local", pinnedCfg("local", pinnedFixed), "cff741d2d9bf5fdb"},
		{"gradients", pinnedCfg("gradients", pinnedFixed), "8530ba3626c567bb"},
		{"explorer plan", pinnedCfg("local", pinnedAuto), pinnedAutoSum},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := runHDET(t, 4, c.cfg)
			require.NoError(t, r.err, r.stderr)
			assert.Equal(t, c.want, r.end(t).Checksum)
		})
	}
}

// A run resumed from its window-3 checkpoint, or from its step-0 one (a
// run stopped in its first window), ends with the same pinned parameters
// as the run left alone.
func TestPinnedResume(t *testing.T) {
	r := runHDET(t, 4, pinnedCfg("local", pinnedAuto))
	require.NoError(t, r.err, r.stderr)
	assert.Equal(t, pinnedAutoSum, resumeFrom(t, r, 30))
	assert.Equal(t, pinnedAutoSum, resumeFrom(t, r, 0))
	assert.Len(t, windowRecords(t, r), 6, "the windows after the checkpoint, run again, replace their records")
}

// resumeFrom deletes a finished run's checkpoints after step (it wrote 7:
// step 0, then every 10 steps), runs the same command again with extra
// flags and returns the final checksum of the resumed run.
func resumeFrom(t *testing.T, r hdetRun, step int, extra ...string) string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(r.dir, "checkpoints", "ckpt-*.hdet"))
	require.NoError(t, err)
	require.Len(t, paths, 7)
	keep := fmt.Sprintf("ckpt-%012d.hdet", step)
	for _, p := range paths {
		if filepath.Base(p) > keep {
			require.NoError(t, os.Remove(p))
		}
	}
	hdet, plugins := hdetBinaries(t)
	args := append([]string{hdet, "run", filepath.Join(filepath.Dir(r.dir), "config.in.yaml"),
		"--run-dir", r.dir, "--plugin-dir", plugins, "--set", "workload.data=" + mnistDir(t)}, extra...)
	out, err := mpirunCmd(t.Context(), t, 4, args...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Regexp(t, fmt.Sprintf(`"step":%d,[^\n]*"message":"resuming from checkpoint"`, step), string(out))
	return hdetRun{dir: r.dir}.end(t).Checksum
}
