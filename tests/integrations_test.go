package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/metrics"
	"github.com/hdet-dev/hdet/internal/testenv"
)

// The integrations' end-to-end tests run the two example scripts,
// examples/pytorch/hf_finetune.py (a GPT-2 built from a config, on the
// standard library's sources) and examples/pytorch/lightning_train.py (an
// MLP on a Gaussian mixture), each through a small wrapper that runs the
// example unchanged and prints, at its first training step, one
// "HDET-TEST {json}" line of what the Trainer sees: its world, what hdet
// hid from the environment, its folders (the search pass is killed at the
// commit, so not at the end). Nothing is downloaded.

// hfWrapper runs the Hugging Face example with a GradScaler on the CPU
// (accelerate makes one for fp16 on a GPU) and infinite gradients at the
// global steps in HDET_TEST_SKIP, which the scaler then skips.
const hfWrapper = `import json, os, runpy, sys
import torch, transformers

skip = {int(s) for s in os.environ.get("HDET_TEST_SKIP", "").split(",") if s}
create, train_step = transformers.Trainer.create_accelerator_and_postprocess, transformers.Trainer.training_step
printed = []

def create_accelerator_and_postprocess(self):
    create(self)
    if skip:
        self.accelerator.scaler = torch.amp.GradScaler("cpu", init_scale=1.0)

def training_step(self, model, inputs, num_items_in_batch=None):
    if not printed:
        from hdet.integrations import hidden_environment
        printed.append(1)
        print("HDET-TEST " + json.dumps({"rank": int(os.environ.get("HDET_RANK", "0")),
            "pass": os.environ.get("HDET_PASS") or "search", "hidden": sorted(hidden_environment()),
            "processes": self.accelerator.num_processes, "output_dir": self.args.output_dir,
            "global_step": self.state.global_step}), flush=True)
    loss = train_step(self, model, inputs, num_items_in_batch)
    if self.state.global_step in skip:
        next(model.parameters()).grad.fill_(float("inf"))
    return loss

transformers.Trainer.create_accelerator_and_postprocess = create_accelerator_and_postprocess
transformers.Trainer.training_step = training_step
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
`

// lightningWrapper runs the Lightning example after importing Lightning
// itself (so its rank_zero_only read the launchers' variables first).
const lightningWrapper = `import json, os, runpy, sys
import lightning.pytorch as pl
from lightning_utilities.core.rank_zero import rank_zero_only

class Report(pl.Callback):
    printed = False

    def on_train_batch_start(self, t, module, batch, i):
        if Report.printed:
            return
        from hdet.integrations import hidden_environment
        Report.printed = True
        print("HDET-TEST " + json.dumps({"rank": int(os.environ.get("HDET_RANK", "0")),
            "pass": os.environ.get("HDET_PASS") or "search", "hidden": sorted(hidden_environment()),
            "processes": t.world_size, "strategy": type(t.strategy).__name__,
            "cluster": type(t._accelerator_connector.cluster_environment).__name__, "rank_zero": rank_zero_only.rank,
            "log_dir": t.log_dir, "global_step": t.global_step}), flush=True)

fit = pl.Trainer.fit

def report_fit(self, *args, **kwargs):
    self.callbacks.append(Report())
    return fit(self, *args, **kwargs)

pl.Trainer.fit = report_fit
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
`

// trainerSaw is one HDET-TEST line.
type trainerSaw struct {
	Rank       int      `json:"rank"`
	Pass       string   `json:"pass"`
	Hidden     []string `json:"hidden"`
	Processes  int      `json:"processes"`
	OutputDir  string   `json:"output_dir"`
	LogDir     string   `json:"log_dir"`
	Strategy   string   `json:"strategy"`
	Cluster    string   `json:"cluster"`
	RankZero   int      `json:"rank_zero"`
	GlobalStep int      `json:"global_step"`
	TorchWorld int      `json:"torch_world"`
	// accelerate had set up a torch.distributed world before the script
	// imported hdet's callback (tests/testdata/hf_regression.py)
	WorldBeforeImport bool `json:"world_before_import"`
}

func trainerLines(t *testing.T, stdout string) []trainerSaw {
	t.Helper()
	var out []trainerSaw
	sc := bufio.NewScanner(strings.NewReader(stdout))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		_, js, ok := strings.Cut(sc.Text(), "HDET-TEST ")
		if !ok {
			continue
		}
		var s trainerSaw
		require.NoError(t, json.Unmarshal([]byte(js), &s), sc.Text())
		out = append(out, s)
	}
	return out
}

