package bridge

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/hparam/builtin"
	"github.com/hdet-dev/hdet/internal/config"
)

func TestRunWindow(t *testing.T) {
	h := scriptHello()
	for _, tc := range []struct {
		configured, script, want int
	}{
		{0, 0, DefaultWindow(300)}, {40, 0, 40}, {0, 25, 25}, {25, 25, 25},
	} {
		h.Window = tc.script
		got, err := RunWindow(tc.configured, 300, h)
		require.NoError(t, err)
		assert.Equal(t, tc.want, got, "train.window %d, the script's window %d", tc.configured, tc.script)
	}
	h.Window = 25
	_, err := RunWindow(50, 300, h)
	assert.ErrorIs(t, err, ErrConflict)
	assert.ErrorContains(t, err, "train.window is 50, but the script's hdet.attach has window 25")
	h.Window = 301
	_, err = RunWindow(0, 300, h)
	assert.ErrorIs(t, err, ErrSetting)
	assert.ErrorContains(t, err, "the script's window is 301, want an integer in [1, 300]")
}

// settingsHello is a HELLO that uses every documented argument, as the
// Python client sends it (JSON numbers are float64).
func settingsHello() Hello {
	h := scriptHello()
	h.Options = map[string]any{"alpha": 0.2, "spread": "geometric",
		"auto": map[string]any{"until": 0.5, "commit": "continue", "start": 10.0, "signal": "train"}}
	h.Explore = []map[string]any{
		{"name": "lr", "lower": 1e-4, "upper": 1.0},
		{"name": "weight_decay", "base": 1e-3, "alpha": 0.001, "spread": "additive", "lower": 0.0, "upper": 0.01},
		{"name": "dropout", "base": 0.1},
		{"name": "temperature", "plugin": "my-explorer"},
	}
	return h
}

// Each documented argument lands in its explorer's config block, and the
// built-in explorers accept the blocks.
func TestExplorersFromTheScriptsSettings(t *testing.T) {
	ex, _, err := Explorers(nil, settingsHello())
	require.NoError(t, err)
	require.Len(t, ex, 4)
	lr, wd, drop, temp := ex[0].Config, ex[1].Config, ex[2].Config, ex[3].Config
	assert.Equal(t, map[string]any{"alpha": 0.2, "kind": "geometric"}, lr["spread"], "alpha, spread")
	assert.Equal(t, map[string]any{"lower": 1e-4, "upper": 1.0}, lr["bounds"])
	assert.Equal(t, settingsHello().Options["auto"], lr["auto"], "auto is lr's auto block")
	assert.Equal(t, 1.0, lr["schedule"], "a multiplier of the script's rate")
	assert.Equal(t, map[string]any{"alpha": 0.001, "kind": "additive"}, wd["spread"], "the entry's settings win over alpha and spread")
	assert.Equal(t, map[string]any{"lower": 0.0, "upper": 0.01}, wd["bounds"])
	assert.Equal(t, 1e-3, wd["schedule"], "base: a constant schedule")
	assert.NotContains(t, wd, "auto", "auto is lr's only")
	assert.Equal(t, map[string]any{"alpha": 0.2, "kind": "geometric"}, drop["spread"])
	assert.Equal(t, "my-explorer", ex[3].Plugin)
	assert.NotContains(t, temp, "plugin")

	for i, kind := range []string{builtin.LR, builtin.WeightDecay, builtin.Dropout} {
		plan := builtinPlan(t, kind, ex[i])
		var want struct {
			Spread struct{ Alpha float64 } `json:"spread"`
			Bounds struct{ Lower, Upper float64 }
		}
		b, _ := json.Marshal(ex[i].Config)
		require.NoError(t, json.Unmarshal(b, &want))
		assert.Equal(t, want.Spread.Alpha, plan.Spread.Alpha, "%s: alpha", kind)
		assert.Equal(t, ex[i].Config["spread"].(map[string]any)["kind"], string(plan.Spread.Kind), "%s: spread kind", kind)
		if _, ok := ex[i].Config["bounds"]; ok {
			assert.Equal(t, hparam.Bounds{Lower: want.Bounds.Lower, Upper: want.Bounds.Upper}, plan.Bounds, "%s: bounds", kind)
		}
	}
	assert.InDelta(t, 1e-3, builtinPlan(t, builtin.WeightDecay, ex[1]).Base[0], 1e-15, "weight_decay's base")
}

// builtinPlan starts the built-in explorer of kind with e's block and
// plans window 0 of a 300-step run of 25-step windows on 2 ranks.
func builtinPlan(t *testing.T, kind string, e config.Explorer) hparam.WindowPlan {
	t.Helper()
	x, err := builtin.NewExplorer(kind)
	require.NoError(t, err)
	block, err := json.Marshal(e.Config)
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, x.Init(ctx, hparam.Setup{Name: e.Name, Config: block, Ranks: 2, TotalSteps: 300, WindowSteps: 25, Seed: 1}), "%s", block)
	p, err := x.Plan(ctx, hparam.WindowRequest{Window: 0, Start: 0, Steps: 25})
	require.NoError(t, err)
	return p
}

