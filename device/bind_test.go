package device

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

func TestVisibleFromEnv(t *testing.T) {
	v := VisibleFromEnv(env(nil))
	assert.False(t, v.CUDASet)
	assert.Empty(t, v.Slurm)

	v = VisibleFromEnv(env(map[string]string{"CUDA_VISIBLE_DEVICES": " 0, 1,-1,3", "SLURM_STEP_GPUS": "4,5", "SLURM_JOB_GPUS": "4,5,6,7"}))
	assert.True(t, v.CUDASet)
	assert.Equal(t, []string{"0", "1"}, v.CUDA, "CUDA stops at the first negative id")
	assert.Equal(t, []string{"4", "5"}, v.Slurm, "the step's GPUs win over the job's")
	assert.Equal(t, "SLURM_STEP_GPUS", v.SlurmVar)

	v = VisibleFromEnv(env(map[string]string{"CUDA_VISIBLE_DEVICES": "", "SLURM_STEP_GPUS": "", "SLURM_JOB_GPUS": "2"}))
	assert.True(t, v.CUDASet)
	assert.Empty(t, v.CUDA)
	assert.Equal(t, "SLURM_JOB_GPUS", v.SlurmVar)

	v = VisibleFromEnv(env(map[string]string{"CUDA_VISIBLE_DEVICES": "NoDevFiles"}))
	assert.True(t, v.CUDASet)
	assert.Empty(t, v.CUDA)
}

func TestBind(t *testing.T) {
	inv := h200Inventory(t)
	u := func(i int) string { return inv.GPUs[i].UUID }
	cases := []struct {
		name        string
		env         map[string]string
		local, size int
		gpu, cuda   int
		source      string
	}{
		{"nothing set: all GPUs", nil, 3, 8, 3, 3, "all GPUs NVML reports"},
		{"CUDA indices", map[string]string{"CUDA_VISIBLE_DEVICES": "4,5,6,7"}, 1, 4, 5, 1, "CUDA_VISIBLE_DEVICES=4,5,6,7"},
		{"CUDA UUIDs, out of order", map[string]string{"CUDA_VISIBLE_DEVICES": u(6) + "," + u(2)}, 1, 2, 2, 1, "CUDA_VISIBLE_DEVICES"},
		{"CUDA UUID without GPU- and shortened", map[string]string{"CUDA_VISIBLE_DEVICES": u(7)[4:16]}, 0, 1, 7, 0, "CUDA_VISIBLE_DEVICES"},
		{"PCI bus id, kernel form", map[string]string{"CUDA_VISIBLE_DEVICES": "0000:05:00.0"}, 0, 1, 5, 0, "CUDA_VISIBLE_DEVICES"},
		{"Slurm global ids, CUDA relative", map[string]string{"SLURM_STEP_GPUS": "4,5", "CUDA_VISIBLE_DEVICES": "0,1"}, 1, 2, 5, 1, "CUDA_VISIBLE_DEVICES=0,1"},
		{"Slurm global ids, CUDA global", map[string]string{"SLURM_STEP_GPUS": "2,3", "CUDA_VISIBLE_DEVICES": "2,3"}, 0, 2, 2, 0, "CUDA_VISIBLE_DEVICES=2,3"},
		{"Slurm only: CUDA sees every GPU", map[string]string{"SLURM_JOB_GPUS": "6,7"}, 1, 2, 7, 7, "SLURM_JOB_GPUS=6,7"},
		{"Slurm gpus-per-task: one GPU per task", map[string]string{"SLURM_STEP_GPUS": "4,5,6,7", "CUDA_VISIBLE_DEVICES": "6"}, 2, 4, 6, 0, "CUDA_VISIBLE_DEVICES=6"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := Bind(inv, VisibleFromEnv(env(c.env)), BindRequest{Rank: 10 + c.local, LocalRank: c.local, LocalSize: c.size})
			require.NoError(t, err)
			assert.Equal(t, c.gpu, b.GPUIndex, "GPU")
			assert.Equal(t, u(c.gpu), b.UUID)
			assert.Equal(t, c.cuda, b.CUDAOrdinal, "CUDA ordinal")
			assert.Equal(t, c.gpu/4, b.NUMANode)
			assert.Equal(t, 10+c.local, b.Rank)
			assert.Equal(t, c.local, b.LocalRank)
			assert.False(t, b.Shared)
			assert.Contains(t, b.Source, c.source)
			assert.Contains(t, b.String(), u(c.gpu))
		})
	}
}

