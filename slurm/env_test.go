package slurm

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func lookup(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// What srun --mpi=pmix -n 4 --gpus-per-node=8 gave task 2 on the test cluster.
var srunTask2 = map[string]string{
	"SLURM_JOB_ID": "42", "SLURM_STEP_ID": "0", "SLURM_PROCID": "2", "SLURM_LOCALID": "2",
	"SLURM_NTASKS": "4", "SLURM_NODEID": "0", "SLURM_STEP_GPUS": "0,1,2,3,4,5,6,7",
	"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7", "PMIX_NAMESPACE": "slurm.pmix.42.0",
}

func TestReadSrunTask(t *testing.T) {
	e, err := Read(lookup(srunTask2))
	require.NoError(t, err)
	assert.Equal(t, Env{
		JobID: "42", StepID: "0", ProcID: 2, LocalID: 2, NTasks: 4, NodeID: 0, RestartCount: 0,
		GPUs:               []string{"0", "1", "2", "3", "4", "5", "6", "7"},
		CUDAVisibleDevices: []string{"0", "1", "2", "3", "4", "5", "6", "7"},
		PMIxNamespace:      "slurm.pmix.42.0",
	}, e)
	assert.True(t, e.InSlurm())
	assert.True(t, e.SrunTask())
}

func TestReadOutsideSlurm(t *testing.T) {
	e, err := Read(lookup(nil))
	require.NoError(t, err)
	assert.False(t, e.InSlurm())
	assert.False(t, e.SrunTask())
	assert.Equal(t, -1, e.ProcID)
	assert.Equal(t, -1, e.NTasks)
	assert.Nil(t, e.GPUs)
	assert.Empty(t, e.Fields())
	assert.NoError(t, e.Check(3, 8, 1), "nothing to compare outside Slurm")
}

func TestReadBatchScriptUsesJobGPUsAndRestartCount(t *testing.T) {
	// A batch script (or mpirun's ranks inside one) has no step and sees the
	// job's GPUs.
	e, err := Read(lookup(map[string]string{
		"SLURM_JOB_ID": "7", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NTASKS": "4",
		"SLURM_JOB_GPUS": "0,1", "SLURM_RESTART_COUNT": "3",
	}))
	require.NoError(t, err)
	assert.Equal(t, []string{"0", "1"}, e.GPUs)
	assert.Equal(t, 3, e.RestartCount)
	assert.False(t, e.SrunTask())
}

func TestReadMalformed(t *testing.T) {
	_, err := Read(lookup(map[string]string{"SLURM_JOB_ID": "1", "SLURM_PROCID": "two", "SLURM_NTASKS": "-4"}))
	require.ErrorIs(t, err, ErrBadEnv)
	assert.Contains(t, err.Error(), `SLURM_PROCID="two"`)
	assert.Contains(t, err.Error(), `SLURM_NTASKS="-4"`)
}

func TestCheckAgrees(t *testing.T) {
	e, err := Read(lookup(srunTask2))
	require.NoError(t, err)
	assert.NoError(t, e.Check(2, 4, 2))
}

func TestCheckMismatchNamesBothValues(t *testing.T) {
	e, err := Read(lookup(srunTask2))
	require.NoError(t, err)
	// srun without PMIx: every task is rank 0 of a world of one.
	err = e.Check(0, 1, 0)
	require.ErrorIs(t, err, ErrMismatch)
	msg := err.Error()
	assert.Contains(t, msg, "SLURM_PROCID=2 but MPI says 0")
	assert.Contains(t, msg, "SLURM_NTASKS=4 but MPI says 1")
	assert.Contains(t, msg, "SLURM_LOCALID=2 but MPI says 0")
	assert.Contains(t, msg, "--mpi=pmix")

	err = e.Check(2, 4, 1)
	require.ErrorIs(t, err, ErrMismatch)
	assert.Contains(t, err.Error(), "local rank: SLURM_LOCALID=2 but MPI says 1")
	assert.NotContains(t, err.Error(), "SLURM_PROCID")
}

func TestCheckSkipsMpirunRanks(t *testing.T) {
	// Ranks that mpirun started inside an allocation inherit SLURM_PROCID=0
	// from the batch script (seen on the test cluster); they are not Slurm
	// tasks and must not be compared.
	m := map[string]string{
		"SLURM_JOB_ID": "9", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NTASKS": "4",
		"PMIX_NAMESPACE": "942735361",
	}
	e, err := Read(lookup(m))
	require.NoError(t, err)
	assert.NoError(t, e.Check(3, 4, 3))
	// Multi-node mpirun: its daemons are srun tasks, the ranks are not.
	m["SLURM_STEP_ID"] = "0"
	e, err = Read(lookup(m))
	require.NoError(t, err)
	assert.False(t, e.SrunTask())
	assert.NoError(t, e.Check(3, 4, 3))
}

func TestFieldsLogWithZerolog(t *testing.T) {
	e, err := Read(lookup(srunTask2))
	require.NoError(t, err)
	var buf bytes.Buffer
	log := zerolog.New(&buf)
	log.Info().Fields(e.Fields()).Msg("run header")
	var got map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &got))
	assert.Equal(t, "42", got["slurm_job_id"])
	assert.Equal(t, "0", got["slurm_step_id"])
	assert.EqualValues(t, 2, got["slurm_procid"])
	assert.EqualValues(t, 4, got["slurm_ntasks"])
	assert.EqualValues(t, 0, got["slurm_restart_count"])
	assert.Equal(t, true, got["slurm_srun_task"])
	assert.Equal(t, "0,1,2,3,4,5,6,7", got["slurm_gpus"])
	assert.Equal(t, "0,1,2,3,4,5,6,7", got["cuda_visible_devices"])
}
