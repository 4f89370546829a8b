package tests

import (
	"bufio"
	"encoding/json"
	"fmt"
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

// hdet.attach end to end (issue 38): tests/testdata/attach_loop.py is a
// training loop written as users write them, with hdet's one line; these
// run it under `hdet run --worker` on 2 ranks (attachRanks) with each schedule and
// optimizer form people use, and check what every rank's optimizer used.

// attachLoop is the user-style script.
func attachLoop(t testing.TB) string {
	return filepath.Join(repoRoot(t), "tests", "testdata", "attach_loop.py")
}

// attachSteps and attachWindow: 40 optimizer steps in windows of 5, so the
// search pass (a quarter of a schedule hdet does not know) is 2 windows and
// the main pass 8. attachRanks: 2 replicas, whose rates differ (x e^-a and
// x e^a) as 4 would; each rank starts Python and torch twice, which on CI's
// 2 cores is most of a run.
const (
	attachSteps  = 40
	attachWindow = 5
	attachRanks  = 2
)

// lrStep is one optimizer step call as attach_loop.py's own step pre-hook
// saw it: the rates the script had set, the rates inside the step, and
// whether AMP's GradScaler skipped it.
type lrStep struct {
	Script  []float64 `json:"script"`
	Inside  []float64 `json:"inside"`
	Skipped bool      `json:"skipped"`
}

// readLRSteps reads rank's record of one pass ("search" or "main"),
// skipped steps left out; it also returns how many were skipped.
func readLRSteps(t *testing.T, dir string, rank int, pass string) (steps []lrStep, skipped int) {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, fmt.Sprintf("lr-rank%d-%s.jsonl", rank, pass)))
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var s lrStep
		require.NoError(t, json.Unmarshal(sc.Bytes(), &s), "rank %d %s: %s", rank, pass, sc.Text())
		if s.Skipped {
			skipped++
			continue
		}
		steps = append(steps, s)
	}
	require.NoError(t, sc.Err())
	return steps, skipped
}

// attachRun runs attach_loop.py on attachRanks ranks with args (after the common
// ones); it returns the run, its trace folder and its record folder.
func attachRun(t *testing.T, cfg string, args ...string) (r hdetRun, traceDir, recDir string) {
	t.Helper()
	recDir = t.TempDir()
	args = append([]string{"--steps", fmt.Sprint(attachSteps), "--window", fmt.Sprint(attachWindow), "--record", recDir}, args...)
	start := time.Now()
	r = runWorker(t, attachRanks, cfg, func(d string, _ *exec.Cmd) { traceDir = d }, attachLoop(t), args...)
	t.Logf("attach_loop.py %s: %.1f s", strings.Join(args[6:], " "), time.Since(start).Seconds())
	return r, traceDir, recDir
}

