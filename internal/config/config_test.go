package config

import (
	"strings"
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

// A worker run's window is unset (0) unless the config sets it: the
// script's hdet_window, else bridge.DefaultWindow, fills it in.
func TestLoadWorkerLeavesTheWindowToTheScript(t *testing.T) {
	c, err := LoadWorker(nil, nil)
	require.NoError(t, err)
	assert.Equal(t, 0, c.Train.Window)
	c, err = LoadWorker(nil, []string{"train.window=25"})
	require.NoError(t, err)
	assert.Equal(t, 25, c.Train.Window)
	_, err = Load([]byte(sample), []string{"train.window=0"})
	assert.ErrorContains(t, err, "train.window")
}

// train.replica_size defaults to 1 (a rank per replica) and is set like
// any other key; whether the ranks divide into replicas is checked at
// launch, where the world's size is known (engine.NewLayout).
func TestReplicaSize(t *testing.T) {
	c, err := Load([]byte(sample), nil)
	require.NoError(t, err)
	assert.Equal(t, 1, c.Train.ReplicaSize)
	c, err = Load([]byte(sample), []string{"train.replica_size=8"})
	require.NoError(t, err)
	assert.Equal(t, 8, c.Train.ReplicaSize)
	y, err := c.YAML()
	require.NoError(t, err)
	assert.Contains(t, string(y), "replica_size: 8")
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
		"probe examples -1":  {yaml: "train: {steps: 10, window: 5, probe_examples: -1}", want: "train.probe_examples: got -1, want an integer in [0, 60000]"},
		"dropout range":      {yaml: "train: {steps: 10, window: 5}\nworkload: {dropout: 1.5}", want: "workload.dropout: got 1.5, want a number in [0, 1)"},
		"duplicate explorer": {yaml: "train: {steps: 10, window: 5}\nexplorers: [{name: lr, plugin: p}, {name: lr, plugin: p}]", want: "explorers[1].name: \"lr\" is explored twice"},
		"bad checksum":       {yaml: "train: {steps: 10, window: 5}\nexplorers: [{name: lr, plugin: p, sha256: xyz}]", want: "explorers[0].sha256"},
		"malformed yaml":     {yaml: "train: [", want: "YAML"},
		"bad set":            {yaml: sample, sets: []string{"train.window"}, want: "want key=value"},
		"empty set":          {yaml: sample, sets: []string{"train.seed= "}, want: "--set train.seed: empty value (write train.seed=null for the default)"},
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

// Every configuration error says where: the file's line, --set, or that the
// value is a default.
func TestErrorsCarryTheirLine(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		sets       []string
		want       string
	}{
		{"duplicate key", "train:\n  window: 5\n  steps: 10\n  window: 7\n", nil, "line 4: train.window: duplicate key (first at line 2)"},
		{"duplicate section", "run: {keep: 2}\ntrain: {steps: 10}\nrun: {keep: 3}\n", nil, "line 3: run: duplicate key (first at line 1)"},
		{"duplicate key in an explorer's config", "explorers:\n  - name: lr\n    plugin: x\n    config: {a: 1, a: 2}\n", nil, "line 4: explorers[0].config"},
		{"range error in the file", "train:\n  steps: 10\n  window: 0\n", nil, "line 3: train.window: got 0"},
		{"range error in a list", "train: {steps: 100}\nworkload:\n  hidden:\n    - 32\n    - 0\n", nil, "line 5: workload.hidden[1]: got 0"},
		{"wrong type", "\n\ntrain: {steps: ten}\n", nil, `line 3: train.steps: want an integer, got "ten"`},
		{"unknown key", "run:\n  dri: x\n", nil, "line 2: run.dri: unknown key"},
		{"from --set", "train: {steps: 10}\n", []string{"train.window=0"}, "--set: train.window: got 0"},
		{"infinity in an explorer's config", "explorers:\n  - name: lr\n    plugin: x\n    config:\n      schedule: {kind: onecycle, max_lr: .inf}\n", nil,
			"line 5: explorers[0].config.schedule.max_lr: want a finite number, got .inf"},
		{"NaN in a list, through an alias", "explorers:\n  - name: lr\n    plugin: x\n    config: {a: &n .NaN, b: [1, *n]}\n", nil,
			"line 4: explorers[0].config.a: want a finite number, got .NaN"},
		{"infinity from --set", "explorers:\n  - name: lr\n    plugin: x\n    config: {schedule: 0.1}\n", []string{"explorers.lr.config.schedule=-.inf"},
			"explorers[0].config.schedule: want a finite number, got -.inf"},
		{"a default that conflicts", "train: {steps: 0}\n", nil, "train.steps: got 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load([]byte(tc.yaml), tc.sets)
			require.ErrorIs(t, err, ErrInvalid)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestBoundsAndFiniteness(t *testing.T) {
	for _, tc := range []struct{ set, want string }{
		{"train.warm_noise=.inf", "train.warm_noise: got +Inf, want a finite number >= 0"},
		{"run.checkpoint_minutes=.inf", "run.checkpoint_minutes: got +Inf, want a number in [0, 10080]"},
		{"run.checkpoint_minutes=.nan", "run.checkpoint_minutes: got NaN"},
		{"workload.lr=.inf", "workload.lr: got +Inf, want a finite number > 0"},
		{"train.epochs=9223372036854775807", "train.epochs: got 9223372036854775807, want an integer in [1, 1048576]"},
		{"train.steps=1e15", "train.steps: got 1000000000000000, want an integer in [1, 1099511627776]"},
		{"train.window=2000000", "train.window: got 2000000, want at most 1048576 steps per window"},
		{"workload.hidden=[1000000000]", "workload.hidden[0]: got 1000000000, want an integer in [1, 65536]"},
		{"workload.batch_size=1e9", "workload.batch_size: got 1000000000, want an integer in [1, 65536]"},
		{"train.watchdog=10000h", "train.watchdog: got 10000h0m0s, want a duration in [0, 168h0m0s]"},
		{"run.keep=1e6", "run.keep: got 1000000, want an integer in [1, 1000]"},
		{"train.max_rollbacks=99999", "train.max_rollbacks: got 99999"},
		{"train.replica_size=0", "train.replica_size: got 0, want an integer in [1, 65536] (ranks per replica"},
		{"train.replica_size=1e6", "train.replica_size: got 1000000, want an integer in [1, 65536]"},
		{"train.replica_size=-2", "train.replica_size: got -2"},
		{"run.checkpoint_every=1e12", "run.checkpoint_every: got 1000000000000"},
		{"train.epochs=99999999999999999999", `train.epochs: want an integer, got "99999999999999999999"`},
	} {
		t.Run(tc.set, func(t *testing.T) {
			_, err := Load([]byte("train: {steps: 0, epochs: 1}\n"), []string{tc.set})
			if strings.HasPrefix(tc.set, "train.steps") || strings.HasPrefix(tc.set, "train.window") {
				_, err = Load([]byte("train: {steps: 100}\n"), []string{tc.set})
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// A huge value is not echoed whole.
func TestLongValuesAreCut(t *testing.T) {
	long := strings.Repeat("x", 5<<20)
	for _, y := range []string{
		"train: {steps: 100, sync: " + long + "}\n",
		"train: {steps: " + long + "}\n",
		"train: {steps: 100}\nrun: {dir: " + long + "}\n",
		"train: {steps: 100}\nexplorers: [{name: " + long + ", plugin: x}]\n",
	} {
		_, err := Load([]byte(y), nil)
		require.Error(t, err)
		assert.Less(t, len(err.Error()), 512, "%.200s", err.Error())
		assert.Contains(t, err.Error(), "(5242880 bytes)")
	}
	_, err := Load(nil, []string{"train." + long + "=1"})
	require.Error(t, err)
	assert.Less(t, len(err.Error()), 512)
}