// needPythonModule needs `import name` to work in testenv.Python (Need's rule).
func needPythonModule(t *testing.T, name string) {
	t.Helper()
	testenv.NeedTorch(t)
	if out, err := exec.Command(testenv.Python, "-c", "import "+name).CombinedOutput(); err != nil {
		testenv.Need(t, fmt.Errorf("no %s for %s: %v\n%s", name, testenv.Python, err, out), testenv.GetTorch)
	}
}

// integrationRun runs LAUNCHER hdet run --worker -- python WRAPPER EXAMPLE
// ARGS in dir (2 ranks), with HDET_TRACE_DIR set and env added; launch
// builds the launcher's command from hdet's command line.
func integrationRun(t *testing.T, dir string, launch func(ctx context.Context, args ...string) *exec.Cmd,
	env []string, wrapper, example string, args ...string) (hdetRun, string) {
	t.Helper()
	script := filepath.Join(dir, "wrapper.py")
	require.NoError(t, os.WriteFile(script, []byte(wrapper), 0o644))
	return workerScriptRun(t, dir, launch, env, append([]string{script, examplePath(t, example)}, args...)...)
}

// workerScriptRun runs LAUNCHER hdet run --worker -- python SCRIPT ARGS in
// dir, with HDET_TRACE_DIR set and env added.
func workerScriptRun(t *testing.T, dir string, launch func(ctx context.Context, args ...string) *exec.Cmd,
	env []string, script ...string) (hdetRun, string) {
	t.Helper()
	hdet, plugins := hdetBinaries(t)
	runDir, traceDir := filepath.Join(dir, "run"), filepath.Join(dir, "trace")
	require.NoError(t, os.MkdirAll(traceDir, 0o755))
	full := append([]string{hdet, "run", "--run-dir", runDir, "--plugin-dir", plugins, "--progress", "none",
		"--worker", "--", testenv.Python}, script...)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := launch(ctx, full...)
	cmd.Dir = dir
	cmd.Env = append(cmd.Env, append([]string{"HDET_TRACE_DIR=" + traceDir, "OMP_NUM_THREADS=1"}, env...)...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	name := "" // the script's, not its wrapper's
	for _, a := range script {
		if strings.HasSuffix(a, ".py") {
			name = filepath.Base(a)
		}
	}
	t.Logf("%s: %.1f s wall, %.1f s CPU (user+sys of hdet and both ranks' scripts)", name,
		time.Since(start).Seconds(), cpuSeconds(cmd))
	return hdetRun{dir: runDir, stdout: out.String(), stderr: errb.String(), err: err}, traceDir
}

func cpuSeconds(cmd *exec.Cmd) float64 {
	if cmd.ProcessState == nil {
		return 0
	}
	return (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
}

// mpirunN launches under mpirun on n ranks.
func mpirunN(t *testing.T, n int) func(ctx context.Context, args ...string) *exec.Cmd {
	return func(ctx context.Context, args ...string) *exec.Cmd { return mpirunCmd(ctx, t, n, args...) }
}

// plainRun runs an example once without hdet (python EXAMPLE ARGS in dir).
func plainRun(t *testing.T, dir, example string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, testenv.Python, append([]string{examplePath(t, example)}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "OMP_NUM_THREADS=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s without hdet:\n%s", example, out)
	return string(out)
}

// checkIntegrationRun asserts what both examples' runs must show: exit 0,
// the same parameters on every rank after each converge, the script
// started again for the main pass, the loss falling (checkWorkerRun), a
// commit, distinct learning rates per rank in every search window, each
// replica with data of its own, and the Trainer's view of each of the 4
// processes. Returns the commit record and the HDET-TEST lines.
func checkIntegrationRun(t *testing.T, r hdetRun, traceDir string, steps int) (metrics.CommitRecord, []trainerSaw) {
	t.Helper()
	require.NoError(t, r.err, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	recs := r.records(t)
	main, probed := 0, 0
	for _, w := range metrics.Of[metrics.WindowRecord](recs) {
		if w.Pass == 1 {
			main++
			continue
		}
		lr := w.Values["lr"]
		require.Len(t, lr, 2)
		assert.NotEqual(t, lr[0], lr[1], "search window %d: each rank at its own rate", w.Window)
		if len(w.Probe) == 2 && !math.IsNaN(float64(w.Probe[0])) && !math.IsNaN(float64(w.Probe[1])) {
			probed++
		}
	}
	assert.Positive(t, probed, "search windows compared on the evaluation slice (the probe)")
	checkWorkerRun(t, r, 2, main, traceDir)
	starts := metrics.Of[metrics.StartRecord](recs)
	require.NotEmpty(t, starts)
	assert.Equal(t, steps, starts[0].TotalSteps, "the optimizer steps the Trainer takes")
	commits := metrics.Of[metrics.CommitRecord](recs)
	require.Len(t, commits, 1)
	assert.Contains(t, r.stdout, "committed after a search pass of ")
	for _, rec := range metrics.Of[metrics.WindowRecord](recs) {
		for _, e := range rec.Events {
			assert.NotEqual(t, metrics.EventSameData, e.Kind, "replicas trained on the same batches: %s", e.Message)
		}
	}
	saw := trainerLines(t, r.stdout)
	require.Len(t, saw, 4, "each rank's Trainer, in each pass:\n%s", r.stdout)
	for _, s := range saw {
		assert.Equal(t, 1, s.Processes, "rank %d %s: the Trainer's world is one process", s.Rank, s.Pass)
		for _, name := range []string{"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT"} {
			assert.Contains(t, s.Hidden, name, "rank %d %s", s.Rank, s.Pass)
		}
	}
	return commits[0], saw
}

// wantDir is where a process writes what the script asked to write in dir.
func wantDir(dir string, s trainerSaw) string {
	if s.Pass == "main" && s.Rank == 0 {
		return dir
	}
	return filepath.Join(dir, "hdet", s.Pass, fmt.Sprintf("rank-%d", s.Rank))
}

// hdetReport reads <dir>/hdet.json.
func hdetReport(t *testing.T, dir string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "hdet.json"))
	require.NoError(t, err)
	var rep map[string]any
	require.NoError(t, json.Unmarshal(b, &rep))
	return rep
}

// loadsWithoutHdet runs Python code with `import hdet` made to fail.
func loadsWithoutHdet(t *testing.T, code string) {
	t.Helper()
	out, err := exec.Command(testenv.Python, "-c", "import sys; sys.modules['hdet'] = None\n"+code).CombinedOutput()
	require.NoError(t, err, "%s", out)
}

// The Hugging Face Trainer example under mpirun, 2 ranks: trained for 4
// steps without hdet, then resumed under hdet (resume_from_checkpoint=True
// in the same output_dir) to 20 steps, with a GradScaler skipping 2 steps.
func TestIntegrationsHuggingFace(t *testing.T) {
	needPythonModule(t, "transformers")
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	common := []string{"--output-dir", out, "--corpus-bytes", "300000", "--eval-items", "64", "--batch-size", "8",
		"--warmup-steps", "6", "--logging-steps", "2", "--eval-steps", "8", "--save-steps", "2"}
	plainRun(t, dir, "hf_finetune.py", append(common, "--max-steps", "4")...)
	require.DirExists(t, filepath.Join(out, "checkpoint-4"))

	r, traceDir := integrationRun(t, dir, mpirunN(t, 2), []string{"HDET_TEST_SKIP=9,15"}, hfWrapper, "hf_finetune.py",
		append(common, "--max-steps", "20", "--resume", "last")...)
	commit, saw := checkIntegrationRun(t, r, traceDir, 16)
	committed := float64(commit.Committed["lr"].Value)
	for _, s := range saw {
		assert.Equal(t, wantDir(out, s), s.OutputDir, "rank %d %s", s.Rank, s.Pass)
		assert.Equal(t, 4, s.GlobalStep, "rank %d %s: resumed from checkpoint-4", s.Rank, s.Pass)
		assert.Contains(t, s.Hidden, "OMPI_COMM_WORLD_SIZE", "rank %d %s", s.Rank, s.Pass)
	}
	// Each process's checkpoints in its own folder; the search pass's never
	// where the main pass resumes from.
	entries, err := os.ReadDir(out)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	for _, want := range []string{"checkpoint-4", "checkpoint-20", "hdet", "hdet.json", "model.safetensors"} {
		assert.Contains(t, names, want)
	}
	assert.DirExists(t, filepath.Join(out, "hdet", "main", "rank-1", "checkpoint-20"))
	for rank := range 2 {
		search, _ := filepath.Glob(filepath.Join(out, "hdet", "search", fmt.Sprintf("rank-%d", rank), "checkpoint-*"))
		assert.NotEmpty(t, search, "rank %d: the search pass's checkpoints", rank)
	}

	rep := hdetReport(t, out)
	assert.Equal(t, "main", rep["pass"])
	assert.InDelta(t, committed, rep["lr_multiplier"], 1e-12)
	assert.InDelta(t, committed*1e-3, rep["lr"], 1e-12, "the learning_rate the commit gives")
	assert.EqualValues(t, 2, rep["skipped_steps"], "the GradScaler's two skips")

	// The Trainer's own logs carry hdet's values beside the loss.
	b, err := os.ReadFile(filepath.Join(out, "checkpoint-20", "trainer_state.json"))
	require.NoError(t, err)
	var state struct {
		GlobalStep int              `json:"global_step"`
		LogHistory []map[string]any `json:"log_history"`
	}
	// Python's JSON: a skipped step's grad_norm is Infinity.
	b = []byte(strings.NewReplacer("-Infinity", "null", "Infinity", "null", "NaN", "null").Replace(string(b)))
	require.NoError(t, json.Unmarshal(b, &state))
	assert.Equal(t, 20, state.GlobalStep, "every step the Trainer counted, the skipped ones too")
	besideLoss := 0
	for _, h := range state.LogHistory {
		if _, ok := h["loss"]; ok {
			if m, ok := h["hdet/committed_lr_multiplier"]; ok {
				besideLoss++
				assert.InDelta(t, committed, m, 1e-12)
			}
		}
	}
	assert.Positive(t, besideLoss, "training logs with hdet's values")

	ck := filepath.Join(out, "checkpoint-20")
	loadsWithoutHdet(t, fmt.Sprintf(`import torch, transformers
torch.load(%q, weights_only=True); torch.load(%q, weights_only=True); torch.load(%q, weights_only=False)
transformers.GPT2LMHeadModel.from_pretrained(%q)`, filepath.Join(ck, "optimizer.pt"), filepath.Join(ck, "scheduler.pt"),
		filepath.Join(ck, "training_args.bin"), ck))
}

func testdataScript(t *testing.T, name string) string {
	return filepath.Join(repoRoot(t), "tests", "testdata", name)
}

// A Trainer script that builds its TrainingArguments before it imports the
// callback (tests/testdata/hf_regression.py), under mpirun, 2 ranks: the
// arguments make accelerate set up a torch.distributed world of both
// ranks, which the callback takes apart; each replica then trains alone.
func TestIntegrationsHuggingFaceArgumentsFirst(t *testing.T) {
	needPythonModule(t, "transformers")
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	r, traceDir := workerScriptRun(t, dir, mpirunN(t, 2), nil, testdataScript(t, "hf_regression.py"),
		"--output-dir", out, "--max-steps", "32", "--window", "4") // a search pass of two windows, the first probed
	_, saw := checkIntegrationRun(t, r, traceDir, 32)
	for _, s := range saw {
		assert.True(t, s.WorldBeforeImport, "rank %d %s: accelerate had set up its world before the import", s.Rank, s.Pass)
		assert.Zero(t, s.TorchWorld, "rank %d %s: no torch.distributed world left", s.Rank, s.Pass)
		assert.Equal(t, wantDir(out, s), s.OutputDir, "rank %d %s", s.Rank, s.Pass)
	}
	assert.FileExists(t, filepath.Join(out, "hdet.json"))
}

// checkLightningFolders: each process's logs and checkpoints in its own
// folder, hdet's values in the main pass's metrics.csv, hdet.json, and the
// last checkpoint loading without hdet.
func checkLightningFolders(t *testing.T, root string, saw []trainerSaw, committed float64) {
	t.Helper()
	for _, s := range saw {
		assert.Equal(t, "SingleDeviceStrategy", s.Strategy, "rank %d %s", s.Rank, s.Pass)
		assert.Equal(t, "LightningEnvironment", s.Cluster, "rank %d %s: no SLURM, MPI or TorchElastic environment", s.Rank, s.Pass)
		assert.Zero(t, s.RankZero, "rank %d %s: every replica is rank zero", s.Rank, s.Pass)
		assert.True(t, strings.HasPrefix(s.LogDir, wantDir(root, s)+string(filepath.Separator)), "rank %d %s: %s", s.Rank, s.Pass, s.LogDir)
		if s.Pass == "search" || s.Rank != 0 {
			assert.Contains(t, s.LogDir, filepath.Join("hdet", s.Pass), "rank %d %s", s.Rank, s.Pass)
		}
	}
	logs, _ := filepath.Glob(filepath.Join(root, "lightning_logs", "version_*"))
	require.Len(t, logs, 1, "only the main pass's rank 0 writes where the script asked")
	b, err := os.ReadFile(filepath.Join(logs[0], "metrics.csv"))
	require.NoError(t, err)
	header, _, _ := strings.Cut(string(b), "\n")
	for _, col := range []string{"hdet/lr", "hdet/lr_multiplier", "hdet/committed_lr_multiplier", "train_loss"} {
		assert.Contains(t, strings.Split(header, ","), col)
	}
	rep := hdetReport(t, root)
	assert.InDelta(t, committed, rep["lr_multiplier"], 1e-12)
	last := filepath.Join(logs[0], "checkpoints", "last.ckpt")
	loadsWithoutHdet(t, fmt.Sprintf("import torch\nck = torch.load(%q, weights_only=False)\nassert 'net.0.weight' in ck['state_dict']", last))
}

var lightningArgs = []string{"--train-size", "1024", "--save-every", "4", "--log-every", "2", "--no-progress-bar"}

// The Lightning example under mpirun, 2 ranks, resuming (ckpt_path) at
// step 8 of a fit that ran without hdet, to 24 steps.
func TestIntegrationsLightning(t *testing.T) {
	needPythonModule(t, "lightning")
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain")
	plainRun(t, dir, "lightning_train.py", append([]string{"--root", plain, "--max-steps", "24"}, lightningArgs...)...)
	ckpt := filepath.Join(plain, "lightning_logs", "version_0", "checkpoints", "epoch=0-step=8.ckpt")
	require.FileExists(t, ckpt)

	root := filepath.Join(dir, "out")
	r, traceDir := integrationRun(t, dir, mpirunN(t, 2), nil, lightningWrapper, "lightning_train.py",
		append([]string{"--root", root, "--max-steps", "24", "--ckpt-path", ckpt}, lightningArgs...)...)
	commit, saw := checkIntegrationRun(t, r, traceDir, 16)
	for _, s := range saw {
		assert.Equal(t, 8, s.GlobalStep, "rank %d %s: resumed at step 8", s.Rank, s.Pass)
		assert.Contains(t, s.Hidden, "OMPI_COMM_WORLD_SIZE", "rank %d %s", s.Rank, s.Pass)
	}
	checkLightningFolders(t, root, saw, float64(commit.Committed["lr"].Value))
}

// The Lightning example under srun --mpi=pmix on the one-node test cluster:
// Lightning must not take the job step for its own (SLURMEnvironment).
func TestIntegrationsLightningSrun(t *testing.T) {
	needPythonModule(t, "lightning")
	c := startSlurm(t)
	dir := t.TempDir()
	root := filepath.Join(dir, "out")
	srun := func(ctx context.Context, args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, "srun", append([]string{"--mpi=pmix", "-n", "2"}, args...)...)
		cmd.Env = slices.Clone(c.env)
		cmd.WaitDelay = 10 * time.Second
		return cmd
	}
	r, traceDir := integrationRun(t, dir, srun, nil, lightningWrapper, "lightning_train.py",
		append([]string{"--root", root, "--max-steps", "16"}, lightningArgs...)...)
	commit, saw := checkIntegrationRun(t, r, traceDir, 16)
	for _, s := range saw {
		for _, name := range []string{"SLURM_PROCID", "SLURM_NTASKS", "PMIX_RANK"} {
			assert.Contains(t, s.Hidden, name, "rank %d %s", s.Rank, s.Pass)
		}
	}
	checkLightningFolders(t, root, saw, float64(commit.Committed["lr"].Value))
}