// checkAttachRun asserts what every attach run must give: exit 0, the
// committed line, every rank holding the same parameters after each
// window (checkWorkerRun's load hashes), and inside every optimizer step of
// both passes each group's rate equal to the script's own rate x this
// rank's planned multiplier (the trace's applied values; lr names the
// multiplier of every group, lr/KEY one group's), the script's rate of
// group 0 being the trace's base_lr; in the search pass the ranks'
// multipliers differ, in the main pass they are the committed one.
// explored names each group's multiplier (one entry: every group's).
func checkAttachRun(t *testing.T, r hdetRun, traceDir, recDir string, explored []string, skips int) {
	t.Helper()
	checkWorkerRun(t, r, attachRanks, attachSteps/attachWindow, traceDir)
	assert.Regexp(t, `committed after a search pass of \d+ steps: lr`, r.stdout)
	commits := metrics.Of[metrics.CommitRecord](r.records(t))
	require.Len(t, commits, 1)

	firstSearch := map[string][]float64{} // per explored name, each rank's multiplier at the first step
	annealed := map[int]bool{}            // search windows that annealed (the script has no probe)
	for _, rec := range r.windows(t) {
		if rec.Pass == 0 && rec.Anneal {
			annealed[rec.Window] = true
		}
	}
	require.NotEmpty(t, annealed, "without a probe, the search windows that compare the ranks anneal")
	for rank := range attachRanks {
		procs := workerProcesses(readTrace(t, traceDir, rank))
		require.Len(t, procs, 2)
		for p, pass := range []string{"search", "main"} {
			steps, skipped := readLRSteps(t, recDir, rank, pass)
			assert.Equal(t, skips, skipped, "rank %d %s pass: steps AMP skipped", rank, pass)
			var bases []float64
			mults := map[string][]float64{}
			for _, d := range procs[p].applied {
				bases = append(bases, d.BaseLR...)
				for _, name := range explored {
					a := d.Applied[name]
					require.Len(t, a, len(d.BaseLR), "rank %d %s window %d: %s", rank, pass, d.Window, name)
					mults[name] = append(mults[name], a...)
					if p == 0 && annealed[d.Window] { // checkWorkerPass saw the 0 at its end
						assert.Positive(t, a[0], "rank %d window %d: %s anneals over the window's last half only", rank, d.Window, name)
					}
				}
			}
			require.Len(t, steps, len(bases), "rank %d %s pass: the script's optimizer steps are hdet's", rank, pass)
			for i, s := range steps {
				require.Len(t, s.Inside, len(s.Script))
				assert.InEpsilon(t, bases[i], s.Script[0], 1e-12, "rank %d %s step %d: base_lr is the script's rate", rank, pass, i)
				for k := range s.Script {
					m := mults[explored[min(k, len(explored)-1)]][i]
					assert.InDelta(t, s.Script[k]*m, s.Inside[k], 1e-6*s.Script[k]*m, "rank %d %s step %d group %d: the rate inside the step is the script's %g x the planned %g",
						rank, pass, i, k, s.Script[k], m)
				}
			}
			for _, name := range explored {
				if p == 0 {
					firstSearch[name] = append(firstSearch[name], mults[name][0])
					continue
				}
				want := float64(commits[0].Committed[name].Value)
				for i, m := range mults[name] {
					require.InEpsilon(t, want, m, 1e-12, "rank %d main step %d: %s at the committed multiplier", rank, i, name)
				}
			}
		}
	}
	for _, name := range explored {
		distinct := slices.Compact(slices.Sorted(slices.Values(firstSearch[name])))
		assert.Len(t, distinct, attachRanks, "%s: the ranks' multipliers differ in the search pass's first window: %v", name, firstSearch[name])
	}
}

// One run per row, each combining forms: every schedule people use, AdamW,
// Adam and SGD in their default, foreach and fused implementations, two
// param groups with one multiplier or one each, gradient accumulation, an
// AMP GradScaler that skips a step, torch.compile and DDP.
func TestAttachSchedules(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		explored []string
		skips    int
	}{
		{"LambdaLR WSD, AdamW, two groups, accumulation", []string{"--schedule", "lambda-wsd", "--optimizer", "adamw", "--groups", "2", "--accum", "3"}, []string{"lr"}, 0},
		{"CosineAnnealingLR, SGD foreach, a multiplier per group", []string{"--schedule", "cosine", "--optimizer", "sgd", "--impl", "foreach", "--groups", "2", "--per-group"}, []string{"lr/body", "lr/head"}, 0},
		{"SequentialLR, fused AdamW, GradScaler skips", []string{"--schedule", "sequential", "--optimizer", "adamw", "--impl", "fused", "--amp-skip", "3"}, []string{"lr"}, 1},
		{"OneCycleLR, fused Adam, DDP", []string{"--schedule", "onecycle", "--optimizer", "adam", "--impl", "fused", "--ddp"}, []string{"lr"}, 0},
		{"constant, fused SGD, torch.compile", []string{"--schedule", "constant", "--optimizer", "sgd", "--impl", "fused", "--compile"}, []string{"lr"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, traceDir, recDir := attachRun(t, "", tc.args...)
			checkAttachRun(t, r, traceDir, recDir, tc.explored, tc.skips)
			mode := "local"
			if slices.Contains(tc.args, "--ddp") {
				mode = "gradients"
			}
			assert.Equal(t, mode, r.records(t)[0].(metrics.StartRecord).SyncMode)
		})
	}
}

// A nanoGPT loop sets g["lr"] by hand before every step, which used to
// overwrite each rank's planned rate (issue 38): the replicas trained alike.
// Under attach each trains at its own rate: given the same batches on every
// rank (hdet says so), their losses differ only by the rates.
func TestAttachManualLoop(t *testing.T) {
	r, traceDir, recDir := attachRun(t, "", "--schedule", "manual", "--optimizer", "adamw", "--impl", "foreach", "--same-data")
	checkAttachRun(t, r, traceDir, recDir, []string{"lr"}, 0)
	var sameData bool
	for _, rec := range r.windows(t) {
		for _, e := range rec.Events {
			sameData = sameData || e.Kind == metrics.EventSameData
		}
		if rec.Pass != 0 {
			continue
		}
		distinct := map[metrics.Float]bool{}
		for _, l := range rec.Losses {
			distinct[l] = true
		}
		assert.Len(t, distinct, attachRanks, "search window %d: each replica's loss is its own: %v", rec.Window, rec.Losses)
	}
	assert.True(t, sameData, "hdet noticed the replicas draw the same batches")
}

