package bridge

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/config"
)

func scriptHello() Hello {
	return Hello{
		TotalSteps: 300,
		Explore:    []map[string]any{{"name": "lr"}},
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
	assert.ErrorContains(t, err, "train.steps is 200, but the script's hdet.attach has total_steps 300")
	_, err = RunSteps(0, Hello{})
	assert.ErrorIs(t, err, ErrSetting)
	assert.ErrorContains(t, err, "total_steps 0; it must be the positive number of optimizer steps")
}

func TestExplorersFromTheScript(t *testing.T) {
	ex, notes, err := Explorers(nil, scriptHello())
	require.NoError(t, err)
	assert.Empty(t, notes)
	require.Len(t, ex, 1)
	assert.Equal(t, "hdet-explorer-lr", ex[0].Plugin)
	assert.Equal(t, 1.0, ex[0].Config["schedule"], "a multiplier of the script's own rate")
	assert.Equal(t, map[string]any{"lower": multiplierLower, "upper": multiplierUpper}, ex[0].Config["bounds"])

	// A group's rate has the lr explorer too; an explore entry's bounds stay.
	h := Hello{TotalSteps: 10, Explore: []map[string]any{{"name": "lr/head", "upper": 8.0}, {"name": "weight_decay/body", "base": 0.1}}}
	ex, _, err = Explorers(nil, h)
	require.NoError(t, err)
	assert.Equal(t, "hdet-explorer-lr", ex[0].Plugin)
	assert.Equal(t, map[string]any{"lower": multiplierLower, "upper": 8.0}, ex[0].Config["bounds"])
	assert.Equal(t, "hdet-explorer-weight-decay", ex[1].Plugin)
}

// hdet's window gives the search pass (a quarter of the run) 8 windows, at
// most 50 steps each.
func TestDefaultWindow(t *testing.T) {
	for steps, want := range map[int]int{4: 1, 100: 3, 300: 9, 1000: 31, 1600: 50, 100000: 50} {
		assert.Equal(t, want, DefaultWindow(steps), "%d steps", steps)
	}
}

func TestExplorersMergeWithTheConfig(t *testing.T) {
	spread := map[string]any{"alpha": 0.3}
	cfg := []config.Explorer{
		{Name: "lr", Plugin: "hdet-explorer-lr", Config: map[string]any{"spread": spread, "schedule": 1.0}},
		{Name: "dropout", Plugin: "hdet-explorer-dropout", Config: map[string]any{"schedule": 0.1}},
	}
	ex, notes, err := Explorers(cfg, scriptHello())
	require.NoError(t, err)
	assert.Empty(t, notes, "the same base is no conflict")
	require.Len(t, ex, 2)
	assert.Equal(t, spread, ex[0].Config["spread"], "the config adds its settings")
	assert.Equal(t, multiplierUpper, ex[0].Config["bounds"].(map[string]any)["upper"], "the script's block fills the rest")
	assert.Equal(t, "dropout", ex[1].Name, "the config adds explorers")

	cfg[0].Config["schedule"] = 2.0
	_, _, err = Explorers(cfg, scriptHello())
	assert.ErrorIs(t, err, ErrConflict)
	assert.ErrorContains(t, err, "explorers[0] (lr) schedule disagrees with the script's (schedule: 2 in the config, 1 in the script)")

	cfg[0].Override = true
	ex, notes, err = Explorers(cfg, scriptHello())
	require.NoError(t, err)
	assert.Equal(t, 2.0, ex[0].Config["schedule"])
	require.Len(t, notes, 1)
	assert.Contains(t, notes[0], "overrides the script's hdet.attach settings (override: true): schedule: 2 in the config, 1 in the script")
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

// A rank whose script differs names its own value, then rank 0's.
func TestDescribeDiff(t *testing.T) {
	root := agreement{TotalSteps: 40, Optimizer: "AdamW", SyncMode: SyncLocal}
	mine := agreement{TotalSteps: 50, Optimizer: "SGD", SyncMode: SyncLocal}
	assert.Equal(t, `total_steps 50 (rank 0: 40); optimizer "SGD" (rank 0: "AdamW")`, describeDiff(root, mine))
	assert.Empty(t, describeDiff(root, root))
}
