package slurm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// RequeueTimeout bounds scontrol requeue: a controller that does not answer
// must not keep a stopped run from exiting.
const RequeueTimeout = 60 * time.Second

// ErrRequeue means scontrol could not requeue the job.
var ErrRequeue = errors.New("slurm requeue failed")

// Requeue puts job jobID back in the queue with `scontrol requeue`. Slurm
// then ends the running instance (SIGTERM to every process, SIGKILL after
// KillWait) and starts the job again later under the same id, with
// SLURM_RESTART_COUNT one higher. The job must have been submitted with
// --requeue (hdet sbatch scripts are).
func Requeue(ctx context.Context, jobID string) error {
	if jobID == "" || strings.ContainsAny(jobID, " \t\n") {
		return fmt.Errorf("%w: job id %q", ErrRequeue, jobID)
	}
	ctx, cancel := context.WithTimeout(ctx, RequeueTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "scontrol", "requeue", jobID)
	cmd.WaitDelay = time.Second // scontrol's children must not hold the pipes open
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w: scontrol requeue %s: %w: %s", ErrRequeue, jobID, err, strings.TrimSpace(out.String()))
	}
	return nil
}