// A script that never calls hdet.attach fails at its first optimizer step,
// not after training (30 s of it here), with a message naming hdet.attach.
func TestAttachMissing(t *testing.T) {
	start := time.Now()
	r := runWorker(t, 2, "", nil, attachLoop(t), "--steps", "3000", "--sleep", "0.01", "--no-attach")
	t.Logf("failed after %.1f s", time.Since(start).Seconds())
	require.Error(t, r.err)
	out := r.stdout + r.stderr
	assert.Contains(t, out, "never hdet.attach(optimizer, total_steps)")
	assert.Regexp(t, `worker process exited before connecting \(exit status 1\): the script \(run by \S+python\S*\) raised before it connected to hdet`, out)
	assert.NotContains(t, out, "iterations, last loss", "the script did not train to its end")
}

// A Python without torch: hdet names the interpreter and what to install.
// The interpreter is the venv's Python without its site-packages (-S), so
// the test needs nothing of the machine beyond what make test installs.
func TestAttachPythonWithoutTorch(t *testing.T) {
	python := filepath.Join(t.TempDir(), "python-without-torch")
	require.NoError(t, os.WriteFile(python, []byte("#!/bin/sh\nexec "+testenv.Python+" -S \"$@\"\n"), 0o755))
	r := runWorkerWith(t, 2, "", nil, python, attachLoop(t), "--steps", "10")
	require.Error(t, r.err)
	out := r.stdout + r.stderr
	assert.Contains(t, out, "the script's Python, "+python+", has no torch: install torch into it (pip install torch)")
	assert.Contains(t, out, "ModuleNotFoundError: No module named 'torch'", "the relevant lines of the script's error")
}

// Every rank must give attach the same total_steps: exit 2 naming the
// ranks and their values.
func TestAttachTotalStepsDiffer(t *testing.T) {
	r := runWorker(t, 4, "", nil, attachLoop(t), "--steps", "40", "--total-steps", "1=50,3=60")
	var ee *exec.ExitError
	require.ErrorAs(t, r.err, &ee, "%s\n%s", r.stdout, r.stderr)
	assert.Equal(t, 2, ee.ExitCode(), "%s\n%s", r.stdout, r.stderr)
	out := r.stdout + r.stderr
	assert.Regexp(t, `rank [13]'s script differs from rank 0's: total_steps (50|60) \(rank 0: 40\)`, out)
}

// More optimizer steps than total_steps: a clear error, non-zero exit.
// (auto.commit continue: one pass, so the script runs once.)
func TestAttachPastTotalSteps(t *testing.T) {
	r := runWorker(t, 2, "explorers: [{name: lr, plugin: hdet-explorer-lr, config: {auto: {commit: continue}}}]", nil,
		attachLoop(t), "--steps", "20", "--window", "5", "--extra-steps", "1")
	require.Error(t, r.err)
	out := r.stdout + r.stderr
	assert.Regexp(t, `RuntimeError: hdet: optimizer step 21 is past total_steps=20 given to hdet.attach; give it the number of optimizer steps the script takes`, out)
	assert.Contains(t, out, "finishing after STOP")
}

// attachLoopOutside runs attach_loop.py outside hdet (one process).
func attachLoopOutside(t *testing.T, args ...string) string {
	t.Helper()
	testenv.NeedTorch(t)
	cmd := exec.Command(testenv.Python, append([]string{attachLoop(t)}, args...)...)
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "RANK=") || strings.HasPrefix(kv, "WORLD_SIZE=") || strings.HasPrefix(kv, "HDET_")
	}), "PYTHONPATH="+filepath.Join(repoRoot(t), "python"))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	return string(out)
}

// Outside hdet the attach line changes nothing: the rates inside each step
// are the script's (python/tests/test_attach.py compares the parameters
// bitwise with and without the line).
func TestAttachOutsideHdet(t *testing.T) {
	dir := t.TempDir()
	attachLoopOutside(t, "--schedule", "manual", "--groups", "2", "--record", dir, "--steps", "12")
	steps, skipped := readLRSteps(t, dir, 0, "search")
	require.Len(t, steps, 12)
	assert.Zero(t, skipped)
	for i, s := range steps {
		assert.Equal(t, s.Script, s.Inside, "step %d", i)
	}
}
