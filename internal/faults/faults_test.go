package faults

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/engine"
)

func TestParse(t *testing.T) {
	set, err := Parse("nan=2@3, nan_all=4,diverge=3@5")
	require.NoError(t, err)
	assert.Equal(t, Set{"nan": {Rank: 2, Window: 3}, "nan_all": {Rank: -1, Window: 4}, "diverge": {Rank: 3, Window: 5}}, set)
	for _, bad := range []string{"nan=2", "nan=x@1", "stop=1@-2", "nan_all=1@2", "explode=1@1"} {
		_, err := Parse(bad)
		assert.Error(t, err, bad)
	}
	_, err = Parse("explode=1@1")
	assert.ErrorContains(t, err, "want nan, nan_all, stop, diverge or blowup_all")
}

// Every in-process kind is written as its row says; no outside kind is.
func TestEveryInProcessKindParses(t *testing.T) {
	for _, k := range Kinds {
		spec := k.Name + "=1@2"
		if k.Self != nil && k.Self.EveryRank {
			spec = k.Name + "=2"
		}
		set, err := Parse(spec)
		if k.Where != InProcess {
			assert.ErrorContains(t, err, "unknown fault", spec)
			continue
		}
		require.NoError(t, err, spec)
		assert.Equal(t, 2, set[k.Name].Window, spec)
	}
}

// Each row is whole: a unique name, what it does, and the part its Where
// needs (how the rank injects it; the soak's schedule only for an outside
// kind).
func TestEveryKindIsWhole(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range Kinds {
		assert.False(t, seen[k.Name], "%s: one row", k.Name)
		seen[k.Name] = true
		assert.NotEmpty(t, k.How, k.Name)
		assert.Contains(t, []Where{InProcess, Outside}, k.Where, k.Name)
		assert.Equal(t, k.Where == InProcess, k.Self != nil, "%s: Self for an in-process kind only", k.Name)
		if k.Soak != nil {
			assert.Equal(t, Outside, k.Where, "%s: the soak strikes from outside", k.Name)
			assert.Positive(t, k.Soak.Weight, k.Name)
			assert.Positive(t, k.Soak.N, k.Name)
		}
		got, ok := Lookup(k.Name)
		assert.True(t, ok && got.How == k.How, k.Name)
	}
}

// unit trains windows of 10 steps with a loss of 1.
type unit struct{ engine.Replica }

func (unit) TrainWindow(context.Context, engine.Window) (engine.WindowResult, error) {
	return engine.WindowResult{Losses: []float64{1, 1}}, nil
}

func losses(t *testing.T, spec string, rank int, starts ...int) []float64 {
	t.Setenv(Env, spec)
	r, err := FromEnv(unit{}, rank, 10)
	require.NoError(t, err)
	var out []float64
	for _, s := range starts {
		res, err := r.TrainWindow(context.Background(), engine.Window{Start: s, Steps: 10})
		require.NoError(t, err)
		out = append(out, res.Losses[0])
	}
	return out
}

func TestFaultsHitTheirRankAndWindow(t *testing.T) {
	assert.Equal(t, []float64{1, 1}, losses(t, "", 0, 0, 10), "no faults: the replica itself")
	got := losses(t, "nan=1@1", 1, 0, 10, 20)
	assert.Equal(t, 1.0, got[0])
	assert.True(t, math.IsNaN(got[1]) && math.IsNaN(got[2]), "from window 1 on: %v", got)
	assert.Equal(t, []float64{1, 1}, losses(t, "nan=1@1", 2, 0, 10), "another rank")
	got = losses(t, "nan_all=1", 3, 0, 10, 0, 10) // window 1 re-run after a rollback
	assert.True(t, math.IsNaN(got[1]))
	assert.Equal(t, []float64{1, 1, 1}, []float64{got[0], got[2], got[3]})
	assert.Equal(t, []float64{1, 1000, 1000}, losses(t, "diverge=0@1", 0, 0, 10, 20))
	assert.Equal(t, []float64{1, 100, 1}, losses(t, "blowup_all=1", 2, 0, 10, 10))
	got = losses(t, "nan=0@1,diverge=0@1,blowup_all=1", 0, 10)
	assert.True(t, math.IsNaN(got[0]), "the first row's scale wins: %v", got)
	assert.Equal(t, []float64{1000}, losses(t, "diverge=0@1,blowup_all=1", 0, 10))
}
