// Package slurm connects hdet to the Slurm workload manager: it reads the
// environment Slurm gives each task and checks it against MPI's view, writes
// sbatch scripts, and requeues jobs.
//
// It promises:
//   - Read works inside and outside Slurm: an unset variable is never an
//     error (task numbers read -1, the restart count 0, strings empty); one
//     that is not what Slurm writes is ErrBadEnv;
//   - Env.Check compares only when srun started the task as part of a step
//     (mpirun inside an allocation is recognised by its PMIx namespace), and
//     a disagreement names both values (ErrMismatch);
//   - Script validates every Job setting first and names the sbatch option at
//     fault (ErrOption); the script it writes can be requeued (its run
//     directory is keyed by the job id) and passes Slurm's warning signal
//     on to every task;
//   - Requeue gives up after RequeueTimeout rather than hang on slurmctld.
//
// It does not: submit jobs (the user runs sbatch), talk to Slurm beyond
// `scontrol requeue`, catch signals (`hdet run` does), read Slurm's
// configuration, or pick GPUs (package device reads Slurm's GPU variables
// itself).
package slurm

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

var (
	// ErrMismatch means Slurm and MPI disagree about this task's place in the
	// job (rank, size or local rank), for example an srun without --mpi=pmix
	// that started N independent one-rank MPI worlds.
	ErrMismatch = errors.New("slurm and MPI disagree")
	// ErrBadEnv means a SLURM_* variable holds something that is not what
	// Slurm writes there.
	ErrBadEnv = errors.New("malformed Slurm environment")
)

// Env is what Slurm told one task about the job, from its environment.
// Integer fields are -1 when the variable is unset.
type Env struct {
	JobID        string // SLURM_JOB_ID; empty outside Slurm
	StepID       string // SLURM_STEP_ID; empty in a batch script
	ProcID       int    // SLURM_PROCID: the task's rank in the step
	LocalID      int    // SLURM_LOCALID: the task's rank on its node
	NTasks       int    // SLURM_NTASKS
	NodeID       int    // SLURM_NODEID
	RestartCount int    // SLURM_RESTART_COUNT; 0 when never requeued
	// GPUs are the GPU indices of the step (SLURM_STEP_GPUS), or of the job
	// (SLURM_JOB_GPUS) in a batch script.
	GPUs []string
	// CUDAVisibleDevices is CUDA_VISIBLE_DEVICES split at commas; it may hold
	// UUIDs rather than indices.
	CUDAVisibleDevices []string
	// PMIxNamespace is PMIX_NAMESPACE. Slurm's PMIx plugin names it
	// "slurm.pmix.JOB.STEP"; mpirun uses its own names.
	PMIxNamespace string
}

// FromOS reads the Env of this process.
func FromOS() (Env, error) { return Read(os.LookupEnv) }

// InSlurm reports whether this process runs inside a Slurm job.
func InSlurm() bool {
	id, ok := os.LookupEnv("SLURM_JOB_ID")
	return ok && id != ""
}

// Read builds an Env from lookup (os.LookupEnv, or a map in tests). A
// variable that is set but not a number where Slurm writes numbers is an
// error wrapping ErrBadEnv.
func Read(lookup func(string) (string, bool)) (Env, error) {
	str := func(name string) string {
		v, _ := lookup(name)
		return strings.TrimSpace(v)
	}
	var errs []error
	num := func(name string, unset int) int {
		v := str(name)
		if v == "" {
			return unset
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			errs = append(errs, fmt.Errorf("%w: %s=%q is not a non-negative integer", ErrBadEnv, name, v))
			return unset
		}
		return n
	}
	e := Env{
		JobID:              str("SLURM_JOB_ID"),
		StepID:             str("SLURM_STEP_ID"),
		ProcID:             num("SLURM_PROCID", -1),
		LocalID:            num("SLURM_LOCALID", -1),
		NTasks:             num("SLURM_NTASKS", -1),
		NodeID:             num("SLURM_NODEID", -1),
		RestartCount:       num("SLURM_RESTART_COUNT", 0),
		GPUs:               list(str("SLURM_STEP_GPUS")),
		CUDAVisibleDevices: list(str("CUDA_VISIBLE_DEVICES")),
		PMIxNamespace:      str("PMIX_NAMESPACE"),
	}
	if e.GPUs == nil {
		e.GPUs = list(str("SLURM_JOB_GPUS"))
	}
	return e, errors.Join(errs...)
}

func list(v string) []string {
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// InSlurm reports whether e comes from a Slurm job.
func (e Env) InSlurm() bool { return e.JobID != "" }

// SrunTask reports whether srun started this process as a task of a step, so
// that SLURM_PROCID, SLURM_LOCALID and SLURM_NTASKS should describe the MPI
// world. Under mpirun inside an allocation the ranks inherit the SLURM_*
// variables of the batch script (or of mpirun's own daemons), which say
// nothing about MPI ranks; mpirun is recognised by its PMIx namespace, which
// is not Slurm's.
func (e Env) SrunTask() bool {
	byMpirun := e.PMIxNamespace != "" && !strings.HasPrefix(e.PMIxNamespace, "slurm.pmix.")
	return e.InSlurm() && e.StepID != "" && e.ProcID >= 0 && !byMpirun
}

// Check compares Slurm's view of this task with MPI's (rank and size of the
// world communicator, rank among the ranks on this node). Outside Slurm, or
// when mpirun rather than srun started the ranks, there is nothing to compare
// and it returns nil. A disagreement is an error wrapping ErrMismatch that
// names both values.
func (e Env) Check(rank, size, localRank int) error {
	if !e.SrunTask() {
		return nil
	}
	var errs []error
	cmp := func(what, slurmVar string, slurmVal, mpiVal int) {
		if slurmVal >= 0 && slurmVal != mpiVal {
			errs = append(errs, fmt.Errorf("%w: %s: %s=%d but MPI says %d", ErrMismatch, what, slurmVar, slurmVal, mpiVal))
		}
	}
	cmp("rank", "SLURM_PROCID", e.ProcID, rank)
	cmp("world size", "SLURM_NTASKS", e.NTasks, size)
	cmp("local rank", "SLURM_LOCALID", e.LocalID, localRank)
	if len(errs) > 0 {
		// The usual cause, named once for all the mismatches.
		errs = append(errs, errors.New("was the step launched with srun --mpi=pmix?"))
	}
	return errors.Join(errs...)
}

// Fields returns e as flat key/value pairs for a run header, ready for
// zerolog's Event.Fields. Unset values are left out; it is empty outside
// Slurm.
func (e Env) Fields() map[string]any {
	if !e.InSlurm() {
		return map[string]any{}
	}
	f := map[string]any{
		"slurm_job_id":        e.JobID,
		"slurm_restart_count": e.RestartCount,
		"slurm_srun_task":     e.SrunTask(),
	}
	put := func(k string, v int) {
		if v >= 0 {
			f[k] = v
		}
	}
	put("slurm_procid", e.ProcID)
	put("slurm_localid", e.LocalID)
	put("slurm_ntasks", e.NTasks)
	put("slurm_nodeid", e.NodeID)
	if e.StepID != "" {
		f["slurm_step_id"] = e.StepID
	}
	if e.GPUs != nil {
		f["slurm_gpus"] = strings.Join(e.GPUs, ",")
	}
	if e.CUDAVisibleDevices != nil {
		f["cuda_visible_devices"] = strings.Join(e.CUDAVisibleDevices, ",")
	}
	return f
}