// A setting hdet cannot use is refused, naming the argument.
func TestExplorersRefuseScriptSettings(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(h *Hello)
		want string
	}{
		{"unknown option", func(h *Hello) { h.Options["gamma"] = 1.0 }, `the script sent the option "gamma"`},
		{"negative alpha", func(h *Hello) { h.Options["alpha"] = -0.1 }, "alpha must be a finite number >= 0, got -0.1"},
		{"string alpha", func(h *Hello) { h.Options["alpha"] = "big" }, `alpha must be a finite number >= 0, got "big"`},
		{"unknown spread", func(h *Hello) { h.Options["spread"] = "cubic" }, `spread must be one of multiplicative, additive or geometric, got "cubic"`},
		{"auto not a dict", func(h *Hello) { h.Options["auto"] = true }, "auto must be a dict of the lr explorer's auto settings, got true"},
		{"auto unknown key", func(h *Hello) { h.Options["auto"] = map[string]any{"patience": 3.0} }, `auto has the unknown key "patience"; allowed: enabled, form, start, until`},
		{"auto decay", func(h *Hello) { h.Options["auto"] = map[string]any{"decay": 0.5} }, `auto["decay"] is no longer a setting`},
		{"auto type", func(h *Hello) { h.Options["auto"] = map[string]any{"until": "soon"} }, `auto["until"] must be a JSON number, got "soon"`},
		{"auto integer", func(h *Hello) { h.Options["auto"] = map[string]any{"start": 2.5} }, `auto["start"] must be a JSON integer, got 2.5`},
		{"auto without lr", func(h *Hello) { h.Explore = h.Explore[1:3] }, "auto sets the lr explorer's auto block, but the script does not explore lr"},
		{"explore unknown key", func(h *Hello) { h.Explore[1]["scale"] = "log" }, `explore[1] ("weight_decay") has the unknown key "scale"; allowed: name, plugin, alpha, spread, base, lower, upper`},
		{"explore alpha", func(h *Hello) { h.Explore[1]["alpha"] = -1.0 }, `explore[1] ("weight_decay")["alpha"] must be a finite number >= 0, got -1`},
		{"explore spread", func(h *Hello) { h.Explore[1]["spread"] = 2.0 }, `explore[1] ("weight_decay")["spread"] must be one of multiplicative, additive or geometric, got 2`},
		{"explore bound", func(h *Hello) { h.Explore[0]["upper"] = "1" }, `explore[0] ("lr")["upper"] must be a finite number, got "1"`},
		{"lr base", func(h *Hello) { h.Explore[0]["base"] = 0.1 }, `explore[0] ("lr")["base"]: a learning rate's base is the script's own rate`},
		{"explore plugin", func(h *Hello) { h.Explore[3]["plugin"] = 1.0 }, `explore[3] ("temperature")["plugin"] must be an explorer binary name, got 1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := settingsHello()
			tc.edit(&h)
			_, _, err := Explorers(nil, h)
			assert.ErrorIs(t, err, ErrSetting)
			assert.ErrorContains(t, err, tc.want)
		})
	}
}

// The config adds to the script's settings; a value both set differently
// is an error unless the entry says override: true.
func TestExplorersSettingsPrecedence(t *testing.T) {
	cfg := []config.Explorer{{Name: "lr", Plugin: "hdet-explorer-lr", Config: map[string]any{
		"spread": map[string]any{"alpha": 0.2, "narrow_to": 0.9}, "auto": map[string]any{"beta": 0.5}}}}
	ex, notes, err := Explorers(cfg, settingsHello())
	require.NoError(t, err)
	assert.Empty(t, notes)
	assert.Equal(t, map[string]any{"alpha": 0.2, "kind": "geometric", "narrow_to": 0.9}, ex[0].Config["spread"], "key by key")
	assert.Equal(t, 0.5, ex[0].Config["auto"].(map[string]any)["beta"])
	assert.Equal(t, 0.5, ex[0].Config["auto"].(map[string]any)["until"])

	cfg[0].Config["spread"].(map[string]any)["alpha"] = 0.3
	cfg[0].Config["auto"] = map[string]any{"commit": "restart"}
	_, _, err = Explorers(cfg, settingsHello())
	assert.ErrorIs(t, err, ErrConflict)
	assert.ErrorContains(t, err, "explorers[0] (lr) settings disagree with the script's hdet.attach arguments (auto.commit: restart in the config, continue in the script; spread.alpha: 0.3 in the config, 0.2 in the script); remove it from the config")

	cfg[0].Override = true
	ex, notes, err = Explorers(cfg, settingsHello())
	require.NoError(t, err)
	assert.Equal(t, 0.3, ex[0].Config["spread"].(map[string]any)["alpha"])
	require.Len(t, notes, 1)
	assert.Contains(t, notes[0], "overrides the script's hdet.attach settings (override: true): auto.commit: restart in the config")

	// A base and the config's constant schedule compare by value.
	drop := []config.Explorer{{Name: "dropout", Plugin: "hdet-explorer-dropout", Config: map[string]any{"schedule": map[string]any{"value": 0.2}}}}
	_, _, err = Explorers(drop, settingsHello())
	assert.ErrorContains(t, err, "explorers[0] (dropout) schedule disagrees with the script's (value: 0.2 in the config, 0.1 in the script)")
	drop[0].Config["schedule"] = 0.1
	_, _, err = Explorers(drop, settingsHello())
	assert.NoError(t, err)
}

func TestSettingsHint(t *testing.T) {
	assert.Empty(t, SettingsHint(scriptHello()))
	assert.True(t, strings.HasPrefix(SettingsHint(settingsHello()), " (the script's hdet.attach arguments"))
}
