package tests

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hdet-dev/hdet/internal/testenv"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/internal/bridge"
	"github.com/hdet-dev/hdet/internal/metrics"
	"github.com/hdet-dev/hdet/internal/plan"
)

// runWorker runs `mpirun -np n hdet run [CFG] --worker -- PYTHON SCRIPT
// ARGS` (no config when cfg is empty), PYTHON the venv's (testenv.Python),
// with HDET_TRACE_DIR set, so each rank's worker logs what it loaded and
// applied. started, if not nil, runs once the command has started, with
// the trace folder and the command.
func runWorker(t testing.TB, n int, cfg string, started func(traceDir string, cmd *exec.Cmd), script string, args ...string) hdetRun {
	t.Helper()
	testenv.NeedTorch(t)
	return runWorkerWith(t, n, cfg, started, testenv.Python, script, args...)
}

// runWorkerWith is runWorker with the interpreter python.
func runWorkerWith(t testing.TB, n int, cfg string, started func(traceDir string, cmd *exec.Cmd), python, script string, args ...string) hdetRun {
	t.Helper()
	return runWorkerFlags(t, n, cfg, nil, started, python, script, args...)
}

// runWorkerFlags is runWorkerWith with hdet run's flags.
func runWorkerFlags(t testing.TB, n int, cfg string, flags []string, started func(traceDir string, cmd *exec.Cmd), python, script string, args ...string) hdetRun {
	t.Helper()
	hdet, plugins := hdetBinaries(t)
	dir := t.TempDir()
	runDir, traceDir := filepath.Join(dir, "run"), filepath.Join(dir, "trace")
	require.NoError(t, os.Mkdir(traceDir, 0o755))
	full := []string{hdet, "run"}
	if cfg != "" {
		path := filepath.Join(dir, "config.in.yaml")
		require.NoError(t, os.WriteFile(path, []byte(cfg), 0o644))
		full = append(full, path)
	}
	full = append(append(append(full, flags...), "--run-dir", runDir, "--plugin-dir", plugins, "--progress", "none", "--worker", "--", python, script), args...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	before := shmEntries(t)
	cmd := mpirunCmd(ctx, t, n, full...)
	cmd.Env = append(cmd.Env, "HDET_TRACE_DIR="+traceDir)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	require.NoError(t, cmd.Start())
	if started != nil {
		started(traceDir, cmd)
	}
	err := cmd.Wait()
	assert.Empty(t, newHdetEntries(before, shmEntries(t)), "the run left files in /dev/shm")
	return hdetRun{dir: runDir, stdout: out.String(), stderr: errb.String(), err: err}
}

func shmEntries(t testing.TB) []string {
	entries, err := os.ReadDir("/dev/shm")
	if err != nil {
		return nil // no /dev/shm: nothing to leave there
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// newHdetEntries are hdet's files in after that were not in before.
func newHdetEntries(before, after []string) []string {
	var out []string
	for _, n := range after {
		if strings.Contains(n, "hdet") && !slices.Contains(before, n) {
			out = append(out, n)
		}
	}
	return out
}

func examplePath(t testing.TB, name string) string {
	return filepath.Join(repoRoot(t), "examples", "pytorch", name)
}

// workerScript is the bridge's small test worker.
func workerScript(t testing.TB) string {
	return filepath.Join(repoRoot(t), "internal", "bridge", "testdata", "worker.py")
}

// traceRecord is one line of a worker's HDET_TRACE_DIR log (python/hdet/_session.py).
type traceRecord struct {
	Event   string               `json:"event"`
	PID     int                  `json:"pid"`
	Before  string               `json:"before"`
	Window  int                  `json:"window"`
	SHA     string               `json:"params_sha256"`
	Sum     float64              `json:"params_sum"` // done, load: the sum of the buffer's parameters
	Applied map[string][]float64 `json:"applied"`    // done: each planned value at each step (lr's: multipliers)
	BaseLR  []float64            `json:"base_lr"`    // done: the script's own rate of group 0 at each step
}

func readTrace(t testing.TB, dir string, rank int) []traceRecord {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "trace-rank"+strconv.Itoa(rank)+".jsonl"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var recs []traceRecord
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r traceRecord
		if json.Unmarshal(sc.Bytes(), &r) == nil { // a line being written is skipped
			recs = append(recs, r)
		}
	}
	return recs
}

// checkWorkerRun asserts what every mode must give: windows recorded (the
// search pass's, then mainWindows of the main pass, the script started
// again for it), loss falling, the same parameters on every rank after
// each converge, and each rank applying the values metrics.jsonl says it
// got, in each pass.
func checkWorkerRun(t *testing.T, r hdetRun, n, mainWindows int, traceDir string) {
	t.Helper()
	require.NoError(t, r.err, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	if metrics.Of[metrics.StartRecord](r.records(t))[0].SyncMode == "gradients" {
		// Nothing to average: the main pass hands over at the default
		// checkpoints only, every 10 windows (session.mainWindow).
		mainWindows = (mainWindows + 9) / 10
	}
	passes := make([][]metrics.WindowRecord, 2)
	for _, rec := range r.windows(t) {
		passes[rec.Pass] = append(passes[rec.Pass], rec)
	}
	require.NotEmpty(t, passes[0], "search windows")
	require.Len(t, passes[1], mainWindows, "main-pass windows")
	mean := func(rec metrics.WindowRecord) float64 {
		s := 0.0
		for _, l := range rec.Losses {
			s += float64(l)
		}
		return s / float64(len(rec.Losses))
	}
	assert.Less(t, mean(passes[1][mainWindows-1]), mean(passes[0][0]), "the loss falls")
	for _, pass := range passes {
		checkHandoverTiming(t, pass)
	}
	procs := make([][]workerTrace, n)
	for rank := range n {
		procs[rank] = workerProcesses(readTrace(t, traceDir, rank))
		require.Len(t, procs[rank], 2, "rank %d: the script ran the search pass, then again the main pass", rank)
		for p, tr := range procs[rank] {
			checkWorkerPass(t, rank, tr, passes[p], p == 1)
		}
	}
	for p := range passes {
		for rank := 1; rank < n; rank++ {
			for k := 1; k < len(procs[0][p].loads); k++ {
				assert.Equal(t, procs[0][p].loads[k], procs[rank][p].loads[k], "rank %d parameters after converge %d of pass %d", rank, k-1, p)
			}
		}
	}
}

// checkHandoverTiming: every window record of a pass says where rank 0's
// hand-over went (docs/performance.md); a window after the pass's first
// also has the previous DONE's write, the wait for this PLAN and the PLAN's
// copy back. In the search pass, whose plan needs the window's losses, the
// DONE's send and the wait hold hdet's plan; the main pass's plan is ready before the DONE
// (prefetched: CI saw waits of 0.06 ms against plans of 0.2 ms), so its
// PLAN may wait in the socket, and the client caps that trip at the wait.
func checkHandoverTiming(t *testing.T, pass []metrics.WindowRecord) {
	t.Helper()
	for i, rec := range pass {
		h := rec.HandoverSeconds
		want := []string{"copy_out", "socket"}
		if i > 0 {
			want = append(want, "send", "wait", "plan_socket", "load")
		}
		for _, k := range want {
			if assert.Contains(t, h, k, "pass %d window %d: handover_seconds %v", rec.Pass, rec.Window, h) {
				assert.True(t, h[k] >= 0 && h[k] < 600, "pass %d window %d: %s = %v s", rec.Pass, rec.Window, k, h[k])
			}
		}
		if i > 0 && rec.Pass == plan.PassSearch {
			// From the DONE's first byte to the PLAN: the client can be
			// descheduled between its send and its clock read while hdet
			// plans (CI: a wait of 0.12 ms against a plan of 0.93 ms), so
			// only send+wait is sure to hold the plan.
			assert.GreaterOrEqual(t, h["send"]+h["wait"], rec.PlanSeconds, "pass %d window %d: the send and the wait hold hdet's plan", rec.Pass, rec.Window)
		}
		assert.Positive(t, rec.GatherSeconds, "pass %d window %d: gather timed", rec.Pass, rec.Window)
		assert.LessOrEqual(t, rec.GatherSeconds, rec.ConvergeSeconds, "pass %d window %d: the gather is part of converge_seconds", rec.Pass, rec.Window)
	}
}

// workerTrace is one worker process's trace: the parameters' hash at each
// load (before a PLAN or at STOP) and its DONE records.
type workerTrace struct {
	loads   []string
	applied []traceRecord
}

// workerProcesses splits a rank's trace by process (a "start" record each).
func workerProcesses(recs []traceRecord) []workerTrace {
	var out []workerTrace
	for _, rec := range recs {
		switch {
		case rec.Event == "start":
			out = append(out, workerTrace{})
		case len(out) == 0:
		case rec.Event == "load" && rec.Before != "eval":
			out[len(out)-1].loads = append(out[len(out)-1].loads, rec.SHA)
		case rec.Event == "done":
			out[len(out)-1].applied = append(out[len(out)-1].applied, rec)
		}
	}
	return out
}

// checkWorkerPass compares one process's trace with its pass's windows: a
// load before every PLAN (and one at STOP for the last process, which
// finishes the run), and the values applied at each window's last step.
func checkWorkerPass(t *testing.T, rank int, tr workerTrace, wins []metrics.WindowRecord, last bool) {
	t.Helper()
	loads := len(wins)
	if last {
		loads++
	}
	require.Len(t, tr.loads, loads, "rank %d loads", rank)
	require.Len(t, tr.applied, len(wins), "rank %d windows", rank)
	for k, w := range wins {
		for name, perRank := range w.Values {
			got := tr.applied[k].Applied[name]
			require.NotEmpty(t, got, "rank %d window %d applied no %s", rank, k, name)
			want := float64(perRank[rank])
			if w.Anneal && hparam.IsLR(name) {
				want = 0 // the record has the planned value, the anneal took it to 0
			}
			assert.Equal(t, want, got[len(got)-1], "rank %d window %d: %s at the last step", rank, k, name)
		}
	}
}

// assertMainPassAtCommitted checks a restart run's main pass against its
// commit record: every rank at the same learning rate at every window, and
// the schedule's peak at the committed max_lr.
func assertMainPassAtCommitted(t *testing.T, r hdetRun) {
	t.Helper()
	recs := r.records(t)
	commits := metrics.Of[metrics.CommitRecord](recs)
	require.Len(t, commits, 1, "one commit")
	want := float64(commits[0].Committed["lr"].Value)
	peak := 0.0
	for _, rec := range metrics.Of[metrics.WindowRecord](recs) {
		if rec.Pass != 1 {
			continue
		}
		assert.Zero(t, spreadOf(rec.Values["lr"]), "main window %d: no spread", rec.Window)
		for _, b := range rec.BaseSteps["lr"] {
			peak = max(peak, float64(b))
		}
	}
	assert.InDelta(t, want, peak, 1e-12*want, "the main pass runs at the committed multiplier")
}

// mainWindows is the number of windows of a pass of steps steps in windows
// of window steps (the last one may be shorter).
func mainWindows(steps, window int) int { return (steps + window - 1) / window }

// A worker run under auto.commit restart with hdet's default window
// (bridge.DefaultWindow: 9 steps for 300, so that the search pass has 8
// windows): the search pass is the whole windows in the first quarter of
// the run, to the last window boundary at or before step 75 (72); then the
// script is started a second time for the main pass, which trains at the
// committed multiplier.
func TestPyTorchWorkerRestart(t *testing.T) {
	var traceDir string
	r := runWorker(t, 2, "", func(d string, _ *exec.Cmd) { traceDir = d }, workerScript(t), "--steps", "300", "--explore", "lr")
	window := bridge.DefaultWindow(300)
	require.Equal(t, 9, window)
	assert.Equal(t, window, metrics.Of[metrics.StartRecord](r.records(t))[0].WindowSteps)
	checkWorkerRun(t, r, 2, mainWindows(300, window), traceDir)
	assertMainPassAtCommitted(t, r)
	assert.Equal(t, 72, metrics.Of[metrics.CommitRecord](r.records(t))[0].Step, "the search pass ends at the last boundary within a quarter of the run")
	// A move carries its evidence; x1 where the rule kept the script's rate.
	assert.Regexp(t, `committed after a search pass of 72 steps: lr x[0-9.]+: peak lr 0.05 -> [0-9.e-]+ `+
		`\(x(1\)( \(kept: .*\))?|[0-9.]+\) `+shownNote("probe|training")+`)\n`, r.stdout)
}

// convnetArgs: 25600 training images, batch 64, one epoch: 100 steps per
// rank under DDP on 4 ranks; the tests add epochs or change the images.
var convnetArgs = []string{"--train-samples", "25600", "--test-samples", "2000", "--epochs", "1"}

var testAccuracy = regexp.MustCompile(`(\d+) steps in [0-9.]+ s, test loss [0-9.]+, test accuracy ([0-9.]+)`)

// accuracy is the test accuracy the script's rank 0 printed.
func accuracy(t testing.TB, out string) float64 {
	t.Helper()
	m := testAccuracy.FindStringSubmatch(out)
	require.NotNil(t, m, "no test accuracy in:\n%s", out)
	a, err := strconv.ParseFloat(m[2], 64)
	require.NoError(t, err)
	return a
}

var plainDDP struct {
	sync.Mutex
	acc map[string]float64
}

// plainDDPAccuracy runs convnet_ddp.py (torch's OneCycleLR) with
// convnetArgs and then args on 4 processes started as torchrun would
// (Debian's torch 1.13 torchrun fails under Python 3.11), once per
// arguments and test binary.
func plainDDPAccuracy(t *testing.T, args ...string) float64 {
	plainDDP.Lock()
	defer plainDDP.Unlock()
	key := strings.Join(args, " ")
	if a, ok := plainDDP.acc[key]; ok {
		return a
	}
	outs, err := runPlainDDP(t, 4, "convnet_ddp.py", append(slices.Clone(convnetArgs), args...)...)
	require.NoError(t, err, "%s", outs)
	if plainDDP.acc == nil {
		plainDDP.acc = map[string]float64{}
	}
	plainDDP.acc[key] = accuracy(t, outs)
	return plainDDP.acc[key]
}

// runPlainDDP runs script on n processes with torchrun's variables and
// returns rank 0's output.
func runPlainDDP(t testing.TB, n int, script string, args ...string) (string, error) {
	testenv.NeedTorch(t)
	port := strconv.Itoa(29500 + rand.IntN(1000))
	var cmds []*exec.Cmd
	var out bytes.Buffer
	for r := range n {
		c := exec.Command(testenv.Python, append([]string{examplePath(t, script), "--data", mnistDir(t)}, args...)...)
		c.Env = append(os.Environ(), "RANK="+strconv.Itoa(r), "LOCAL_RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(n),
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT="+port)
		if r == 0 {
			c.Stdout, c.Stderr = &out, &out
		}
		if err := c.Start(); err != nil {
			return "", err
		}
		cmds = append(cmds, c)
	}
	var errs []error
	for _, c := range cmds {
		errs = append(errs, c.Wait())
	}
	return out.String(), errors.Join(errs...)
}

// checkConvNet asserts what issues 17 and 14 promise for an ordinary script
// whose only changes are the import line and probe_dataset, run without a
// config file: the controller compares the ranks by their probe losses.
func checkConvNet(t *testing.T, script string, steps int, baseline []string, args ...string) {
	save := filepath.Join(t.TempDir(), "convnet.pt")
	args = append(append([]string{"--data", mnistDir(t), "--save", save}, convnetArgs...), args...)
	var traceDir string
	r := runWorker(t, 4, "", func(d string, _ *exec.Cmd) { traceDir = d }, examplePath(t, script), args...)
	checkWorkerRun(t, r, 4, mainWindows(steps, bridge.DefaultWindow(steps)), traceDir)
	assertMainPassAtCommitted(t, r)
	out := r.stdout + r.stderr

	end := r.end(t)
	assert.Equal(t, steps, end.Step, "the run is the script's schedule")
	distinct := map[metrics.Float]bool{}
	probed := 0
	for _, rec := range r.windows(t) {
		for _, v := range rec.Values["lr"] {
			distinct[v] = true
		}
		if len(rec.Probe) == 4 {
			probed++
		}
	}
	assert.GreaterOrEqual(t, len(distinct), 4, "the ranks applied different learning rates")
	assert.Positive(t, probed, "probe_dataset's losses reached the controller")
	assert.NotContains(t, out, "cannot evaluate probe losses")
	assert.Regexp(t, `\[rank 0\] \d+ steps in`, out, "worker lines carry their rank")
	assert.NotContains(t, out, "NaN")

	acc, plain := accuracy(t, out), plainDDPAccuracy(t, baseline...)
	t.Logf("%s under hdet: test accuracy %.4f; plain DDP (convnet_ddp.py, same max_lr): %.4f", script, acc, plain)
	fmt.Printf("%s under hdet: test accuracy %.4f; plain DDP (convnet_ddp.py, same max_lr): %.4f\n", script, acc, plain)
	assert.GreaterOrEqual(t, acc, plain, "hdet's accuracy against plain DDP at the same max_lr")

	// hdet.OneCycleLR's state_dict, saved under hdet, loads into torch's
	// OneCycleLR in a process that never imports hdet.
	check := exec.Command(testenv.Python, "-c", `import sys, torch
assert "hdet" not in sys.modules
ck = torch.load(sys.argv[1])
m = torch.nn.Linear(1, 1)
o = torch.optim.AdamW(m.parameters())
s = torch.optim.lr_scheduler.OneCycleLR(o, max_lr=3e-3, total_steps=int(sys.argv[2]))
s.load_state_dict(ck["scheduler"])
assert "hdet" not in sys.modules
print("loaded", s.last_epoch, s.get_last_lr()[0])
`, save, strconv.Itoa(steps))
	check.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "PYTHONPATH=") })
	got, err := check.CombinedOutput()
	require.NoError(t, err, "%s", got)
	assert.Regexp(t, fmt.Sprintf(`^loaded %d [0-9.e-]+\n$`, steps), string(got))
}

// convnet_hdet.py is convnet.py with two changed lines (the import and
// probe_dataset): a single-process script, so local mode; every rank
// trains on the whole data.
func TestPyTorchConvNet(t *testing.T) {
	checkConvNet(t, "convnet_hdet.py", 200, nil, "--train-samples", "12800")
}

// convnet_ddp_hdet.py is convnet_ddp.py with the same two lines: DDP, so
// gradients mode; DistributedSampler shards the data by hdet's RANK. Two
// epochs: 200 steps per rank, 4 windows (one epoch, 2 windows, ended at
// 0.9190 against plain DDP's 0.9255).
func TestPyTorchConvNetDDP(t *testing.T) {
	checkConvNet(t, "convnet_ddp_hdet.py", 200, []string{"--epochs", "2"}, "--epochs", "2")
}

// Each way a worker can fail stops the job with a message naming the rank,
// the step and the script's own error, and a non-zero exit.
func TestPyTorchWorkerFailures(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"raises", []string{"--fail-at-step", "60", "--fail-rank", "1"},
			`rank 1: worker \(pid \d+\) training window 1 \(steps 50-99\): worker reported an error: the script raised at step 60 of 100: RuntimeError: worker.py failing on purpose at step 60`},
		{"ends early", []string{"--end-at-step", "70", "--fail-rank", "0"},
			`rank 0: worker \(pid \d+\) training window 1 \(steps 50-99\): worker reported an error: the script ended after 70 of the 100 optimizer steps it gave hdet \(total_steps\) before the run finished`},
		{"steps past the end", []string{"--extra-step"},
			`rank \d: worker \(pid \d+\) finishing after STOP: worker process exited \(exit status 1\)(.|\n)*RuntimeError: hdet: optimizer step 101 is past total_steps=100 given to hdet.attach`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runWorker(t, 2, "", nil, workerScript(t), append([]string{"--steps", "100", "--window", "50", "--explore", "lr"}, tc.args...)...)
			require.Error(t, r.err)
			assert.Regexp(t, tc.want, r.stdout+r.stderr)
		})
	}
}

