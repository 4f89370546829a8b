package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// badBase is a short single-rank run (an MPI singleton: no mpirun) in one
// pass (commit continue): its checkpoints at steps 10 and 20 are one run's.
const badBase = `
workload: {hidden: [32], batch_size: 32}
train: {steps: 20, window: 10, seed: 5}
run: {checkpoint_every: 1, progress: none}
explorers:
  - name: lr
    plugin: hdet-explorer-lr
    ` + badExplorerConfig + "\n"

// badExplorerConfig is badBase's explorer config block.
const badExplorerConfig = "config: {schedule: {kind: onecycle, max_lr: 0.004}, auto: {commit: continue}}"

// withExplorer replaces badBase's explorer config block.
func withExplorer(block string) string {
	return strings.Replace(badBase, badExplorerConfig, block, 1)
}

// badCase is one bad input: hdet is run with args, where {cfg} is a file
// holding cfg, {run} a fresh run directory (prepared by setup),
// {plugins} the explorer directory and {data} the MNIST folder.
type badCase struct {
	name  string
	args  []string
	cfg   string
	setup func(t *testing.T, runDir string)
	want  string // in the output
	code  int    // 0 means 2 (usage or configuration error)
}

func runArgs(extra ...string) []string {
	return append([]string{"run", "{cfg}", "--run-dir", "{run}", "--plugin-dir", "{plugins}", "--set", "workload.data={data}"}, extra...)
}

func cfgCase(name, cfg, want string) badCase {
	return badCase{name: name, args: runArgs(), cfg: cfg, want: want}
}

func setCase(name, set, want string) badCase {
	return badCase{name: name, args: runArgs("--set", set), cfg: badBase, want: want}
}

