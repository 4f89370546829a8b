package cli

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseSizes(t *testing.T) {
	got, err := parseSizes("4096, 256KiB,1MiB,1M,2g,1GiB,8b")
	require.NoError(t, err)
	assert.Equal(t, []int{4096, 256 << 10, 1 << 20, 1 << 20, 2 << 30, 1 << 30, 8}, got)

	for _, bad := range []string{"", "0", "-1MiB", "1.5MiB", "MiB", "3", "1TiB", "9GiB", "1MiB,,2MiB", "1 XB"} {
		_, err := parseSizes(bad)
		assert.ErrorIs(t, err, errSize, "%q", bad)
	}
}

func TestFormatBytes(t *testing.T) {
	assert.Equal(t, "1 MiB", formatBytes(1<<20))
	assert.Equal(t, "1 GiB", formatBytes(1<<30))
	assert.Equal(t, "1536 KiB", formatBytes(1536<<10))
	assert.Equal(t, "1000 B", formatBytes(1000))
}

func TestBusBandwidthAndMedian(t *testing.T) {
	// nccl-tests: busbw = algbw * 2(n-1)/n.
	assert.InDelta(t, 15.0, busBandwidth(10, 4), 1e-12)
	assert.InDelta(t, 17.5, busBandwidth(10, 8), 1e-12)
	assert.Zero(t, busBandwidth(10, 1), "one rank moves nothing")
}

// Bad input is refused before MPI starts, with exit code 2 and the flag named.
func TestBenchUsageErrors(t *testing.T) {
	cases := map[string][]string{
		"no benchmark":    {},
		"unknown":         {"broadcast"},
		"bad path":        {"allreduce", "--path", "nccl"},
		"bad size":        {"allreduce", "--sizes", "1MB5"},
		"zero iterations": {"allreduce", "--iters", "0"},
		"negative warmup": {"allreduce", "--warmup", "-1"},
		"extra argument":  {"allreduce", "now"},
	}
	want := map[string]string{
		"no benchmark": "allreduce", "unknown": "allreduce", "bad path": "--path",
		"bad size": "--sizes", "zero iterations": "--iters", "negative warmup": "--warmup", "extra argument": "no arguments",
	}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			var out, errb bytes.Buffer
			s := Streams{Out: &out, Err: &errb}
			assert.Equal(t, ExitUsage, exitCode(s, "bench", runBench(s, args)))
			assert.Contains(t, errb.String(), want[name])
			assert.Empty(t, out.String())
		})
	}
}
