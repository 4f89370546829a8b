package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hdet-dev/hdet/internal/testenv"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/metrics"
)

// workerConfig is the run configuration of the PyTorch example: the lr
// explorer follows the script's own OneCycleLR (max_lr 0.1), dropout is
// explored around the script's 0.2.
func workerConfig(sync string, window int) string {
	return `
train: {steps: 60, window: ` + strconv.Itoa(window) + `, seed: 7, sync: ` + sync + `}
run: {progress: none, checkpoint_every: 0}
explorers:
  - name: lr
    plugin: hdet-explorer-lr
    config:
      schedule: {kind: onecycle, max_lr: 0.1}
      spread: {alpha: 0.3}
      auto: {start: 40}
  - name: dropout
    plugin: hdet-explorer-dropout
    config: {schedule: 0.2, spread: {alpha: 0.05}}
`
}

// runWorker runs `mpirun -np n hdet run CFG --worker -- python3
// examples/pytorch/train.py ARGS` with HDET_TRACE_DIR set, so each rank's
// worker logs what it loaded and applied. started, if not nil, runs once the
// command has started.
func runWorker(t testing.TB, n int, cfg string, started func(traceDir string), args ...string) hdetRun {
	t.Helper()
	testenv.NeedTorch(t)
	hdet, plugins := hdetBinaries(t)
	root := repoRoot(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "config.in.yaml")
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o644))
	runDir, traceDir := filepath.Join(dir, "run"), filepath.Join(dir, "trace")
	require.NoError(t, os.Mkdir(traceDir, 0o755))
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	full := append([]string{hdet, "run", path, "--run-dir", runDir, "--plugin-dir", plugins, "--worker", "--",
		testenv.Python, filepath.Join(root, "examples", "pytorch", "train.py"), "--data", mnistDir(t), "--log-every", "1000"}, args...)
	cmd := mpirunCmd(ctx, t, n, full...)
	cmd.Env = append(cmd.Env, "HDET_TRACE_DIR="+traceDir)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	require.NoError(t, cmd.Start())
	if started != nil {
		started(traceDir)
	}
	err := cmd.Wait()
	return hdetRun{dir: runDir, stdout: out.String(), stderr: errb.String(), err: err}
}

