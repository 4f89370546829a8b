package bridge

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/config"
)

func scriptHello() Hello {
	return Hello{
		Schedule: &Schedule{MaxLR: []float64{0.05, 0.005}, TotalSteps: 300, PctStart: 0.25, AnnealStrategy: "linear",
			CycleMomentum: true, BaseMomentum: []float64{0.8, 0.8}, MaxMomentum: []float64{0.9, 0.9},
			DivFactor: 10, FinalDivFactor: 100, ThreePhase: true},
		Explore: []map[string]any{{"name": "lr"}},
	}
}

func TestRunSteps(t *testing.T) {
	n, err := RunSteps(0, scriptHello())
	require.NoError(t, err)
	assert.Equal(t, 300, n, "the script's total_steps")
	n, err = RunSteps(300, scriptHello())
	require.NoError(t, err)
	assert.Equal(t, 300, n)
	_, err = RunSteps(200, scriptHello())
	assert.ErrorIs(t, err, ErrConflict)
	assert.ErrorContains(t, err, "train.steps is 200, but the script's OneCycleLR has total_steps 300")
	_, err = RunSteps(0, Hello{})
	assert.ErrorContains(t, err, "set train.steps")
}

func TestExplorersFromTheScript(t *testing.T) {
	ex, notes, err := Explorers(nil, scriptHello())
	require.NoError(t, err)
	assert.Empty(t, notes)
	require.Len(t, ex, 1)
	assert.Equal(t, "hdet-explorer-lr", ex[0].Plugin)
	assert.Equal(t, map[string]any{
		"kind": "onecycle", "max_lr": 0.05, "total_steps": 300, "pct_start": 0.25, "anneal_strategy": "linear",
		"div_factor": 10.0, "final_div_factor": 100.0, "three_phase": true, "cycle_momentum": true,
		"base_momentum": 0.8, "max_momentum": 0.9,
	}, ex[0].Config["schedule"])
}

func TestExplorersMergeWithTheConfig(t *testing.T) {
	spread := map[string]any{"alpha": 0.3}
	cfg := []config.Explorer{
		{Name: "lr", Plugin: "hdet-explorer-lr", Config: map[string]any{"spread": spread, "schedule": map[string]any{"max_lr": 0.05}}},
		{Name: "dropout", Plugin: "hdet-explorer-dropout", Config: map[string]any{"schedule": 0.1}},
	}
	ex, notes, err := Explorers(cfg, scriptHello())
	require.NoError(t, err)
	assert.Empty(t, notes, "the same max_lr is no conflict")
	require.Len(t, ex, 2)
	assert.Equal(t, spread, ex[0].Config["spread"], "the config adds its settings")
	assert.Equal(t, 300, ex[0].Config["schedule"].(map[string]any)["total_steps"], "the script's schedule fills the rest")
	assert.Equal(t, "dropout", ex[1].Name, "the config adds explorers")

	cfg[0].Config["schedule"] = map[string]any{"max_lr": 0.1}
	_, _, err = Explorers(cfg, scriptHello())
	assert.ErrorIs(t, err, ErrConflict)
	assert.ErrorContains(t, err, "explorers[0] (lr) schedule disagrees with the script's OneCycleLR (max_lr: 0.1 in the config, 0.05 in the script)")

	cfg[0].Override = true
	ex, notes, err = Explorers(cfg, scriptHello())
	require.NoError(t, err)
	assert.Equal(t, 0.1, ex[0].Config["schedule"].(map[string]any)["max_lr"])
	require.Len(t, notes, 1)
	assert.Contains(t, notes[0], "overrides the script's OneCycleLR (override: true): max_lr: 0.1 in the config, 0.05 in the script")
}

func TestExplorersNoneWarns(t *testing.T) {
	ex, notes, err := Explorers(nil, Hello{})
	require.NoError(t, err)
	assert.Empty(t, ex)
	require.Len(t, notes, 1)
	assert.Contains(t, notes[0], "every replica trains with the same values")

	_, _, err = Explorers(nil, Hello{Explore: []map[string]any{{"name": "temperature"}}})
	assert.ErrorIs(t, err, ErrConflict)
	assert.ErrorContains(t, err, `the script explores "temperature", which has no built-in explorer`)
}

func TestLineWriterPrefixesWholeLines(t *testing.T) {
	var out writes
	l := newLineWriter(&out, 3)
	_, _ = l.Write([]byte("hel"))
	_, _ = l.Write([]byte("lo\nwor"))
	_, _ = l.Write([]byte("ld\n\n"))
	_, _ = l.Write([]byte("tail"))
	l.flush()
	assert.Equal(t, writes{"[rank 3] hello\n", "[rank 3] world\n", "[rank 3] \n", "[rank 3] tail\n"}, out, "one Write per whole line")
}

type writes []string

func (w *writes) Write(p []byte) (int, error) { *w = append(*w, string(p)); return len(p), nil }
