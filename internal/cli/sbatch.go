package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hdet-dev/hdet/slurm"
)

func runSbatch(s Streams, args []string) error {
	fs := newFlagSet(s, "sbatch")
	fs.Usage = func() {
		fmt.Fprintln(s.Err, "usage: hdet sbatch CONFIG.yaml --time D-HH:MM:SS [flags] > job.sbatch\n       hdet sbatch [CONFIG.yaml] --time D-HH:MM:SS [flags] --worker -- python train.py ARGS... > job.sbatch\n\nflags:")
		fs.PrintDefaults()
	}
	j := slurm.Job{}
	fs.IntVar(&j.Nodes, "nodes", 1, "nodes to run on")
	fs.IntVar(&j.GPUsPerNode, "gpus-per-node", 0, "GPUs per node, one task each; 0 on CPU clusters")
	fs.IntVar(&j.NTasksPerNode, "ntasks-per-node", 0, "tasks per node on CPU clusters (with GPUs: one per GPU)")
	fs.IntVar(&j.CPUsPerTask, "cpus-per-task", 0, "CPUs per task (0: the cluster's default)")
	fs.IntVar(&j.ReplicaSize, "replica-size", 0, "ranks per replica (train.replica_size; 0: the config's); a replica fills a node")
	fs.StringVar(&j.Sync, "sync", "", "train.sync: gradients (fast links) or local (slow links; docs/sync-modes.md); empty: the config's")
	fs.StringVar(&j.Time, "time", "", "time limit, e.g. 24:00:00 or 2-00:00:00 (required)")
	fs.StringVar(&j.Partition, "partition", "", "partition (empty: the cluster's default)")
	fs.StringVar(&j.Account, "account", "", "account to charge (empty: your default)")
	fs.StringVar(&j.JobName, "job-name", "", "job name (default: hdet-CONFIG_NAME)")
	fs.StringVar(&j.Launcher, "launcher", slurm.LauncherSrun, "srun (srun --mpi=pmix) or mpirun (inside the allocation)")
	fs.IntVar(&j.SignalLead, "signal-lead", slurm.DefaultSignalLead, "seconds before the time limit to checkpoint and stop")
	fs.StringVar(&j.Hdet, "hdet", "", "hdet binary the job runs (default: this one)")
	fs.StringVar(&j.RunRoot, "run-root", "runs", "directory that holds one run directory per job id")

	flags, worker, err := splitWorker(args)
	if err != nil {
		return err
	}
	j.Worker = worker
	pos, err := parseInterspersed(fs, flags)
	if err != nil {
		return err
	}
	if len(pos) > 1 || len(pos) == 0 && len(j.Worker) == 0 {
		return Usagef("want one CONFIG.yaml (optional with --worker -- CMD), got %d arguments %q", len(pos), pos)
	}
	if j.Time == "" {
		return Usagef("--time is required (e.g. 24:00:00): hdet checkpoints before the limit")
	}
	if len(pos) == 1 {
		if j.Config, err = existingFile(pos[0]); err != nil {
			return err
		}
	}
	if j.JobName == "" {
		j.JobName = slurm.DefaultJobName(jobSource(j))
	}
	if j.Hdet == "" {
		if j.Hdet, err = os.Executable(); err != nil {
			return fmt.Errorf("locating this hdet binary (pass --hdet): %w", err)
		}
	} else if strings.ContainsRune(j.Hdet, filepath.Separator) {
		if j.Hdet, err = filepath.Abs(j.Hdet); err != nil {
			return Usagef("--hdet %q: %v", j.Hdet, err)
		}
	}
	if j.RunRoot, err = filepath.Abs(j.RunRoot); err != nil {
		return Usagef("--run-root %q: %v", j.RunRoot, err)
	}
	j.Command = "hdet sbatch " + strings.Join(args, " ")

	script, err := slurm.Script(j)
	if errors.Is(err, slurm.ErrOption) {
		return &UsageError{Err: err}
	}
	if err != nil {
		return err
	}
	_, err = fmt.Fprint(s.Out, script)
	return err
}

// splitWorker takes --worker -- CMD... off the arguments, as hdet run does:
// a PyTorch script's command.
func splitWorker(args []string) (flags, worker []string, err error) {
	i := slices.Index(args, "--worker")
	if i < 0 {
		return args, nil, nil
	}
	if i+2 >= len(args) || args[i+1] != "--" {
		return nil, nil, Usagef("--worker needs the worker's command after -- (hdet sbatch [CONFIG.yaml] --time ... --worker -- python train.py)")
	}
	return args[:i], args[i+2:], nil
}

// jobSource is what names the job: the config, else the worker's script
// (its .py argument, else its last word).
func jobSource(j slurm.Job) string {
	if j.Config != "" {
		return j.Config
	}
	name := j.Worker[len(j.Worker)-1]
	for _, a := range j.Worker {
		if strings.HasSuffix(a, ".py") {
			name = a
		}
	}
	return name
}

// existingFile returns path made absolute, or a usage error when it is not a
// readable regular file.
func existingFile(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", Usagef("CONFIG %q: %v", path, err)
	}
	st, err := os.Stat(abs)
	if err != nil {
		return "", Usagef("CONFIG %q: %v", path, err)
	}
	if !st.Mode().IsRegular() {
		return "", Usagef("CONFIG %q: not a regular file", path)
	}
	return abs, nil
}