// A script that crashes on one rank after the run (as torch's teardown
// can) fails the job, exit 1, saying why with the Python stacks, but loses
// none of the run: rank 0 writes model.bin and the report, and no rank is
// aborted.
func TestPyTorchWorkerCrashAfterTheRun(t *testing.T) {
	r := runWorker(t, 2, "", nil, workerScript(t), "--steps", "40", "--window", "10", "--explore", "lr",
		"--abort-after-stop", "--fail-rank", "1")
	var ee *exec.ExitError
	require.ErrorAs(t, r.err, &ee, "%s\n%s", r.stdout, r.stderr)
	assert.Equal(t, 1, ee.ExitCode(), "%s\n%s", r.stdout, r.stderr)
	out := r.stdout + r.stderr
	assert.Regexp(t, `the run finished \(model.bin, metrics.jsonl and the report are in [^)]+\), then the script failed after hdet's STOP: worker: rank 1: worker \(pid \d+\) finishing after STOP: worker process exited \(killed by signal 6 \(aborted\)\)`, out)
	assert.Contains(t, out, "Fatal Python error: Aborted")
	assert.NotContains(t, out, "MPI_ABORT", "no rank is aborted")
	assert.FileExists(t, filepath.Join(r.dir, "model.bin"))
	assert.Contains(t, r.stdout, "report: ")
	assert.FileExists(t, filepath.Join(r.dir, "report", "index.html"))
}