// resumeWant is what a stopped and resumed run must end with: the
// uninterrupted run's checksum and windows; search is its search pass's
// length.
type resumeWant struct {
	checksum string
	windows  []string
	search   int
}

// uninterrupted reads resumeWant from the uninterrupted run ref of total
// steps, which must commit after its first window.
func uninterrupted(t *testing.T, ref hdetRun, total int) resumeWant {
	t.Helper()
	require.NoError(t, ref.err, "stdout:\n%s\nstderr:\n%s", ref.stdout, ref.stderr)
	l := workerLaunch{runDir: ref.dir}
	w := resumeWant{ref.end(t).Checksum, l.windows(t), searchEnd(t, l)}
	require.Greater(t, w.search, 4, "the search pass lasts past its first window: %v", w.windows)
	require.Less(t, w.search, total, "the run committed: %v", w.windows)
	return w
}

// stops is where the callback resume tests stop a run (both callbacks'
// windows are 4 steps): in the search pass's first window, in its last (so
// that the relaunch commits), and in the main pass's third.
func (w resumeWant) stops() []position {
	return []position{{"search", 1}, {"search", w.search - 3}, {"main", 9}}
}

func (w resumeWant) check(t *testing.T, l workerLaunch) {
	t.Helper()
	assert.Equal(t, w.checksum, l.end(t).Checksum, "the final parameters are the uninterrupted run's")
	assert.Equal(t, w.windows, l.windows(t), "metrics.jsonl holds each window and the commit once")
}

