package tests

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/hdet-dev/hdet/device"
	"github.com/hdet-dev/hdet/internal/testenv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGPU is the GPU end-to-end check: NVML discovery, this process's
// binding, a device buffer round trip through the CUDA driver, and the
// converge allreduce of device buffers under mpirun, staged through pinned
// memory and, with a CUDA-aware MPI, direct. The bench checks every sum on
// every rank and fails the run otherwise. It is the one test that skips in
// CI, which has no GPU; on a GPU node run
//
//	CGO_CFLAGS=-Wno-deprecated-declarations go test ./tests -run TestGPU -v
//
// or scripts/gpu-check.sh, which also records the bench figures.
func TestGPU(t *testing.T) {
	inv, err := device.Discover(device.SystemNVML())
	if device.CPUMode(err) {
		t.Skipf("needs an NVIDIA GPU and driver, and this machine has none (%v); CI has no GPU. "+
			"On a GPU node: CGO_CFLAGS=-Wno-deprecated-declarations go test ./tests -run TestGPU -v", err)
	}
	require.NoError(t, err)
	for _, g := range inv.GPUs {
		t.Logf("GPU %d: %s %s, %.1f GiB, %s, NUMA %d", g.Index, g.Name, g.UUID, float64(g.MemoryTotal)/(1<<30), g.PCIBusID, g.NUMANode)
	}
	t.Logf("driver %s, CUDA %s", inv.DriverVersion, inv.CUDAVersion)

	vis := device.VisibleFromEnv(os.LookupEnv)
	b, err := device.Bind(inv, vis, device.BindRequest{LocalSize: 1})
	require.NoError(t, err)
	t.Log(b)
	ctx, err := device.OpenCUDA(b)
	require.NoError(t, err)
	buf, err := device.NewDeviceBuffer(ctx, 1<<20)
	require.NoError(t, err)
	in := make([]float32, 1<<20)
	for i := range in {
		in[i] = float32(i) * 0.25
	}
	require.NoError(t, buf.Upload(in))
	out := make([]float32, len(in))
	require.NoError(t, buf.Download(out))
	assert.Equal(t, in, out, "device buffer round trip")
	require.NoError(t, buf.Free())
	require.NoError(t, ctx.Close())

	// One rank per visible GPU, at least two so the allreduce communicates;
	// a single GPU is then shared.
	ranks, args := visibleCount(t, inv, vis), []string{"--sizes", "1MiB,64MiB", "--iters", "3"}
	if ranks < 2 {
		ranks, args = 2, append(args, "--share-gpus")
	}
	stdout, stderr, err := runBench(t, ranks, append([]string{"--path", "staged"}, args...)...)
	require.NoError(t, err, "staged: stderr:\n%s", stderr)
	t.Logf("staged, %d ranks:\n%s%s", ranks, stderr, stdout)
	assert.Contains(t, stdout, "allreduce path staged")
	assert.Len(t, regexp.MustCompile(`(?m)^rank \d+ \(local \d+\): GPU`).FindAllString(stderr, -1), ranks, "every rank logs its binding")

	if !strings.Contains(stdout, "MPI CUDA-aware: true") {
		t.Log("this MPI is not CUDA-aware: the direct device path is not available here")
		return
	}
	stdout, stderr, err = runBench(t, ranks, append([]string{"--path", "device"}, args...)...)
	require.NoError(t, err, "device: stderr:\n%s", stderr)
	t.Logf("device (direct), %d ranks:\n%s", ranks, stdout)
	assert.Contains(t, stdout, "allreduce path device")
}

// TestGPUWorkerGroups is the worker path on GPUs: 4 ranks as 2 replicas of
// 2, each rank's script on cuda:LOCAL_RANK as torchrun scripts pick it, DDP
// inside each replica over NCCL where the node has a GPU a rank (gloo on
// shared GPUs otherwise: NCCL refuses two ranks on one GPU). It skips where
// no GPU is present, as TestGPU does.
func TestGPUWorkerGroups(t *testing.T) {
	inv, err := device.Discover(device.SystemNVML())
	if device.CPUMode(err) {
		t.Skipf("needs an NVIDIA GPU and driver, and this machine has none (%v); CI has no GPU", err)
	}
	require.NoError(t, err)
	testenv.NeedTorch(t)
	gpus := visibleCount(t, inv, device.VisibleFromEnv(os.LookupEnv))
	var flags []string
	if gpus < 4 {
		flags = []string{"--share-gpus"}
	}
	r := runWorkerFlags(t, 4, "train: {replica_size: 2}\n", flags, nil, testenv.Python, workerScript(t),
		"--steps", "24", "--window", "4", "--explore", "lr", "--ddp", "--cuda")
	t.Logf("%d GPU(s), flags %v:\n%s", gpus, flags, r.stdout)
	assertReplicaGroupsDDP(t, r)
	lines := regexp.MustCompile(`worker\.py: rank (\d) on cuda:(\d+), backend (\w+)`).FindAllStringSubmatch(r.stdout, -1)
	require.Len(t, lines, 4, "every rank's script says where it trains")
	for _, m := range lines {
		if gpus >= 4 {
			assert.Equal(t, m[1], m[2], "position %s trains on cuda:LOCAL_RANK, its own GPU", m[1])
			assert.Equal(t, "nccl", m[3])
		} else {
			assert.Equal(t, "0", m[2], "a rank sharing a GPU sees it alone, as cuda:0")
		}
	}
}

func visibleCount(t *testing.T, inv device.Inventory, vis device.Visible) int {
	t.Helper()
	for n := len(inv.GPUs); n > 1; n-- {
		if _, err := device.Bind(inv, vis, device.BindRequest{LocalRank: n - 1, LocalSize: n}); err == nil {
			return n
		}
	}
	return 1
}