// hdet.attach's arguments change the run: window the window, alpha lr's
// spread, auto lr's auto block (until: the search pass lasts half the
// run), an explore dict weight_decay's base, spread and bounds.
func TestPyTorchWorkerSettings(t *testing.T) {
	r := runWorker(t, 2, "", nil, workerScript(t), "--steps", "100", "--window", "25", "--alpha", "0.2",
		"--auto", `{"until": 0.5}`,
		"--explore", `["lr", {"name": "weight_decay", "base": 0.001, "alpha": 0.0005, "spread": "additive", "lower": 0, "upper": 0.01}]`)
	require.NoError(t, r.err, "%s\n%s", r.stdout, r.stderr)
	recs := r.records(t)
	start := metrics.Of[metrics.StartRecord](recs)[0]
	assert.Equal(t, 25, start.WindowSteps, "window")
	params := map[string]metrics.Param{}
	for _, p := range start.Hyperparameters {
		params[p.Name] = p
	}
	assert.Equal(t, metrics.Param{Name: "lr", Scale: "log", Spread: "multiplicative", Alpha: 0.2, Lower: 1e-4, Upper: 1e4}, params["lr"], "a multiplier's bounds")
	assert.Equal(t, metrics.Param{Name: "weight_decay", Scale: "log", Spread: "additive", Alpha: 0.0005, Lower: 0, Upper: 0.01}, params["weight_decay"])
	wins := metrics.Of[metrics.WindowRecord](recs)
	require.Len(t, wins, 2+4, "a search pass of two 25-step windows (auto until 0.5), then the main pass's four")
	assert.Contains(t, r.stdout, "committed after a search pass of 50 steps: lr ")
	require.Len(t, metrics.Of[metrics.CommitRecord](recs), 1)
	lr, base := slices.Sorted(slices.Values(wins[0].Values["lr"])), float64(wins[0].Base["lr"])
	require.Len(t, lr, 2)
	assert.InDelta(t, 0.8, float64(lr[0])/base, 1e-9, "window 0: the ranks' lr multipliers spread by alpha")
	assert.InDelta(t, 1.2, float64(lr[1])/base, 1e-9)
	wd := slices.Sorted(slices.Values(wins[0].Values["weight_decay"]))
	assert.InDeltaSlice(t, []float64{0.0005, 0.0015}, []float64{float64(wd[0]), float64(wd[1])}, 1e-12, "base 0.001, additive 0.0005")
}

