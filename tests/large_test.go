package tests

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLargeBuffers: a parameter buffer of 2 GiB + 4 MiB (past MPI's int
// count in bytes) goes through the converge allreduce on 2 ranks, exactly,
// and through a checkpoint written and read back. About 7 GiB of memory at
// the peak, so it is the one such test.
func TestLargeBuffers(t *testing.T) {
	probe := buildBinary(t, "./tests/largeprobe")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	out, err := mpirunCmd(ctx, t, 2, probe, "-dir", t.TempDir()).CombinedOutput()
	require.NoError(t, err, "%s", out)
	text := string(out)
	t.Log(strings.TrimSpace(text))
	for _, want := range []string{
		"rank 0: converge allreduce of 2151677952 bytes exact",
		"rank 1: converge allreduce of 2151677952 bytes exact",
		"rank 0: checkpoint of 215", // 2151677952 bytes of parameters plus the header
	} {
		assert.Contains(t, text, want)
	}
}
