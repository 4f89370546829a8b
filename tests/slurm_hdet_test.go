package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An sbatch job of 4 tasks running hdet gets SIGUSR1 through the batch
// script mid-run, checkpoints, is requeued by rank 0, resumes, and finishes
// with the same parameters as an uninterrupted run.
func TestSlurmHDETPreemptRequeueResumeIsBitExact(t *testing.T) {
	c := startSlurm(t)
	conf := cfg("local", lrDropout) + "\n"
	long := []string{"--set", "train.steps=" + longSteps}
	whole := runHDET(t, 4, conf, long...)
	require.NoError(t, whole.err, whole.stderr)

	hdet, plugins := hdetBinaries(t)
	dir := t.TempDir()
	config := filepath.Join(dir, "small.yaml")
	// The same run as `whole`: the data path and length written into the config.
	job := strings.NewReplacer("steps: 80,", "steps: "+longSteps+",",
		"batch_size: 32}", "batch_size: 32, data: "+mnistDir(t)+"}").Replace(conf)
	require.NoError(t, os.WriteFile(config, []byte(job), 0o644))
	script := sbatchScript(t, dir, "job.sbatch", config, "--ntasks-per-node", "4", "--time", "10:00",
		"--signal-lead", "60", "--partition", "debug", "--job-name", "hdet", "--hdet", hdet,
		"--run-root", filepath.Join(dir, "runs"))
	c.env = append(c.env, "HDET_PLUGIN_DIR="+plugins)
	id := strings.TrimSpace(c.run(t, dir, "sbatch", "--parsable", script))
	runDir := filepath.Join(dir, "runs", id)
	c.waitFor(t, "3 windows", func() bool { return windowsDone(runDir) >= 3 })

	c.run(t, "", "scancel", "--signal=USR1", "--batch", id)
	f := c.waitRequeued(t, id)
	log, _ := os.ReadFile(filepath.Join(dir, "hdet-"+id+".out"))
	require.Equal(t, "PENDING", f["JobState"], "rank 0 requeues the job:\n%s", log)
	assert.Equal(t, "1", f["Restarts"])
	stoppedAt := windowsDone(runDir)
	assert.Less(t, stoppedAt, longWindows, "stopped before the end")
	c.startNow(t, id)
	f = c.waitState(t, id, "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL")
	log, err := os.ReadFile(filepath.Join(dir, "hdet-"+id+".out"))
	require.NoError(t, err)
	require.Equal(t, "COMPLETED", f["JobState"], "job %v\n%s", f, log)

	text := string(log)
	assert.Contains(t, text, "stopped by a signal after checkpointing")
	assert.Contains(t, text, "job requeued")
	assert.Contains(t, text, "resuming from checkpoint")
	resumed := hdetRun{dir: runDir}
	assert.Equal(t, whole.end(t).Checksum, resumed.end(t).Checksum, "resumed after window %d", stoppedAt)
	assert.Equal(t, longWindows, windowsDone(runDir))
}