// Where the script and the config disagree, hdet says so and exits 2.
func TestPyTorchWorkerConflicts(t *testing.T) {
	for _, tc := range []struct {
		name, cfg string
		args      []string
		want      string
	}{
		{"lr schedule", "explorers: [{name: lr, plugin: hdet-explorer-lr, config: {schedule: 2}}]", nil,
			`explorers\[0\] \(lr\) schedule disagrees with the script's \(schedule: 2 in the config, 1 in the script\)`},
		{"sync local with DDP", "train: {sync: local}", []string{"--ddp"}, `train.sync is local, but the script set up torch.distributed`},
		{"window", "train: {window: 50}", []string{"--window", "25"}, `train.window is 50, but the script's hdet.attach has window 25`},
		{"alpha", "explorers: [{name: lr, plugin: hdet-explorer-lr, config: {spread: {alpha: 0.3}}}]", []string{"--alpha", "0.2"},
			`explorers\[0\] \(lr\) settings disagree with the script's hdet.attach arguments \(spread.alpha: 0.3 in the config, 0.2 in the script\)`},
		{"auto range", "", []string{"--auto", `{"until": 2}`},
			`auto.until: must be a fraction of the run in \(0, 1\], got 2 \(the script's hdet.attach arguments are part of it`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runWorker(t, 2, tc.cfg, nil, workerScript(t), append([]string{"--steps", "100", "--explore", "lr"}, tc.args...)...)
			require.Error(t, r.err)
			var ee *exec.ExitError
			require.ErrorAs(t, r.err, &ee)
			assert.Equal(t, 2, ee.ExitCode(), "%s\n%s", r.stdout, r.stderr)
			assert.Regexp(t, tc.want, r.stdout+r.stderr)
		})
	}
	// override: true makes the config's schedule (the multiplier's base)
	// win, and says so.
	r := runWorker(t, 2, "explorers: [{name: lr, plugin: hdet-explorer-lr, override: true, config: {schedule: 2}}]", nil,
		workerScript(t), "--steps", "100", "--explore", "lr")
	require.NoError(t, r.err, "%s\n%s", r.stdout, r.stderr)
	assert.Contains(t, r.stdout+r.stderr, "overrides the script's hdet.attach settings (override: true): schedule: 2 in the config, 1 in the script")
}