// traceRecord is one line of a worker's HDET_TRACE_DIR log (python/hdet/_session.py).
type traceRecord struct {
	Event   string               `json:"event"`
	PID     int                  `json:"pid"`
	Before  string               `json:"before"`
	Window  int                  `json:"window"`
	SHA     string               `json:"params_sha256"`
	Applied map[string][]float64 `json:"applied"`
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

// checkWorkerRun asserts what every mode must give: windows recorded, loss
// falling, the same parameters on every rank after each converge, and each
// rank applying the values metrics.jsonl says it got.
func checkWorkerRun(t *testing.T, r hdetRun, n, windows int, traceDir string) {
	t.Helper()
	require.NoError(t, r.err, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	var wins []metrics.Record
	for _, rec := range r.records(t) {
		if rec.Type == metrics.TypeWindow {
			wins = append(wins, rec)
		}
	}
	require.Len(t, wins, windows)
	mean := func(rec metrics.Record) float64 {
		s := 0.0
		for _, l := range rec.Losses {
			s += float64(l)
		}
		return s / float64(len(rec.Losses))
	}
	assert.Less(t, mean(wins[windows-1]), mean(wins[0]), "the loss falls")

	loads := make([][]string, n)        // per rank: the parameters' hash at each load
	applied := make([][]traceRecord, n) // per rank: DONE records
	for rank := range n {
		for _, rec := range readTrace(t, traceDir, rank) {
			switch {
			case rec.Event == "load" && rec.Before != "eval":
				loads[rank] = append(loads[rank], rec.SHA)
			case rec.Event == "done":
				applied[rank] = append(applied[rank], rec)
			}
		}
	}
	for rank := range n {
		// A load before every PLAN and one at STOP.
		require.Len(t, loads[rank], windows+1, "rank %d loads", rank)
		require.Len(t, applied[rank], windows, "rank %d windows", rank)
		for k := 1; k <= windows; k++ {
			assert.Equal(t, loads[0][k], loads[rank][k], "rank %d parameters after converge %d", rank, k-1)
		}
		for k, w := range wins {
			for name, perRank := range w.Values {
				got := applied[rank][k].Applied[name]
				require.NotEmpty(t, got, "rank %d window %d applied no %s", rank, k, name)
				assert.Equal(t, float64(perRank[rank]), got[len(got)-1], "rank %d window %d: %s at the last step", rank, k, name)
			}
		}
	}
}

func TestPyTorchWorkerLocalMode(t *testing.T) {
	var traceDir string
	r := runWorker(t, 4, workerConfig("local", 20), func(d string) { traceDir = d }, "--steps", "60")
	checkWorkerRun(t, r, 4, 3, traceDir)
	hdet, _ := hdetBinaries(t)
	out, err := exec.Command(hdet, "report", r.dir).CombinedOutput()
	assert.NoError(t, err, "hdet report draws the run: %s", out)
}

func TestPyTorchWorkerGradientsMode(t *testing.T) {
	var traceDir string
	r := runWorker(t, 4, workerConfig("gradients", 20), func(d string) { traceDir = d }, "--steps", "60")
	checkWorkerRun(t, r, 4, 3, traceDir)
}

// A worker killed mid-run stops the job with a message naming the rank and
// the signal.
func TestPyTorchWorkerKilled(t *testing.T) {
	const victim = 2
	killed := false
	r := runWorker(t, 4, strings.Replace(workerConfig("local", 20), "steps: 60", "steps: 2000", 1), func(traceDir string) {
		deadline := time.Now().Add(3 * time.Minute)
		for time.Now().Before(deadline) {
			recs := readTrace(t, traceDir, victim)
			done := 0
			for _, rec := range recs {
				if rec.Event == "done" {
					done++
				}
			}
			if done >= 1 { // killed inside its second window
				require.NoError(t, syscall.Kill(recs[0].PID, syscall.SIGKILL))
				killed = true
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	}, "--steps", "2000")
	require.True(t, killed, "rank %d's worker never finished a window:\n%s", victim, r.stderr)
	require.Error(t, r.err)
	assert.Regexp(t, regexp.MustCompile(`rank 2: worker \(pid \d+\) training window \d+ \(steps \d+-\d+\): worker process exited \(killed by signal 9`), r.stdout+r.stderr)
}

// Outside hdet, train.py is train_onecycle.py: the same losses and accuracy.
func TestPyTorchExampleOutsideHdetIsOneCycleLR(t *testing.T) {
	testenv.NeedTorch(t)
	root := repoRoot(t)
	run := func(script string) string {
		cmd := exec.Command(testenv.Python, filepath.Join(root, "examples", "pytorch", script), "--data", mnistDir(t), "--steps", "40", "--log-every", "5")
		cmd.Env = os.Environ()
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		return regexp.MustCompile(`in [0-9.]+ s`).ReplaceAllString(string(out), "in T s")
	}
	plain, hdet := run("train_onecycle.py"), run("train.py")
	assert.Contains(t, plain, "test accuracy")
	assert.Equal(t, plain, hdet)
}

// BenchmarkPyTorchOverhead compares the example's training time under hdet
// (gradients mode, T = 100) with its plain OneCycleLR + DDP version under
// DDP, 4 processes, same steps. Reported: the training loop's wall time
// as rank 0's script prints it, and the whole command's.
func BenchmarkPyTorchOverhead(b *testing.B) {
	testenv.NeedTorch(b)
	root := repoRoot(b)
	const steps = "400"
	trainSeconds := regexp.MustCompile(`(\d+) steps in ([0-9.]+) s`)
	measure := func(cmd *exec.Cmd) (loop, whole float64) {
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		t0 := time.Now()
		require.NoError(b, cmd.Run(), "%s", out.String())
		whole = time.Since(t0).Seconds()
		m := trainSeconds.FindStringSubmatch(out.String())
		require.NotNil(b, m, "%s", out.String())
		loop, _ = strconv.ParseFloat(m[2], 64)
		return loop, whole
	}
	var plainLoop, plainWhole, hdetLoop, hdetWhole float64
	for b.Loop() {
		// Debian's torch 1.13 torchrun fails under Python 3.11 (its
		// redirects map is None), so the 4 DDP processes are started the way
		// torchrun would: rank 0's output is measured, the others must succeed.
		port := strconv.Itoa(29500 + rand.IntN(1000))
		var others []*exec.Cmd
		for r := 1; r < 4; r++ {
			c := exec.Command(testenv.Python, filepath.Join(root, "examples", "pytorch", "train_onecycle.py"), "--data", mnistDir(b), "--steps", steps, "--log-every", "100000")
			c.Env = append(os.Environ(), "RANK="+strconv.Itoa(r), "LOCAL_RANK="+strconv.Itoa(r), "WORLD_SIZE=4", "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+port)
			require.NoError(b, c.Start())
			others = append(others, c)
		}
		plain := exec.Command(testenv.Python, filepath.Join(root, "examples", "pytorch", "train_onecycle.py"), "--data", mnistDir(b), "--steps", steps, "--log-every", "100000")
		plain.Env = append(os.Environ(), "RANK=0", "LOCAL_RANK=0", "WORLD_SIZE=4", "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+port)
		l, w := measure(plain)
		for _, c := range others {
			require.NoError(b, c.Wait())
		}
		plainLoop, plainWhole = plainLoop+l, plainWhole+w

		dir := b.TempDir()
		path := filepath.Join(dir, "config.yaml")
		require.NoError(b, os.WriteFile(path, []byte(strings.Replace(workerConfig("gradients", 100), "steps: 60", "steps: "+steps, 1)), 0o644))
		hdet, plugins := hdetBinaries(b)
		cmd := mpirunCmd(context.Background(), b, 4, hdet, "run", path, "--run-dir", filepath.Join(dir, "run"), "--plugin-dir", plugins, "--worker", "--",
			testenv.Python, filepath.Join(root, "examples", "pytorch", "train.py"), "--data", mnistDir(b), "--steps", steps, "--log-every", "100000")
		l, w = measure(cmd)
		hdetLoop, hdetWhole = hdetLoop+l, hdetWhole+w
	}
	n := float64(b.N)
	b.ReportMetric(plainLoop/n, "plain-loop-s")
	b.ReportMetric(hdetLoop/n, "hdet-loop-s")
	b.ReportMetric(100*(hdetLoop/plainLoop-1), "loop-overhead-%")
	b.ReportMetric(plainWhole/n, "plain-total-s")
	b.ReportMetric(hdetWhole/n, "hdet-total-s")
}