// Every bad input ends with exit 2 and a message naming what is wrong, and
// never with a panic or a Go stack trace.
func TestBadInput(t *testing.T) {
	hdet, pluginsDir := hdetBinaries(t)
	data := mnistDir(t)

	// A real run's checkpoints (steps 10 and 20) for the checkpoint cases.
	donor := filepath.Join(t.TempDir(), "donor")
	out, code := runHdet(t, hdet, expand(runArgs("--run-dir", donor), writeCfg(t, badBase), donor, pluginsDir, data)...)
	require.Equal(t, 0, code, out)
	ckpt := func(step string) []byte {
		b, err := os.ReadFile(filepath.Join(donor, "checkpoints", "ckpt-0000000000"+step+".hdet"))
		require.NoError(t, err)
		return b
	}
	place := func(files map[string][]byte) func(t *testing.T, runDir string) {
		return func(t *testing.T, runDir string) {
			dir := filepath.Join(runDir, "checkpoints")
			require.NoError(t, os.MkdirAll(dir, 0o755))
			for name, b := range files {
				require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o644))
			}
		}
	}
	both := map[string][]byte{"ckpt-000000000010.hdet": ckpt("10"), "ckpt-000000000020.hdet": ckpt("20")}
	c20 := ckpt("20")
	truncated := c20[:len(c20)/2]
	notADir := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(notADir, []byte("x"), 0o644))
	emptyDir := t.TempDir()
	metricsDir := func(content string) func(t *testing.T, runDir string) {
		return func(t *testing.T, runDir string) {
			require.NoError(t, os.MkdirAll(runDir, 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(runDir, "metrics.jsonl"), []byte(content), 0o644))
		}
	}
	warm := filepath.Join(t.TempDir(), "model.bin")
	require.NoError(t, os.WriteFile(warm, []byte("short"), 0o644))

	cases := []badCase{
		// YAML and the config's shape.
		cfgCase("malformed YAML", "train: [", "YAML"),
		cfgCase("malformed YAML indentation", "train:\n  steps: 10\n window: 5", "YAML"),
		{name: "top level is a list", args: []string{"run", "{cfg}"}, cfg: "- a\n- b", want: "(top level): want a mapping"},
		cfgCase("unknown top-level key", badBase+"trian: {}\n", "trian: unknown key"),
		setCase("unknown nested key", "run.dri=x", "run.dri: unknown key"),
		cfgCase("unknown explorer key", strings.Replace(badBase, "plugin:", "plugn:", 1), "explorers[0].plugn: unknown key"),
		cfgCase("wrong type: steps", "train: {steps: ten, window: 5}", `train.steps: want an integer, got "ten"`),
		setCase("wrong type: lr", "workload.lr=fast", `workload.lr: want a number, got "fast"`),
		setCase("wrong type: hidden", "workload.hidden=32", "workload.hidden: want a list"),
		setCase("wrong type: explorers", "explorers=lr", "explorers: want a list"),
		setCase("bad duration", "train.watchdog=soon", `train.watchdog: want a duration such as 30s or 5m, got "soon"`),
		// T and the run's length.
		setCase("zero T", "train.window=0", "train.window: got 0, want an integer >= 1"),
		setCase("negative T", "train.window=-5", "train.window: got -5, want an integer >= 1"),
		setCase("T larger than the run", "train.window=50", "train.window: got 50, want at most train.steps (20)"),
		badCase{name: "T larger than the run in epochs", args: runArgs("--set", "train.steps=0", "--set", "train.epochs=1", "--set", "train.window=100000"), cfg: badBase,
			want: "train.window: got 100000, want at most the run's 1875 steps (1 epochs)"},
		setCase("negative steps", "train.steps=-1", "train.steps: got -1"),
		setCase("steps and epochs", "train.epochs=2", "train.epochs: got 2, want 0 when train.steps is set"),
		// Other fields out of range.
		setCase("unknown sync", "train.sync=ring", "train.sync: got ring, want local or gradients"),
		setCase("dropout out of range", "workload.dropout=1.5", "workload.dropout: got 1.5, want a number in [0, 1)"),
		setCase("zero layer width", "workload.hidden=[32, 0]", "workload.hidden[1]: got 0, want an integer in [1, 65536]"),
		setCase("unknown optimizer", "workload.optimizer=adam", "workload.optimizer: got adam, want adamw or sgd"),
		setCase("keep zero", "run.keep=0", "run.keep: got 0, want an integer in [1, 1000]"),
		setCase("negative watchdog", "train.watchdog=-1s", "train.watchdog: got -1s, want a duration in [0, 168h0m0s]"),
		setCase("divergence factor below 1", "train.divergence_factor=0.5", "train.divergence_factor: got 0.5, want 0 (off) or a finite number > 1"),
		setCase("negative max rollbacks", "train.max_rollbacks=-1", "train.max_rollbacks: got -1, want an integer in [0, 1000]"),
		setCase("negative checkpoint_max_failing", "run.checkpoint_max_failing=-5m", "run.checkpoint_max_failing: got -5m0s"),
		setCase("--set without =", "train.window", `--set "train.window": want key=value`),
		setCase("--set into a missing explorer", "explorers.wd.plugin=x", `no list entry named "wd"`),
		// Explorers.
		cfgCase("alpha making a value <= 0", withExplorer("config: {schedule: 0.001, spread: {kind: multiplicative, alpha: 1}}"), "alpha"),
		cfgCase("alpha above 1", withExplorer("config: {schedule: 0.001, spread: {kind: multiplicative, alpha: 1.5}}"), "alpha"),
		cfgCase("negative alpha", withExplorer("config: {schedule: 0.001, spread: {alpha: -0.1}}"), "alpha"),
		cfgCase("inverted bounds", withExplorer("config: {schedule: 0.001, bounds: {lower: 0.1, upper: 0.01}}"), "bounds"),
		cfgCase("unknown schedule kind", withExplorer("config: {schedule: {kind: sawtooth, max_lr: 0.01}}"), "sawtooth"),
		cfgCase("infinite max_lr", withExplorer("config: {schedule: {kind: onecycle, max_lr: .inf}}"), "explorers[0].config.schedule.max_lr: want a finite number, got .inf"),
		// Refused by the explorer process itself, said once, with no restart.
		cfgCase("negative max_lr", withExplorer("config: {schedule: {kind: onecycle, max_lr: -1}}"), "explorers: explorer failed: lr: init: schedule.max_lr: must be a positive finite number, got -1"),
		cfgCase("plugin that is not an explorer", strings.Replace(badBase, "plugin: hdet-explorer-lr", "plugin: /bin/true", 1), "start explorer /bin/true (not an hdet explorer)"),
		cfgCase("unknown explorer config key", withExplorer("config: {schedule: 0.001, spred: {alpha: 0.1}}"), "spred"),
		cfgCase("explorer the workload does not accept", strings.Replace(badBase, "name: lr", "name: temperature", 1),
			`explorers[0].name: the workload does not accept "temperature"`),
		cfgCase("invalid explorer name", strings.Replace(badBase, "name: lr", "name: LR!", 1), `explorers[0].name: got "LR!"`),
		cfgCase("explorer listed twice", badBase+"  - name: lr\n    plugin: hdet-explorer-lr\n", `explorers[1].name: "lr" is explored twice`),
		cfgCase("missing plugin binary", strings.Replace(badBase, "plugin: hdet-explorer-lr", "plugin: hdet-explorer-nope", 1), `explorers[0].plugin: "hdet-explorer-nope"`),
		cfgCase("bad sha256 pin", strings.Replace(badBase, "plugin: hdet-explorer-lr", "plugin: hdet-explorer-lr\n    sha256: xyz", 1), "explorers[0].sha256"),
		cfgCase("wrong sha256 pin", strings.Replace(badBase, "plugin: hdet-explorer-lr", "plugin: hdet-explorer-lr\n    sha256: "+strings.Repeat("0", 64), 1), "does not match its pinned SHA-256"),
		{name: "plugin dir missing", args: runArgs("--plugin-dir", "/nonexistent/plugins"), cfg: badBase, want: "/nonexistent/plugins"},
		{name: "plugin dir is a file", args: runArgs("--plugin-dir", notADir), cfg: badBase, want: notADir},
		{name: "plugin dir empty", args: runArgs("--plugin-dir", emptyDir), cfg: badBase, want: `explorers[0].plugin: "hdet-explorer-lr"`},
		// Data.
		setCase("missing data", "workload.data=/nonexistent/mnist", "workload.data"),
		{name: "data folder empty", args: runArgs("--set", "workload.data="+emptyDir), cfg: badBase, want: "workload.data"},
		setCase("N x batch larger than the data", "workload.batch_size=60001", "batch_size"),
		setCase("warm start of the wrong size", "train.warm_start="+warm, "train.warm_start"),
		setCase("warm start missing", "train.warm_start=/nonexistent/model.bin", "train.warm_start"),
		// Checkpoints in the run directory.
		{name: "another run's checkpoint (other seed)", args: runArgs("--set", "train.seed=6"), cfg: badBase, setup: place(both),
			want: "train.seed (5 in the checkpoint, 6 now): it is another run's"},
		{name: "checkpoint of another model shape", args: runArgs("--set", "workload.hidden=[16]"), cfg: badBase, setup: place(both),
			want: "the model's shape (workload mnist [32] in the checkpoint, mnist [16] now)"},
		{name: "checkpoint beyond the run's length", args: runArgs("--set", "train.steps=10"), cfg: badBase, setup: place(both),
			want: "the run length (the checkpoint is at step 20, the run has 10 steps)"},
		{name: "only checkpoint truncated", args: runArgs(), cfg: badBase, setup: place(map[string][]byte{"ckpt-000000000020.hdet": truncated}),
			want: "every checkpoint is damaged"},
		{name: "newest checkpoint truncated, older valid: falls back", args: runArgs(), cfg: badBase,
			setup: place(map[string][]byte{"ckpt-000000000010.hdet": ckpt("10"), "ckpt-000000000020.hdet": truncated}),
			want:  "skipping a damaged checkpoint; falling back to the one before", code: -1},
		// hdet report.
		{name: "report: corrupt metrics.jsonl", args: []string{"report", "{run}"}, setup: metricsDir("this is not json\n{\"type\":\"window\"}\n"), want: "metrics"},
		{name: "report: no start record", args: []string{"report", "{run}"}, setup: metricsDir(`{"type":"window","window":0}` + "\n" + `{"type":"window","window":1}` + "\n"), want: "start"},
		{name: "report: empty metrics.jsonl", args: []string{"report", "{run}"}, setup: metricsDir(""), want: "metrics"},
		{name: "report: missing run dir", args: []string{"report", "/nonexistent/run"}, want: "/nonexistent/run"},
		// Command lines.
		{name: "config file missing", args: []string{"run", "/nonexistent/c.yaml"}, want: "read config"},
		{name: "config is a directory", args: []string{"run", "{run}"}, setup: func(t *testing.T, d string) { require.NoError(t, os.MkdirAll(d, 0o755)) }, want: "read config"},
		{name: "two configs", args: []string{"run", "{cfg}", "{cfg}"}, cfg: badBase, want: "at most one CONFIG.yaml"},
		{name: "run: unknown flag", args: []string{"run", "--frobnicate"}, want: "flag provided but not defined: -frobnicate"},
		{name: "run: bad allreduce path", args: runArgs("--allreduce-path", "warp"), cfg: badBase, want: "--allreduce-path"},
		{name: "run: bad progress", args: runArgs("--progress", "fancy"), cfg: badBase, want: "run.progress: got fancy"},
		{name: "run: --worker without command", args: []string{"run", "--worker"}, want: "--worker needs the worker's command"},
		{name: "run: --worker command missing", args: []string{"run", "--worker", "--", "/nonexistent/train.py"}, want: `--worker command: exec: "/nonexistent/train.py": stat /nonexistent/train.py: no such file or directory`},
		{name: "run: --worker command not on PATH", args: []string{"run", "--worker", "--", "pyhton3", "train.py"}, want: `--worker command: exec: "pyhton3": executable file not found in $PATH`},
		{name: "schedule: unknown flag", args: []string{"schedule", "--frobnicate"}, want: "schedule"},
		{name: "schedule: unknown kind", args: []string{"schedule", "sawtooth"}, want: "sawtooth"},
		{name: "sbatch: unknown flag", args: []string{"sbatch", "--frobnicate"}, want: "flag provided but not defined: -frobnicate"},
		{name: "sbatch: no config", args: []string{"sbatch"}, want: "CONFIG.yaml"},
		{name: "report: unknown flag", args: []string{"report", "--frobnicate"}, want: "flag provided but not defined: -frobnicate"},
		{name: "plugins: unknown subcommand", args: []string{"plugins", "frobnicate"}, want: `unknown subcommand "frobnicate"`},
		{name: "plugins check: unknown flag", args: []string{"plugins", "check", "--frobnicate"}, want: "flag provided but not defined: -frobnicate"},
		{name: "devices: unknown flag", args: []string{"devices", "--frobnicate"}, want: "flag provided but not defined: -frobnicate"},
		{name: "bench: unknown benchmark", args: []string{"bench", "frobnicate"}, want: "wants a benchmark name: allreduce"},
		{name: "bench allreduce: unknown flag", args: []string{"bench", "allreduce", "--frobnicate"}, want: "flag provided but not defined: -frobnicate"},
		{name: "unknown command", args: []string{"frobnicate"}, want: `unknown command "frobnicate"`},
	}
	require.GreaterOrEqual(t, len(cases), 40)
	runBadCases(t, hdet, pluginsDir, data, cases)
}

