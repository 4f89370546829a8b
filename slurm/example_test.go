package slurm_test

import (
	"fmt"

	"github.com/hdet-dev/hdet/slurm"
)

// Task 5 of 8 as srun --mpi=pmix starts it, checked against MPI's view: an
// MPI that agrees, then one that sees a world of its own (srun without
// --mpi=pmix starts N one-rank worlds).
func Example() {
	env := map[string]string{
		"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_PROCID": "5", "SLURM_LOCALID": "1",
		"SLURM_NTASKS": "8", "SLURM_NODEID": "2", "PMIX_NAMESPACE": "slurm.pmix.4242.0",
	}
	e, err := slurm.Read(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("job %s, task %d of %d, srun task: %v\n", e.JobID, e.ProcID, e.NTasks, e.SrunTask())
	fmt.Println(e.Check(5, 8, 1))
	fmt.Println(e.Check(0, 1, 0))
	// Output:
	// job 4242, task 5 of 8, srun task: true
	// <nil>
	// slurm and MPI disagree: rank: SLURM_PROCID=5 but MPI says 0
	// slurm and MPI disagree: world size: SLURM_NTASKS=8 but MPI says 1
	// slurm and MPI disagree: local rank: SLURM_LOCALID=1 but MPI says 0
	// was the step launched with srun --mpi=pmix?
}

// Slurm's time formats, as --time takes them.
func ExampleParseTime() {
	for _, s := range []string{"90", "1-12:00:00", "UNLIMITED"} {
		d, err := slurm.ParseTime(s)
		fmt.Println(s, d, err)
	}
	// Output:
	// 90 1h30m0s <nil>
	// 1-12:00:00 36h0m0s <nil>
	// UNLIMITED 0s <nil>
}