// stoppedIntegration launches script (mpirun, resumeRanks, into dir) once
// with STOP_AT at each of stops, each stopped by the signal (exit 3), then
// once more to its end, every time the same command; record is the
// script's --record folder. It checks what each launch trained (the steps
// left, from the last window end both hdet and the trainer saved) and
// returns the launches' wall times.
func stoppedIntegration(t *testing.T, dir, record string, script []string, stops []position, search int,
	total int) []time.Duration {
	t.Helper()
	l := workerLaunch{runDir: filepath.Join(dir, "run"), record: record}
	from, seen := position{"search", 0}, make([]int, resumeRanks(t))
	var walls []time.Duration
	for i := 0; i <= len(stops); i++ {
		to, env, wantCode := position{"main", total}, []string(nil), 0
		if i < len(stops) {
			env, wantCode = []string{"STOP_AT=" + stops[i].pass + ":" + fmt.Sprint(stops[i].step)}, 3
		}
		start := time.Now()
		r, _ := workerScriptRun(t, dir, mpirunN(t, len(seen)), env, script...)
		walls = append(walls, time.Since(start))
		code := 0
		if r.err != nil {
			var ee *exec.ExitError
			require.ErrorAs(t, r.err, &ee, "launch %d", i+1)
			code = ee.ExitCode()
		}
		require.Equal(t, wantCode, code, "launch %d:\nstdout:\n%s\nstderr:\n%s", i+1, r.stdout, r.stderr)
		if i > 0 {
			assert.Contains(t, r.stdout+r.stderr, "resuming from checkpoint", "launch %d", i+1)
		}
		from = l.checkLaunch(t, i, stops, from, to, seen, search)
	}
	return walls
}