// Under Slurm with device cgroups NVML sees only the allocated GPUs, numbered
// from 0, while Slurm's ids stay global.
func TestBindCgroupConstrained(t *testing.T) {
	full := h200Inventory(t)
	inv := Inventory{GPUs: []GPU{full.GPUs[6], full.GPUs[7]}}
	inv.GPUs[0].Index, inv.GPUs[1].Index = 0, 1

	b, err := Bind(inv, VisibleFromEnv(env(map[string]string{"SLURM_STEP_GPUS": "6,7", "CUDA_VISIBLE_DEVICES": "0,1"})), BindRequest{LocalRank: 1, LocalSize: 2})
	require.NoError(t, err)
	assert.Equal(t, full.GPUs[7].UUID, b.UUID)
	assert.Equal(t, 1, b.CUDAOrdinal)

	b, err = Bind(inv, VisibleFromEnv(env(map[string]string{"SLURM_JOB_GPUS": "6,7"})), BindRequest{LocalRank: 0, LocalSize: 2})
	require.NoError(t, err)
	assert.Equal(t, full.GPUs[6].UUID, b.UUID)
	assert.Equal(t, 0, b.CUDAOrdinal)
}

func TestBindTooManyRanks(t *testing.T) {
	inv := h200Inventory(t)
	vis := VisibleFromEnv(env(map[string]string{"CUDA_VISIBLE_DEVICES": "0,1"}))

	for local := range 3 {
		_, err := Bind(inv, vis, BindRequest{LocalRank: local, LocalSize: 3})
		require.ErrorIs(t, err, ErrTooManyRanks, "every rank must refuse, not only the extra one")
		assert.Contains(t, err.Error(), "3 ranks on this node, 2 GPU(s) visible")
	}

	_, err := Bind(inv, VisibleFromEnv(env(nil)), BindRequest{LocalRank: 8, LocalSize: 9})
	require.ErrorIs(t, err, ErrTooManyRanks)

	b, err := Bind(inv, vis, BindRequest{LocalRank: 2, LocalSize: 3, AllowShare: true})
	require.NoError(t, err)
	assert.Equal(t, 0, b.GPUIndex, "sharing wraps around")
	assert.True(t, b.Shared)
	assert.Contains(t, b.String(), "shared")
}

func TestBindMIG(t *testing.T) {
	inv := h200Inventory(t)
	mig := "MIG-11111111-2222-3333-4444-555555555555"
	inv.GPUs[3].MIG = []MIGDevice{{Index: 0, UUID: mig}}

	b, err := Bind(inv, VisibleFromEnv(env(map[string]string{"CUDA_VISIBLE_DEVICES": mig})), BindRequest{LocalSize: 1})
	require.NoError(t, err)
	assert.Equal(t, 3, b.GPUIndex)
	assert.Equal(t, mig, b.MIG)
	assert.Equal(t, 0, b.CUDAOrdinal)

	legacy := "MIG-" + inv.GPUs[5].UUID + "/1/0"
	b, err = Bind(inv, VisibleFromEnv(env(map[string]string{"CUDA_VISIBLE_DEVICES": legacy})), BindRequest{LocalSize: 1})
	require.NoError(t, err)
	assert.Equal(t, 5, b.GPUIndex)
	assert.Equal(t, legacy, b.MIG)
}

