package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hdet-dev/hdet/device"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDevicesCommand runs the real `hdet devices` against this machine's
// NVML: without a driver (CI) it must print one clean line and exit 0.
func TestDevicesCommand(t *testing.T) {
	hdet := buildBinary(t, "./cmd/hdet")
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(hdet, "devices")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "stderr:\n%s", stderr.String())
	assert.Empty(t, stderr.String())

	inv, err := device.Discover(device.SystemNVML())
	if err != nil {
		require.True(t, device.CPUMode(err), "%v", err)
		assert.Equal(t, "no NVIDIA driver found: CPU mode\n", stdout.String())
		return
	}
	for _, g := range inv.GPUs {
		assert.Contains(t, stdout.String(), g.UUID)
	}
}

type benchRow struct {
	Bytes      int     `json:"bytes"`
	Ranks      int     `json:"ranks"`
	Path       string  `json:"path"`
	Iterations int     `json:"iterations"`
	MedianUS   float64 `json:"median_us"`
	AlgBW      float64 `json:"algbw_gbps"`
	BusBW      float64 `json:"busbw_gbps"`
}

// runBench runs `mpirun -np n hdet bench allreduce args...`.
func runBench(t *testing.T, n int, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	hdet := buildBinary(t, "./cmd/hdet")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := mpirunCmd(ctx, t, n, append([]string{hdet, "bench", "allreduce"}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.String(), errb.String(), err
}

// The host path on 4 real ranks: every size's sum is checked by the bench
// itself (a wrong sum fails the run), and the figures follow nccl-tests.
func TestBenchAllreduceHost(t *testing.T) {
	out, errOut, err := runBench(t, 4, "--path", "host", "--sizes", "64KiB,1MiB", "--iters", "3", "--warmup", "1", "--json")
	require.NoError(t, err, "stderr:\n%s", errOut)
	var rows []benchRow
	require.NoError(t, json.Unmarshal([]byte(out), &rows), "only rank 0 prints, once:\n%s", out)
	require.Len(t, rows, 2)
	for i, want := range []int{64 << 10, 1 << 20} {
		r := rows[i]
		assert.Equal(t, want, r.Bytes)
		assert.Equal(t, 4, r.Ranks)
		assert.Equal(t, "host", r.Path)
		assert.Equal(t, 3, r.Iterations)
		require.Positive(t, r.MedianUS)
		assert.InEpsilon(t, float64(want)/(r.MedianUS*1e-6)/1e9, r.AlgBW, 1e-9, "algbw = bytes/time")
		assert.InEpsilon(t, r.AlgBW*2*3/4, r.BusBW, 1e-9, "busbw = algbw * 2(N-1)/N")
	}

	out, errOut, err = runBench(t, 4, "--sizes", "1MiB", "--iters", "2")
	require.NoError(t, err, "stderr:\n%s", errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 4, out) // two comment lines, header, one size
	assert.Contains(t, lines[0], "4 ranks")
	assert.Contains(t, lines[0], "allreduce path host")
	assert.Contains(t, lines[3], "1 MiB")
}

// --replica-size times the converge of replica groups: the allreduce over
// the ranks of one position in every replica (its sums are checked too).
func TestBenchAllreduceReplicaGroups(t *testing.T) {
	out, errOut, err := runBench(t, 4, "--path", "host", "--sizes", "64KiB", "--iters", "2", "--replica-size", "2", "--json")
	require.NoError(t, err, "stderr:\n%s", errOut)
	var rows []benchRow
	require.NoError(t, json.Unmarshal([]byte(out), &rows), out)
	require.Len(t, rows, 1)
	assert.Equal(t, 2, rows[0].Ranks, "two replicas: the allreduce spans 2 ranks")
	assert.InEpsilon(t, rows[0].AlgBW, rows[0].BusBW, 1e-9, "busbw = algbw * 2(N-1)/N with N = 2")

	_, errOut, err = runBench(t, 4, "--sizes", "64KiB", "--replica-size", "3")
	require.Error(t, err)
	assert.Equal(t, 2, exitCode(err))
	assert.Contains(t, errOut, "--replica-size 3 does not divide the 4 ranks (W=4, G=3)")
}

// On a machine without GPUs a device path is a clear failure, not a hang.
func TestBenchAllreduceDevicePathNeedsGPU(t *testing.T) {
	if _, err := device.Discover(device.SystemNVML()); err == nil {
		t.Skip("this machine has a GPU: TestGPU covers the device paths")
	}
	_, errOut, err := runBench(t, 2, "--path", "staged", "--sizes", "1MiB")
	require.Error(t, err)
	assert.Contains(t, errOut, "--path staged: no NVIDIA driver found")
}