// runBadCases runs each case as a subtest: its exit code, its message, no
// panic, and no huge value echoed back.
func runBadCases(t *testing.T, hdet, pluginsDir, data string, cases []badCase) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			runDir := filepath.Join(dir, "run")
			if tc.setup != nil {
				tc.setup(t, runDir)
			}
			cfgPath := ""
			if tc.cfg != "" {
				cfgPath = filepath.Join(dir, "c.yaml")
				require.NoError(t, os.WriteFile(cfgPath, []byte(tc.cfg), 0o644))
			}
			out, code := runHdet(t, hdet, expand(tc.args, cfgPath, runDir, pluginsDir, data)...)
			want := tc.code
			switch want {
			case 0:
				want = 2
			case -1:
				want = 0
			}
			t.Logf("exit %d: %s", code, lastLine(out))
			assert.Equal(t, want, code, "exit code; output:\n%s", out)
			assert.Contains(t, out, tc.want)
			assert.NotContains(t, out, "goroutine ", "a Go stack trace")
			assert.NotContains(t, out, "panic:")
			assert.Less(t, len(out), 64<<10, "the output stays short")
		})
	}
}

func writeCfg(t *testing.T, cfg string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(p, []byte(cfg), 0o644))
	return p
}

func expand(args []string, cfg, run, pluginsDir, data string) []string {
	r := strings.NewReplacer("{cfg}", cfg, "{run}", run, "{plugins}", pluginsDir, "{data}", data)
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = r.Replace(a)
	}
	return out
}

// lastLine is the last non-empty line of out: the message a user reads.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
}