// The Hugging Face Trainer (tests/testdata/hf_regression.py: dropout,
// save_steps of its own, resume_from_checkpoint=True when its output_dir
// holds a checkpoint) under mpirun (resumeRanks), launched again with the
// same command after each stop: the final parameters are the uninterrupted
// run's and metrics.jsonl holds each window once. "signals": SIGUSR1 in
// the search pass, at the commit, then in the main pass; each launch
// trains only what was left, and the main pass's checkpoints load without
// hdet. "kill": rank 0's
// script is killed in the main pass after the Trainer's save_steps
// checkpoint 6 of both passes; hdet's last checkpoint is the search pass's
// first window end (step 4), where the relaunch resumes: it moves the
// search pass's checkpoint-6 aside, and the main pass's of the killed
// launch when it starts that pass afresh.
func TestIntegrationsHuggingFaceResumes(t *testing.T) {
	needPythonModule(t, "transformers")
	const total = 32
	args := func(dir string) []string {
		return []string{testdataScript(t, "hf_regression.py"), "--output-dir", filepath.Join(dir, "out"),
			"--max-steps", fmt.Sprint(total), "--window", "4", "--save-steps", "6", "--dropout", "0.1",
			"--resume", "auto", "--record", filepath.Join(dir, "record")}
	}
	refDir := t.TempDir()
	start := time.Now()
	ref, _ := workerScriptRun(t, refDir, mpirunN(t, resumeRanks(t)), nil, args(refDir)...)
	t.Logf("uninterrupted: %.1f s", time.Since(start).Seconds())
	want := uninterrupted(t, ref, total)

	t.Run("signals", func(t *testing.T) {
		dir := t.TempDir()
		walls := stoppedIntegration(t, dir, filepath.Join(dir, "record"), args(dir), want.stops(), want.search, total)
		t.Logf("stopped in the search pass, at the commit, in the main pass, to the end: %v", walls)
		want.check(t, workerLaunch{runDir: filepath.Join(dir, "run")})
		ck := filepath.Join(dir, "out", fmt.Sprintf("checkpoint-%d", total))
		require.DirExists(t, ck)
		loadsWithoutHdet(t, fmt.Sprintf(`import torch
torch.load(%q, weights_only=True); torch.load(%q, weights_only=True); torch.load(%q, weights_only=False)`,
			filepath.Join(ck, "optimizer.pt"), filepath.Join(ck, "scheduler.pt"), filepath.Join(ck, "training_args.bin")))
	})
	t.Run("kill", func(t *testing.T) {
		dir := t.TempDir()
		r, _ := workerScriptRun(t, dir, mpirunN(t, resumeRanks(t)), []string{"KILL_AT=main:9"}, args(dir)...)
		require.Error(t, r.err, "the killed launch fails")
		l := workerLaunch{runDir: filepath.Join(dir, "run")}
		assert.Equal(t, position{"search", 4}, l.checkpoint(t), "hdet's last checkpoint: the search pass's first window end")
		out := filepath.Join(dir, "out")
		require.DirExists(t, filepath.Join(out, "checkpoint-6"), "the Trainer's own, after hdet's")
		r, _ = workerScriptRun(t, dir, mpirunN(t, resumeRanks(t)), nil, args(dir)...)
		require.NoError(t, r.err, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
		assert.Contains(t, r.stderr, "checkpoint-6, saved after the step hdet resumes at")
		for _, d := range []string{filepath.Join(out, "hdet", "search", "rank-0"), filepath.Join(out, "hdet", "search", "rank-1"),
			out, filepath.Join(out, "hdet", "main", "rank-1")} {
			assert.DirExists(t, filepath.Join(d, "hdet-superseded", "checkpoint-6"))
		}
		want.check(t, l)
	})
}

// A Lightning script that resumes itself (tests/testdata/lightning_resume.py:
// dropout, a ModelCheckpoint with save_last in a fixed folder,
// fit(ckpt_path="last") every launch) under mpirun (resumeRanks), stopped
// by SIGUSR1 in the search pass, at the commit and in the main pass,
// launched again each time with the same command: the final parameters are
// the uninterrupted run's, each launch trains only what was left, and
// metrics.jsonl holds each window once. The main pass's last checkpoint loads without hdet.
func TestIntegrationsLightningResumes(t *testing.T) {
	needPythonModule(t, "lightning")
	const total = 32
	args := func(dir string) []string {
		return []string{testdataScript(t, "lightning_resume.py"), "--root", filepath.Join(dir, "out"),
			"--max-steps", fmt.Sprint(total), "--record", filepath.Join(dir, "record")}
	}
	refDir := t.TempDir()
	ref, _ := workerScriptRun(t, refDir, mpirunN(t, resumeRanks(t)), nil, args(refDir)...)
	want := uninterrupted(t, ref, total)

	dir := t.TempDir()
	walls := stoppedIntegration(t, dir, filepath.Join(dir, "record"), args(dir), want.stops(), want.search, total)
	t.Logf("stopped in the search pass, at the commit, in the main pass, to the end: %v", walls)
	want.check(t, workerLaunch{runDir: filepath.Join(dir, "run")})
	last := filepath.Join(dir, "out", "ckpts", "last.ckpt")
	loadsWithoutHdet(t, fmt.Sprintf("import torch\nck = torch.load(%q, weights_only=False)\nassert ck['global_step'] == %d, ck['global_step']\nassert 'net.0.weight' in ck['state_dict']", last, total-total%6))
}
