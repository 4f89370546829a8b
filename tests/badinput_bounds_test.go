package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// epochsCase sets train.epochs (train.steps 0) to v.
func epochsCase(name, v, want string) badCase {
	return badCase{name: name, args: runArgs("--set", "train.steps=0", "--set", "train.epochs="+v), cfg: badBase, want: want}
}

// noRunDir is runArgs without --run-dir, which would override run.dir.
func noRunDir(sets ...string) []string {
	args := []string{"run", "{cfg}", "--plugin-dir", "{plugins}", "--set", "workload.data={data}"}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	return args
}

func reportCase(name, metrics, want string) badCase {
	return badCase{name: name, args: []string{"report", "{run}"}, want: want, setup: func(t *testing.T, runDir string) {
		require.NoError(t, os.MkdirAll(runDir, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(runDir, "metrics.jsonl"), []byte(metrics), 0o644))
	}}
}

// inRunDir prepares the run directory with fn before the run.
func inRunDir(name string, fn func(t *testing.T, runDir string), want string) badCase {
	return badCase{name: name, args: runArgs(), cfg: badBase, setup: func(t *testing.T, runDir string) {
		require.NoError(t, os.MkdirAll(runDir, 0o755))
		fn(t, runDir)
	}, want: want}
}

func mkdir(rel string) func(t *testing.T, runDir string) {
	return func(t *testing.T, runDir string) { require.NoError(t, os.MkdirAll(filepath.Join(runDir, rel), 0o755)) }
}

func touch(rel string) func(t *testing.T, runDir string) {
	return func(t *testing.T, runDir string) {
		require.NoError(t, os.WriteFile(filepath.Join(runDir, rel), []byte("x"), 0o644))
	}
}

