package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/signals"
)

// TestFaultsSlurmSetup: Slurm's warning (USR1 through the batch script)
// reaches the tasks while rank 0 starts its plugins; the run stops before
// training with exit 3 and rank 0 requeues the job. The names are short:
// Slurm's PMIx socket path under t.TempDir must stay within 107 bytes.
func TestFaultsSlurmSetup(t *testing.T) {
	fault(t, "slurm USR1 in setup", func(t *testing.T) {
		c := startSlurm(t)
		hdet, plugins := hdetBinaries(t)
		dir := t.TempDir()
		config := filepath.Join(dir, "small.yaml")
		require.NoError(t, os.WriteFile(config, []byte(lrDropout+"\ntrain: {steps: 100, window: 10, seed: 7, sync: local}\n"+
			"workload: {hidden: [32], batch_size: 32, data: "+mnistDir(t)+"}\nrun: {progress: none}\n"), 0o644))
		script := sbatchScript(t, dir, "job.sbatch", config, "--ntasks-per-node", "4", "--time", "10:00",
			"--signal-lead", "60", "--partition", "debug", "--job-name", "hdet", "--hdet", hdet,
			"--run-root", filepath.Join(dir, "runs"))
		c.env = append(c.env, "HDET_PLUGIN_DIR="+plugins, signals.PauseEnv+"=explorers")
		id := strings.TrimSpace(c.run(t, dir, "sbatch", "--parsable", script))
		t.Cleanup(func() { c.run(t, "", "scancel", id) })
		out := filepath.Join(dir, "hdet-"+id+".out")
		c.waitFor(t, "4 tasks paused at explorers", func() bool {
			b, _ := os.ReadFile(out)
			return strings.Count(string(b), "hdet: test pause at explorers") == 4
		})
		c.run(t, "", "scancel", "--signal=USR1", "--batch", id)
		f := c.waitRequeued(t, id)
		log, _ := os.ReadFile(out)
		require.Equal(t, "PENDING", f["JobState"], "rank 0 requeues the job:\n%s", log)
		assert.Contains(t, string(log), "a signal arrived during setup: stopping before training")
		assert.Contains(t, string(log), "job requeued")
		assert.NotContains(t, string(log), "starting HDET run")
		assert.Equal(t, 0, windowsDone(filepath.Join(dir, "runs", id)), "nothing trained")
	})
}