// A signal makes a worker run checkpoint and exit 3, as a built-in run does.
func TestPyTorchWorkerSignal(t *testing.T) {
	r := runWorker(t, 2, "", func(traceDir string, cmd *exec.Cmd) {
		waitForDone(t, traceDir, 0, 1)
		require.NoError(t, cmd.Process.Signal(syscall.SIGUSR1)) // mpirun forwards it to every rank
	}, workerScript(t), "--steps", "2000", "--explore", "lr", "--sleep", "0.01")
	var ee *exec.ExitError
	require.ErrorAs(t, r.err, &ee)
	assert.Equal(t, 3, ee.ExitCode(), "%s\n%s", r.stdout, r.stderr)
	assert.Contains(t, r.stdout+r.stderr, "stopped by a signal after checkpointing")
	cks, _ := filepath.Glob(filepath.Join(r.dir, "checkpoints", "*"))
	assert.NotEmpty(t, cks, "a checkpoint was written")
}

// waitForDone waits until rank's worker has reported windows windows.
func waitForDone(t testing.TB, traceDir string, rank, windows int) []traceRecord {
	deadline := time.Now().Add(2 * time.Minute) // a window takes seconds; a dead job must not hold CI for long
	for time.Now().Before(deadline) {
		recs := readTrace(t, traceDir, rank)
		done := 0
		for _, rec := range recs {
			if rec.Event == "done" {
				done++
			}
		}
		if done >= windows {
			return recs
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("rank %d's worker never finished %d windows", rank, windows)
	return nil
}

// A worker killed mid-run stops the job with a message naming the rank and
// the signal.
func TestPyTorchWorkerKilled(t *testing.T) {
	r := runWorker(t, 2, "", func(traceDir string, _ *exec.Cmd) {
		recs := waitForDone(t, traceDir, 1, 1) // killed inside its second window
		require.NoError(t, syscall.Kill(recs[0].PID, syscall.SIGKILL))
	}, workerScript(t), "--steps", "2000", "--explore", "lr", "--sleep", "0.01")
	require.Error(t, r.err)
	assert.Regexp(t, regexp.MustCompile(`rank 1: worker \(pid \d+\) training window \d+ \(steps \d+-\d+\): worker process exited \(killed by signal 9`), r.stdout+r.stderr)
}

// Outside hdet, the _hdet variants are the plain scripts: the same output.
func TestPyTorchExampleOutsideHdetIsOneCycleLR(t *testing.T) {
	testenv.NeedTorch(t)
	run := func(script string) string {
		cmd := exec.Command(testenv.Python, examplePath(t, script), "--data", mnistDir(t), "--train-samples", "1280", "--test-samples", "500")
		cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(repoRoot(t), "python"))
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		return regexp.MustCompile(`in [0-9.]+ s`).ReplaceAllString(string(out), "in T s")
	}
	plain, hdet := run("convnet.py"), run("convnet_hdet.py")
	assert.Contains(t, plain, "test accuracy")
	assert.Equal(t, plain, hdet)
}

// BenchmarkPyTorchOverhead compares the DDP example's training-loop time
// under hdet (gradients mode, T = 100) with the plain script under DDP, 4
// processes, same steps, interleaved: each iteration runs one of each.
// Reported: the training loop's wall time as rank 0's script prints it.
func BenchmarkPyTorchOverhead(b *testing.B) {
	args := []string{"--train-samples", "51200", "--test-samples", "500", "--epochs", "1"}
	var plainLoop, hdetLoop, exchange []float64
	loopSeconds := regexp.MustCompile(`(\d+) steps in ([0-9.]+) s`)
	seconds := func(out string) float64 {
		m := loopSeconds.FindStringSubmatch(out)
		require.NotNil(b, m, "%s", out)
		v, _ := strconv.ParseFloat(m[2], 64)
		return v
	}
	for b.Loop() {
		out, err := runPlainDDP(b, 4, "convnet_ddp.py", append([]string{}, args...)...)
		require.NoError(b, err, "%s", out)
		plainLoop = append(plainLoop, seconds(out))
		var traceDir string
		r := runWorker(b, 4, "train: {window: 100}", func(d string, _ *exec.Cmd) { traceDir = d },
			examplePath(b, "convnet_ddp_hdet.py"), append([]string{"--data", mnistDir(b)}, args...)...)
		require.NoError(b, r.err, "%s\n%s", r.stdout, r.stderr)
		hdetLoop = append(hdetLoop, seconds(r.stdout))
		send, wait, windows := exchangeSeconds(b, traceDir)
		b.Logf("hdet rank 0's exchange: %d windows, %.1f ms handing over + %.1f ms waiting for the plan per window",
			windows, 1e3*send/float64(windows), 1e3*wait/float64(windows))
		exchange = append(exchange, (send+wait)/hdetLoop[len(hdetLoop)-1])
	}
	// The quietest pairs (smallest plain + hdet time): the machine's noise
	// only ever adds time, and interleaving exposes both sides to the same.
	pairs := make([]int, len(plainLoop))
	for i := range pairs {
		pairs[i] = i
		b.Logf("pair %d: plain %.2f s, hdet %.2f s, overhead %+.1f%%", i, plainLoop[i], hdetLoop[i], 100*(hdetLoop[i]/plainLoop[i]-1))
	}
	slices.SortFunc(pairs, func(i, j int) int {
		return cmp.Compare(plainLoop[i]+hdetLoop[i], plainLoop[j]+hdetLoop[j])
	})
	quiet := pairs[:min(len(pairs), max(3, len(pairs)/2))]
	var ratios []float64
	for _, i := range quiet {
		ratios = append(ratios, hdetLoop[i]/plainLoop[i]-1)
	}
	slices.Sort(ratios)
	b.ReportMetric(float64(len(ratios)), "quiet-pairs")
	b.ReportMetric(100*ratios[len(ratios)/2], "loop-overhead-median-%")
	b.ReportMetric(100*ratios[0], "loop-overhead-min-%")
	b.ReportMetric(100*ratios[len(ratios)-1], "loop-overhead-max-%")
	b.ReportMetric(plainLoop[quiet[0]], "plain-loop-s")
	b.ReportMetric(hdetLoop[quiet[0]], "hdet-loop-s")
	slices.Sort(exchange)
	b.ReportMetric(100*exchange[len(exchange)/2], "exchange-%-of-hdet-loop")
}

// exchangeSeconds sums rank 0's window exchanges (python/hdet traces them):
// handing the parameters over and reporting, then waiting for the next plan.
func exchangeSeconds(t testing.TB, traceDir string) (send, wait float64, windows int) {
	f, err := os.Open(filepath.Join(traceDir, "trace-rank0.jsonl"))
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r struct {
			Event string
			Send  float64 `json:"send_s"`
			Wait  float64 `json:"wait_s"`
		}
		if json.Unmarshal(sc.Bytes(), &r) != nil || r.Event != "exchange" {
			continue
		}
		send, wait, windows = send+r.Send, wait+r.Wait, windows+1
	}
	require.NotZero(t, windows, "no exchange traced")
	return send, wait, windows
}
