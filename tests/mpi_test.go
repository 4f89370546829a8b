package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type probeResult struct {
	Rank, Size, LocalRank int
	Sizes                 []int
	F32, F64              []bool
	MaxMin                bool
	Bcast                 bool
	Allgather             bool
	BadRootErr            string
	SplitRank, SplitSize  int
	SplitSum              float64
}

// TestMPIBindingUnderMpirun runs the binding's checks on 4 real ranks.
func TestMPIBindingUnderMpirun(t *testing.T) {
	probe := buildBinary(t, "./tests/mpiprobe")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := mpirunCmd(ctx, t, 4, probe)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "stderr:\n%s", stderr.String())

	seen := map[int]bool{}
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		var r probeResult
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r), sc.Text())
		seen[r.Rank] = true
		assert.Equal(t, 4, r.Size)
		assert.Equal(t, r.Rank, r.LocalRank, "one node: local rank equals rank")
		assert.Equal(t, []int{1, 1000, 1000003, 16777216}, r.Sizes)
		assert.Equal(t, []bool{true, true, true, true}, r.F32, "float32 sums, rank %d", r.Rank)
		assert.Equal(t, []bool{true, true, true, true}, r.F64, "float64 sums, rank %d", r.Rank)
		assert.True(t, r.MaxMin, "max/min, rank %d", r.Rank)
		assert.True(t, r.Bcast, "1 MiB broadcast identical on rank %d", r.Rank)
		assert.True(t, r.Allgather, "allgather in rank order on rank %d", r.Rank)
		assert.Contains(t, r.BadRootErr, "MPI_Bcast", "a bad root is a Go error on rank %d", r.Rank)
		// Split by rank%2: {0, 2} and {1, 3}, each rank at rank/2 in its half.
		assert.Equal(t, []any{r.Rank / 2, 2, float64(2 + 2*(r.Rank%2))}, []any{r.SplitRank, r.SplitSize, r.SplitSum}, "split, rank %d", r.Rank)
	}
	assert.Equal(t, map[int]bool{0: true, 1: true, 2: true, 3: true}, seen)
}