// TestBadInputBounds: numbers that would exhaust the machine, values that
// are not finite, duplicate keys, bad run directories and what hdet report
// and hdet schedule read (issue 16, items 6 and 7).
func TestBadInputBounds(t *testing.T) {
	hdet, pluginsDir := hdetBinaries(t)
	data := mnistDir(t)
	tmp := t.TempDir()
	file := filepath.Join(tmp, "file")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o644))
	sparse := filepath.Join(tmp, "huge-model.bin")
	require.NoError(t, os.WriteFile(sparse, nil, 0o644))
	require.NoError(t, os.Truncate(sparse, 10<<30)) // 10 GiB, no blocks
	garbage := filepath.Join(tmp, "garbage-data")
	require.NoError(t, os.MkdirAll(garbage, 0o755))
	entries, err := os.ReadDir(data)
	require.NoError(t, err)
	for _, e := range entries {
		require.NoError(t, os.WriteFile(filepath.Join(garbage, e.Name()), []byte("not gzip"), 0o644))
	}
	myRun := filepath.Join(tmp, "my run.yaml")
	require.NoError(t, os.WriteFile(myRun, []byte(badBase), 0o644))
	many := "train: {steps: 20, window: 10}\nexplorers:\n"
	for i := range 65 {
		many += fmt.Sprintf("  - {name: p%d, plugin: x}\n", i)
	}
	// A billion laughs in an explorer's free-form config block.
	bomb := "config:\n      a: &a [x, x, x, x, x, x, x, x, x]\n"
	for i, prev := 0, "a"; i < 9; i++ {
		name := fmt.Sprintf("b%d", i)
		bomb += fmt.Sprintf("      %s: &%s [*%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s]\n", name, name, prev, prev, prev, prev, prev, prev, prev, prev, prev)
		prev = name
	}
	huge := strings.Repeat("v", 50<<20)

	cases := []badCase{
		// Sizes and counts: upper bounds, overflow.
		epochsCase("epochs near 2^63", "9223372036854775807", "train.epochs: got 9223372036854775807, want an integer in [1, 1048576]"),
		epochsCase("epochs beyond int64", "99999999999999999999", `train.epochs: want an integer, got "99999999999999999999"`),
		epochsCase("epochs as a float", "1.5", `train.epochs: want an integer, got "1.5"`),
		setCase("steps 1e15", "train.steps=1e15", "train.steps: got 1000000000000000, want an integer in [1, 1099511627776]"),
		setCase("steps most negative", "train.steps=-9223372036854775808", "train.steps: got -9223372036854775808"),
		setCase("window beyond the plan's limit", "train.window=2000000", "train.window: got 2000000, want at most 1048576 steps per window"),
		badCase{name: "window beyond the plan's limit in epochs", args: runArgs("--set", "train.steps=0", "--set", "train.epochs=1000", "--set", "train.window=2000000"), cfg: badBase,
			want: "train.window: got 2000000, want at most 1048576 steps per window"},
		setCase("layer width 1e9", "workload.hidden=[1000000000]", "workload.hidden[0]: got 1000000000, want an integer in [1, 65536]"),
		setCase("model larger than memory", "workload.hidden=[65536, 65536, 65536]", "the model needs about"),
		setCase("65 layers", "workload.hidden=["+strings.Repeat("1, ", 64)+"1]", "workload.hidden: got 65 layers, want at most 64"),
		setCase("no layers", "workload.hidden=[]", "workload.hidden: got [], want a non-empty list"),
		setCase("batch 1e9", "workload.batch_size=1e9", "workload.batch_size: got 1000000000, want an integer in [1, 65536]"),
		setCase("batch zero", "workload.batch_size=0", "workload.batch_size: got 0"),
		setCase("keep 1e6", "run.keep=1e6", "run.keep: got 1000000, want an integer in [1, 1000]"),
		setCase("max rollbacks 99999", "train.max_rollbacks=99999", "train.max_rollbacks: got 99999, want an integer in [0, 1000]"),
		setCase("checkpoint_every 1e12", "run.checkpoint_every=1e12", "run.checkpoint_every: got 1000000000000"),
		setCase("eval_every 1e12", "train.eval_every=1e12", "train.eval_every: got 1000000000000"),
		setCase("eval_every negative", "train.eval_every=-1", "train.eval_every: got -1"),
		setCase("fractional layer width", "workload.hidden=[32.5]", `workload.hidden[0]: want an integer, got "32.5"`),
		setCase("seed negative", "train.seed=-1", `train.seed: want a non-negative integer, got "-1"`),
		setCase("seed fractional", "train.seed=1.5", `train.seed: want a non-negative integer, got "1.5"`),
		// Durations.
		setCase("watchdog 10000h", "train.watchdog=10000h", "train.watchdog: got 10000h0m0s, want a duration in [0, 168h0m0s]"),
		setCase("watchdog overflowing", "train.watchdog=99999999999h", `train.watchdog: want a duration such as 30s or 5m, got "99999999999h"`),
		setCase("checkpoint_max_failing 1000h", "run.checkpoint_max_failing=1000h", "run.checkpoint_max_failing: got 1000h0m0s"),
		setCase("explorer timeout 2h", "explorers.lr.timeout=2h", "explorers[0].timeout: got 2h0m0s, want a duration in (0, 1h0m0s]"),
		setCase("explorer timeout negative", "explorers.lr.timeout=-1s", "explorers[0].timeout: got -1s"),
		setCase("explorer timeout not a duration", "explorers.lr.timeout=5", `explorers[0].timeout: want a duration such as 30s or 5m, got "5"`),
		// Infinities and NaN.
		setCase("warm_noise .inf", "train.warm_noise=.inf", "train.warm_noise: got +Inf, want a finite number >= 0"),
		setCase("warm_noise .nan", "train.warm_noise=.nan", "train.warm_noise: got NaN"),
		setCase("checkpoint_minutes .inf", "run.checkpoint_minutes=.inf", "run.checkpoint_minutes: got +Inf, want a number in [0, 10080]"),
		setCase("checkpoint_minutes .nan", "run.checkpoint_minutes=.nan", "run.checkpoint_minutes: got NaN"),
		setCase("checkpoint_minutes a year", "run.checkpoint_minutes=525600", "run.checkpoint_minutes: got 525600"),
		setCase("lr .inf", "workload.lr=.inf", "workload.lr: got +Inf, want a finite number > 0"),
		setCase("lr -.inf", "workload.lr=-.inf", "workload.lr: got -Inf"),
		setCase("lr .nan", "workload.lr=.nan", "workload.lr: got NaN"),
		setCase("eps .nan", "workload.eps=.nan", "workload.eps: got NaN"),
		setCase("weight_decay .inf", "workload.weight_decay=.inf", "workload.weight_decay: got +Inf, want a finite number >= 0"),
		setCase("divergence_factor .inf", "train.divergence_factor=.inf", "train.divergence_factor: got +Inf"),
		setCase("momentum 1", "workload.momentum=1", "workload.momentum: got 1, want a number in [0, 1)"),
		setCase("beta2 1", "workload.beta2=1", "workload.beta2: got 1, want a number in (0, 1)"),
		setCase("label_smoothing 1", "workload.label_smoothing=1", "workload.label_smoothing: got 1"),
		setCase("dropout negative", "workload.dropout=-0.1", "workload.dropout: got -0.1"),
		// Duplicate keys and line numbers.
		cfgCase("duplicate top-level section", badBase+"train: {seed: 3}\n", "line 9: train: duplicate key (first at line 3)"),
		cfgCase("duplicate nested key", "train:\n  steps: 20\n  steps: 30\n", "line 3: train.steps: duplicate key (first at line 2)"),
		cfgCase("duplicate key in an explorer entry", strings.Replace(badBase, "plugin: hdet-explorer-lr", "plugin: hdet-explorer-lr\n    plugin: other", 1), "explorers[0].plugin: duplicate key"),
		cfgCase("duplicate key in an explorer's config", withExplorer("config: {schedule: 0.001, schedule: 0.002}"), `explorers[0].config: yaml: unmarshal errors:`),
		cfgCase("range error carries its line", "workload: {hidden: [32]}\n\ntrain:\n  steps: 20\n  window: 0\n", "line 5: train.window: got 0"),
		cfgCase("list element carries its line", "train: {steps: 20, window: 10}\nworkload:\n  hidden:\n    - 32\n    - -4\n", "line 5: workload.hidden[1]: got -4"),
		setCase("--set error says --set", "train.window=0", "--set: train.window: got 0"),
		cfgCase("YAML syntax error has its line", "train:\n  steps: [\n", "line"),
		cfgCase("tab indentation", "train:\n\tsteps: 20\n", "YAML"),
		cfgCase("alias bomb", withExplorer(bomb), "explorers[0].config"),
		cfgCase("binary garbage", "\x00\x01\x02\xff", "YAML"),
		cfgCase("section is a list", "train: [1, 2]\n", "train: want a mapping of keys"),
		// Long values are cut.
		cfgCase("50 MB value", "train: {steps: 20, window: 10, sync: "+huge+"}\n", "...(52428800 bytes)"),
		cfgCase("long unknown key", "train: {steps: 20, window: 10, "+strings.Repeat("k", 1000)+": 1}\n", "bytes): unknown key"),
		{name: "long run.dir", args: noRunDir("run.dir=" + strings.Repeat("d", 5000)), cfg: badBase, want: "run.dir: got ddd"},
		cfgCase("explorer name of 65 characters", strings.Replace(badBase, "name: lr", "name: "+strings.Repeat("l", 65), 1), "at most 64 characters"),
		cfgCase("65 explorers", many, "explorers: got 65 explorers, want at most 64"),
		cfgCase("uppercase sha256", strings.Replace(badBase, "plugin: hdet-explorer-lr", "plugin: hdet-explorer-lr\n    sha256: "+strings.Repeat("A", 64), 1), "want 64 lowercase hex digits"),
		// --set paths.
		setCase("--set with an empty key", "=5", "--set needs key=value"),
		setCase("--set list index out of range", "explorers[5].name=x", "index 5 out of range"),
		setCase("--set below a value", "train.window.x=1", `"train.window" is a value, not a mapping or list`),
		setCase("--set a list where a string goes", "run.progress=[a]", "run.progress: want a string, got a list"),
		setCase("--set a value where a section goes", "train=5", "train: want a mapping of keys"),
		setCase("--set an empty value", "train.sync=", "--set train.sync: empty value (write train.sync=null for the default)"),
		setCase("--set NaN for an explorer's number", "explorers.lr.config.spread.alpha=NaN", `spread.alpha: must be a JSON number, got string "NaN"`),
		// Run directories.
		{name: "run dir is a file", args: runArgs("--run-dir", file), cfg: badBase, want: "not a usable run directory"},
		{name: "run dir under a file", args: runArgs("--run-dir", filepath.Join(file, "run")), cfg: badBase, want: "not a directory"},
		{name: "run dir name too long", args: runArgs("--run-dir", filepath.Join(tmp, strings.Repeat("n", 300))), cfg: badBase, want: "file name too long"},
		{name: "run dir under /proc", args: runArgs("--run-dir", "/proc/hdet-run"), cfg: badBase, want: "not a usable run directory"},
		{name: "empty run dir", args: noRunDir(), cfg: strings.Replace(badBase, "run: {", `run: {dir: "", `, 1), want: "run.dir: got , want a directory path"},
		inRunDir("checkpoints is a file", touch("checkpoints"), "checkpoints is not a directory"),
		inRunDir("metrics.jsonl is a directory", mkdir("metrics.jsonl"), "metrics.jsonl"),
		inRunDir("config.yaml is a directory", mkdir("config.yaml"), "run.dir"),
		// Files the run reads.
		setCase("warm start is a directory", "train.warm_start="+tmp, "train.warm_start"),
		setCase("warm start of 10 GiB", "train.warm_start="+sparse, "holds 10737418240 bytes"),
		setCase("data folder is a file", "workload.data="+file, "workload.data"),
		setCase("data files are garbage", "workload.data="+garbage, "workload.data"),
		// hdet report reads what a file claims with bounds.
		reportCase("report: a billion ranks", `{"type":"start","ranks":1000000000}`+"\n", "start record: ranks 1000000000, want 0 to 65536"),
		reportCase("report: negative ranks", `{"type":"start","ranks":-3}`+"\n", "start record: ranks -3"),
		reportCase("report: negative ranks beside a window", `{"type":"start","ranks":-4}`+"\n"+`{"type":"window","window":0,"step":10}`+"\n", "start record: ranks -4"),
		reportCase("report: negative window", `{"type":"start","ranks":2}`+"\n"+`{"type":"window","window":-1,"step":-5,"losses":[1,2]}`+"\n", "window record: window -1 at step -5, want both >= 0"),
		reportCase("report: ranks as a string", `{"type":"start","ranks":"many"}`+"\n", "metrics"),
		reportCase("report: a line of 70 MB", `{"type":"start","x":"`+strings.Repeat("y", 70<<20)+"\"}\n", "line longer than"),
		{name: "report: metrics.jsonl is a directory", args: []string{"report", "{run}"}, setup: mkdir("metrics.jsonl"), want: "not a regular file"},
		// hdet schedule and hdet sbatch.
		{name: "schedule: total steps 2^63-1", args: []string{"schedule", "onecycle", "--max-lr", "0.1", "--total-steps", "9223372036854775807"}, want: "--total-steps: got 9223372036854775807, want at most 10000000"},
		{name: "schedule: total steps beyond int64", args: []string{"schedule", "onecycle", "--max-lr", "0.1", "--total-steps", "99999999999999999999"}, want: "not a valid int"},
		{name: "schedule: total steps negative", args: []string{"schedule", "onecycle", "--max-lr", "0.1", "--total-steps", "-1"}, want: "total-steps"},
		{name: "schedule: max lr infinite", args: []string{"schedule", "onecycle", "--max-lr", "inf", "--total-steps", "10"}, want: "--max-lr: must be a positive finite number"},
		{name: "sbatch: config name with a space works", args: []string{"sbatch", myRun, "--time", "1:00:00", "--ntasks-per-node", "4"}, want: "#SBATCH --job-name=hdet-my-run", code: -1},
		{name: "sbatch: job name with a space", args: []string{"sbatch", myRun, "--time", "1:00:00", "--ntasks-per-node", "4", "--job-name", "my run"}, want: "--job-name"},
	}
	require.GreaterOrEqual(t, len(cases), 80)
	runBadCases(t, hdet, pluginsDir, data, cases)
}