// A torch world's ranks see each other's GPUs in LOCAL_RANK order (the
// torchrun convention: cuda:LOCAL_RANK is the rank's own), or only their own
// where listing them all would be wrong.
func TestGroupVisible(t *testing.T) {
	inv := h200Inventory(t)
	u := func(i ...int) string {
		var ids []string
		for _, k := range i {
			ids = append(ids, inv.GPUs[k].UUID)
		}
		return strings.Join(ids, ",")
	}
	cases := []struct {
		name        string
		env         map[string]string
		local, size int
		locals      []int
		want        string
	}{
		{"the whole node, one world", nil, 5, 8, []int{0, 1, 2, 3, 4, 5, 6, 7}, u(0, 1, 2, 3, 4, 5, 6, 7)},
		{"the second replica of 4", nil, 5, 8, []int{4, 5, 6, 7}, u(4, 5, 6, 7)},
		{"a replica placed cyclically", nil, 5, 8, []int{1, 3, 5, 7}, u(1, 3, 5, 7)},
		{"a replica of 2 under CUDA_VISIBLE_DEVICES", map[string]string{"CUDA_VISIBLE_DEVICES": "6,2,7,3"}, 2, 4, []int{2, 3}, u(7, 3)},
		{"Slurm, CUDA relative", map[string]string{"SLURM_STEP_GPUS": "4,5,6,7", "CUDA_VISIBLE_DEVICES": "0,1,2,3"}, 1, 4, []int{0, 1}, u(4, 5)},
		{"Slurm gpus-per-task: each task sees its own only", map[string]string{"SLURM_STEP_GPUS": "4,5,6,7", "CUDA_VISIBLE_DEVICES": "6"}, 2, 4, []int{2, 3}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := GroupVisible(inv, VisibleFromEnv(env(c.env)), BindRequest{LocalRank: c.local, LocalSize: c.size}, c.locals)
			require.NoError(t, err)
			assert.Equal(t, c.want, got)
			if got != "" {
				b, err := Bind(inv, VisibleFromEnv(env(c.env)), BindRequest{LocalRank: c.local, LocalSize: c.size})
				require.NoError(t, err)
				assert.Equal(t, b.UUID, strings.Split(got, ",")[slices.Index(c.locals, c.local)], "the rank's own GPU is at its index")
			}
		})
	}

	shared := VisibleFromEnv(env(map[string]string{"CUDA_VISIBLE_DEVICES": "0"}))
	got, err := GroupVisible(inv, shared, BindRequest{LocalRank: 1, LocalSize: 2, AllowShare: true}, []int{0, 1})
	require.NoError(t, err)
	assert.Empty(t, got, "ranks sharing a GPU keep their one GPU")

	mig := "MIG-11111111-2222-3333-4444-555555555555"
	inv.GPUs[3].MIG = []MIGDevice{{Index: 0, UUID: mig}}
	got, err = GroupVisible(inv, VisibleFromEnv(env(map[string]string{"CUDA_VISIBLE_DEVICES": mig})), BindRequest{LocalSize: 1}, []int{0})
	require.NoError(t, err)
	assert.Empty(t, got, "CUDA enumerates one MIG instance a process")

	_, err = GroupVisible(inv, VisibleFromEnv(env(map[string]string{"CUDA_VISIBLE_DEVICES": "0,1"})), BindRequest{LocalRank: 0, LocalSize: 3}, []int{0, 1, 2})
	require.ErrorIs(t, err, ErrTooManyRanks)
}

func TestBindErrors(t *testing.T) {
	inv := h200Inventory(t)
	cases := map[string]struct {
		cuda string
		want error
	}{
		"empty hides all":   {"", ErrNoVisibleGPU},
		"-1 hides all":      {"-1", ErrNoVisibleGPU},
		"unknown UUID":      {"GPU-deadbeef-0000-0000-0000-000000000000", ErrUnknownGPU},
		"index too large":   {"8", ErrUnknownGPU},
		"ambiguous prefix":  {"GPU-", ErrUnknownGPU},
		"unknown MIG":       {"MIG-00000000-0000-0000-0000-000000000000", ErrUnknownGPU},
		"unknown PCI bus":   {"0000:99:00.0", ErrUnknownGPU},
		"second id unknown": {"0,zzz", ErrUnknownGPU},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Bind(inv, VisibleFromEnv(env(map[string]string{"CUDA_VISIBLE_DEVICES": c.cuda})), BindRequest{LocalSize: 1})
			require.ErrorIs(t, err, c.want)
		})
	}

	_, err := Bind(inv, VisibleFromEnv(env(map[string]string{"SLURM_STEP_GPUS": "9"})), BindRequest{LocalSize: 1})
	require.ErrorIs(t, err, ErrUnknownGPU)
	assert.Contains(t, err.Error(), "SLURM_STEP_GPUS")

	_, err = Bind(inv, Visible{}, BindRequest{LocalRank: 2, LocalSize: 2})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "local rank 2 of 2")
}
