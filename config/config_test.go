package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const sample = `
workload:
  batch_size: 32
train:
  steps: 200
  window: 20
explorers:
  - name: lr
    plugin: hdet-explorer-lr
    config:
      spread: {kind: multiplicative, alpha: 0.1}
  - name: dropout
    plugin: hdet-explorer-dropout
`

func TestLoadAppliesDefaultsAndFile(t *testing.T) {
	c, err := Load([]byte(sample), nil)
	require.NoError(t, err)
	assert.Equal(t, 32, c.Workload.BatchSize)
	assert.Equal(t, "adamw", c.Workload.Optimizer, "default kept")
	assert.Equal(t, 20, c.Train.Window)
	require.Len(t, c.Explorers, 2)
	assert.Equal(t, Duration(DefaultExplorerTimeout), c.Explorers[1].Timeout)
	assert.Equal(t, map[string]any{"kind": "multiplicative", "alpha": 0.1}, c.Explorers[0].Config["spread"])
}

func TestSetOverrides(t *testing.T) {
	c, err := Load([]byte(sample), []string{"train.window=50", "explorers.lr.config.spread.alpha=0.2", "explorers[1].timeout=5s", "run.dir=/tmp/x"})
	require.NoError(t, err)
	assert.Equal(t, 50, c.Train.Window)
	assert.Equal(t, 0.2, c.Explorers[0].Config["spread"].(map[string]any)["alpha"])
	assert.Equal(t, "5s", fmtDuration(c.Explorers[1].Timeout))
	assert.Equal(t, "/tmp/x", c.Run.Dir)
}

func fmtDuration(d Duration) string { v, _ := d.MarshalYAML(); return v.(string) }

func TestErrorsNameTheField(t *testing.T) {
	cases := map[string]struct {
		yaml string
		sets []string
		want string
	}{
		"unknown top key":    {yaml: "trian: {}", want: "trian: unknown key (allowed here: explorers, run, train, workload)"},
		"unknown nested key": {yaml: sample + "run: {dri: x}", want: "run.dri: unknown key"},
		"unknown in list":    {yaml: "train: {steps: 10, window: 5}\nexplorers: [{name: lr, plugin: p, tiemout: 1s}]", want: "explorers[0].tiemout: unknown key"},
		"wrong type":         {yaml: "train: {steps: ten}", want: "train.steps: want an integer, got \"ten\""},
		"list for scalar":    {yaml: "train: {steps: [1]}", want: "train.steps: want an integer, got a list"},
		"bad duration":       {yaml: "train: {steps: 10, window: 5}\nexplorers: [{name: lr, plugin: p, timeout: soon}]", want: "explorers[0].timeout: want a duration"},
		"zero window":        {yaml: "train: {steps: 10, window: 0}", want: "train.window: got 0, want an integer >= 1"},
		"window > steps":     {yaml: "train: {steps: 10, window: 20}", want: "train.window: got 20, want at most train.steps (10)"},
		"no length":          {yaml: "train: {window: 5}", want: "train.steps"},
		"bad sync":           {yaml: "train: {steps: 10, window: 5, sync: ring}", want: "train.sync: got ring, want local or gradients"},
		"probe examples 0":   {yaml: "train: {steps: 10, window: 5, probe_examples: 0}", want: "train.probe_examples: got 0, want an integer in [1, 60000]"},
		"dropout range":      {yaml: "train: {steps: 10, window: 5}\nworkload: {dropout: 1.5}", want: "workload.dropout: got 1.5, want a number in [0, 1)"},
		"duplicate explorer": {yaml: "train: {steps: 10, window: 5}\nexplorers: [{name: lr, plugin: p}, {name: lr, plugin: p}]", want: "explorers[1].name: \"lr\" is explored twice"},
		"bad checksum":       {yaml: "train: {steps: 10, window: 5}\nexplorers: [{name: lr, plugin: p, sha256: xyz}]", want: "explorers[0].sha256"},
		"malformed yaml":     {yaml: "train: [", want: "YAML"},
		"bad set":            {yaml: sample, sets: []string{"train.window"}, want: "want key=value"},
		"set missing entry":  {yaml: sample, sets: []string{"explorers.wd.plugin=x"}, want: `no list entry named "wd"`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Load([]byte(tc.yaml), tc.sets)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalid)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestResolvedYAMLRoundTrips(t *testing.T) {
	c, err := Load([]byte(sample), nil)
	require.NoError(t, err)
	b, err := c.YAML()
	require.NoError(t, err)
	c2, err := Load(b, nil)
	require.NoError(t, err, string(b))
	assert.Equal(t, c, c2)
	h1, _ := c.Hash()
	h2, _ := c2.Hash()
	assert.Equal(t, h1, h2)
}

func FuzzLoad(f *testing.F) {
	f.Add([]byte(sample))
	f.Add([]byte("train: {steps: 1, window: 1}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Load(data, nil)
		if err == nil {
			assert.NoError(t, c.Validate())
		}
	})
}
