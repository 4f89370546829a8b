package main

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hdet-dev/hdet/internal/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReadResult(t *testing.T) {
	dir := t.TempDir()
	nan := metrics.Float(math.NaN())
	writeRun(t, dir,
		metrics.StartRecord{Time: 100, Ranks: 2, TotalSteps: 20, WindowSteps: 10},
		metrics.WindowRecord{Time: 101, Window: 0, Step: 10, Losses: []metrics.Float{1, 2}, Healthy: []bool{true, true},
			Base: map[string]metrics.Float{"lr": 0.01}, PlanSeconds: 0.002, FanoutSeconds: 0.5, ConvergeSeconds: 0.01},
		metrics.WindowRecord{Time: 102, Window: 1, Step: 20, Losses: []metrics.Float{1, nan}, Healthy: []bool{true, false},
			Base: map[string]metrics.Float{"lr": 0.005}, PlanSeconds: 0.004, FanoutSeconds: 0.6, ConvergeSeconds: 0.02},
		metrics.EndRecord{Time: 103, Step: 20, Eval: &metrics.Eval{Loss: 0.5, Accuracy: 0.9}, WallSeconds: 3},
	)
	r, err := readResult(dir)
	require.NoError(t, err)
	assert.Equal(t, 0.5, r.TestLoss)
	assert.Equal(t, 0.9, r.Accuracy)
	assert.Equal(t, 3.0, r.WallSeconds)
	assert.Equal(t, 20, r.Steps)
	assert.Equal(t, 1, r.Unhealthy)
	assert.False(t, r.diverged(), "a rank left out of one window is not the run's outcome")
	assert.Equal(t, []float64{0.002, 0.004}, r.planSeconds())
	assert.Equal(t, 0.005, r.FinalBase)
	assert.True(t, math.IsNaN(r.Committed), "one pass: nothing committed")
	require.Len(t, r.Passes, 1)
	assert.InDelta(t, 1.136, r.TrainSeconds, 1e-12, "fanout + converge + plan of both windows")
	assert.InDelta(t, 1.136/20, r.Passes[0].perStep(), 1e-12)
	assert.InDelta(t, 0.1, r.Passes[0].wallPerStep(), 1e-12, "from the start record to the last window: 2 s over 20 steps")

	unfinished := t.TempDir()
	writeRun(t, unfinished, metrics.StartRecord{Ranks: 2, TotalSteps: 20, WindowSteps: 10})
	_, err = readResult(unfinished)
	assert.ErrorContains(t, err, "no end record")
}

// A committed run: the search pass's windows, the commit record, the main
// pass's windows (counting from 0 again), the end record.
func TestReadRunSplitsThePasses(t *testing.T) {
	dir := t.TempDir()
	win := func(pass, w, step int, at, fanout, probe float64) metrics.WindowRecord {
		rec := metrics.WindowRecord{Time: at, Pass: pass, Window: w, Step: step, Losses: []metrics.Float{1, 1},
			Healthy: []bool{true, true}, FanoutSeconds: fanout, ProbeSeconds: probe, ConvergeSeconds: 0.1, PlanSeconds: 0.1,
			Offset: map[string]metrics.Float{"lr": 0.5}}
		if probe > 0 {
			rec.Probe = []metrics.Float{0.9, 0.8}
		}
		return rec
	}
	restart := win(1, 0, 10, 106, 1.0, 0)
	restart.PlanSeconds = 0.5 // the restart happens in the main pass's first plan
	writeRun(t, dir,
		metrics.StartRecord{Time: 100, Ranks: 2, TotalSteps: 30, WindowSteps: 10},
		win(0, 0, 10, 102, 1.5, 0.3), win(0, 1, 20, 104, 1.5, 0),
		metrics.CommitRecord{Time: 104.5, Step: 20, Committed: map[string]metrics.Commit{"lr": {Offset: 0.5, Value: 0.0042}}},
		restart, win(1, 1, 20, 107, 1.0, 0), win(1, 2, 30, 108.5, 1.0, 0),
		metrics.EndRecord{Time: 109, Step: 30, Eval: &metrics.Eval{Loss: 0.2, Accuracy: 0.95}, WallSeconds: 9},
	)
	r, err := readResult(dir)
	require.NoError(t, err)
	require.Len(t, r.Passes, 2)
	assert.Equal(t, 30, r.Steps, "the schedule's steps: the main pass's")
	assert.Equal(t, 0.0042, r.Committed)
	assert.Equal(t, 20, r.CommitStep)
	s, m := r.Passes[0], r.Passes[1]
	assert.Equal(t, 20, s.Steps)
	assert.Equal(t, 1, s.Probed)
	assert.Equal(t, []float64{0.3, 0}, s.Probe)
	assert.InDelta(t, 3.4/20, s.perStep(), 1e-12)
	assert.Equal(t, 30, m.Steps)
	assert.Equal(t, 0.5, m.Restart)
	assert.Equal(t, []float64{0, 0.1, 0.1}, m.Plan, "the restart is not a plan")
	assert.InDelta(t, 3.5/30, m.perStep(), 1e-12)
	assert.InDelta(t, 3.5/30, m.wallPerStep(), 1e-12, "from the commit record and the restart after it to the last window")
	assert.InDelta(t, 6.9, r.TrainSeconds, 1e-12)
	assert.Equal(t, []float64{0.1, 0.1, 0.1, 0.1}, r.planSeconds())
	assert.Equal(t, 0.2, r.TestLoss)
}

func TestScriptOutcome(t *testing.T) {
	out := "epoch 0: loss 0.1, lr 0.01\n[rank 0] 234 steps in 9.50 s, test loss 0.0700, test accuracy 0.9800\n" +
		"[rank 0] epoch 2: loss 0.05, lr 0.0000\n[rank 0] 702 steps in 31.25 s, test loss 0.0301, test accuracy 0.9901\nfinished\n"
	e, err := scriptOutcome(out)
	require.NoError(t, err)
	assert.Equal(t, 702, e.Steps, "the last line counts (a search pass's script may print before it is stopped)")
	assert.Equal(t, 31.25, e.Loop)
	assert.Equal(t, 0.0301, e.Loss)
	assert.Equal(t, 0.9901, e.Acc)
	e, err = scriptOutcome("702 steps in 30.1 s, test loss nan, test accuracy 0.0980\n")
	require.NoError(t, err)
	assert.True(t, math.IsNaN(e.Loss))
	_, err = scriptOutcome("Traceback ...\n")
	assert.ErrorContains(t, err, "no \"N steps in S s")

	r, err := plainScriptReader(scriptOutcome)("d", out, false)
	require.NoError(t, err)
	assert.Equal(t, 31.25, r.TrainSeconds)
	assert.Equal(t, 125.0, r.rankSeconds(4))
	assert.True(t, math.IsNaN(r.Committed))
}

// Four processes started as torchrun would: each sees its rank, the world
// size and one master port; rank 0's output is the run's.
func TestTorchrunStyleStart(t *testing.T) {
	var logged []string
	rn := &runner{np: 4, root: t.TempDir(), log: func(f string, a ...any) { logged = append(logged, f) }}
	cmd := []string{"sh", "-c", `echo "rank $RANK/$WORLD_SIZE local $LOCAL_RANK at $MASTER_ADDR:$MASTER_PORT"`}
	out, cmdline, _, err := rn.start(context.Background(), cmd, 4)
	require.NoError(t, err)
	assert.Regexp(t, `^rank 0/4 local 0 at 127\.0\.0\.1:\d+\n$`, out)
	assert.Regexp(t, `^for r in \$\(seq 0 3\); do RANK=\$r LOCAL_RANK=\$r WORLD_SIZE=4 MASTER_ADDR=127\.0\.0\.1 MASTER_PORT=\d+ (OMP_NUM_THREADS=1 )?sh -c .* & done; wait$`, cmdline)

	_, _, _, err = rn.start(context.Background(), []string{"sh", "-c", `[ "$RANK" != 2 ] || { echo broken >&2; exit 3; }`}, 4)
	require.Error(t, err)
}

// A plain script run is read from its output, saved beside its key, so a
// rerun with the same command and script reuses it; a changed script does
// not.
func TestScriptRunIsCachedOnItsScript(t *testing.T) {
	root := t.TempDir()
	script := filepath.Join(root, "train.sh")
	require.NoError(t, os.WriteFile(script, []byte(`echo "$RANK: 10 steps in 1.5 s, test loss 0.25, test accuracy 0.9"`+"\n"), 0o644))
	rn := &runner{np: 2, root: root, log: func(string, ...any) {}}
	cmd := []string{"sh", script}
	l := launch{Name: "s1/x/plain", Procs: 2, Cmd: func(string) []string { return cmd }, Key: cmd, Files: []string{script},
		Fingerprint: "plain script", Read: plainScriptReader(scriptOutcome)}
	r, err := rn.launch(context.Background(), l)
	require.NoError(t, err)
	assert.False(t, r.Cached)
	assert.Equal(t, 0.25, r.TestLoss)
	assert.Equal(t, 1.5, r.TrainSeconds)
	again, err := rn.launch(context.Background(), l)
	require.NoError(t, err)
	assert.True(t, again.Cached)
	assert.Equal(t, r.TestLoss, again.TestLoss)
	assert.Equal(t, r.ProcessSeconds, again.ProcessSeconds, "the launch's wall time is kept beside the key")
	require.NoError(t, os.WriteFile(script, []byte(`echo "10 steps in 2.5 s, test loss 0.5, test accuracy 0.8"`+"\n"), 0o644))
	changed, err := rn.launch(context.Background(), l)
	require.NoError(t, err)
	assert.False(t, changed.Cached)
	assert.Equal(t, 0.5, changed.TestLoss)
}

func TestCacheReusesOnlyAnEqualKey(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("a: 1\n"), 0o644))
	key, err := cacheKey(4, []string{cfg}, "canary abc", []string{"run", cfg, "--set", "x=1"})
	require.NoError(t, err)
	assert.Contains(t, key, "np 4\nargs run "+cfg+" --set x=1\nfile "+cfg+" ")
	assert.Contains(t, key, "trainer canary abc\n")
	read := func(dir, _ string, diverged bool) (result, error) { return readRun(dir, diverged) }

	run := filepath.Join(dir, "run")
	require.NoError(t, os.MkdirAll(run, 0o755))
	writeRun(t, run, metrics.StartRecord{Ranks: 2, TotalSteps: 10, WindowSteps: 10},
		metrics.WindowRecord{Step: 10, Losses: []metrics.Float{1, 1}, Healthy: []bool{true, true}},
		metrics.EndRecord{Step: 10, Checksum: "ff", Eval: &metrics.Eval{Loss: 0.25}, WallSeconds: 2})
	_, ok := reuse(run, key, read)
	assert.False(t, ok, "no key file yet")
	require.NoError(t, os.WriteFile(filepath.Join(run, keyFile), []byte(key), 0o644))
	r, ok := reuse(run, key, read)
	require.True(t, ok)
	assert.Equal(t, 0.25, r.TestLoss)
	assert.Equal(t, "ff", r.Checksum)
	assert.True(t, math.IsNaN(r.ProcessSeconds), "made before its wall time was kept")

	require.NoError(t, os.WriteFile(cfg, []byte("a: 2\n"), 0o644))
	changed, err := cacheKey(4, []string{cfg}, "canary abc", []string{"run", cfg, "--set", "x=1"})
	require.NoError(t, err)
	_, ok = reuse(run, changed, read)
	assert.False(t, ok, "a changed config is a different key")
	other, err := cacheKey(4, []string{cfg}, "canary abd", []string{"run", cfg, "--set", "x=1"})
	require.NoError(t, err)
	assert.NotEqual(t, changed, other, "a changed canary is a different key")
	_, err = cacheKey(4, []string{filepath.Join(dir, "missing.py")}, "", nil)
	assert.Error(t, err)

	diverged := filepath.Join(dir, "diverged")
	require.NoError(t, os.MkdirAll(diverged, 0o755))
	writeRun(t, diverged, metrics.StartRecord{Time: 100, Ranks: 2, TotalSteps: 20, WindowSteps: 10},
		metrics.WindowRecord{Time: 104, Step: 10, Losses: []metrics.Float{1e4, 1e4}, Healthy: []bool{true, true}})
	require.NoError(t, saveKey(diverged, key, true, 6.5))
	r, ok = reuse(diverged, key, read)
	require.True(t, ok, "a diverged run is a result too")
	assert.True(t, r.diverged())
	assert.True(t, math.IsNaN(r.TestLoss))
	assert.Equal(t, 4.0, r.WallSeconds, "up to its last window")
	assert.Equal(t, 6.5, r.ProcessSeconds)
}

// The ConvNet's launches: plain is the plain script on N torchrun-style
// processes; HDET is the hdet script under mpirun hdet run --worker, with
// no config for the default form and worker-lr.yaml for a form that sets
// something; no key holds the run directory, and the HDET keys hold the
// program's hash.
func TestTorchScriptLaunches(t *testing.T) {
	rn := &runner{np: 4, mpirun: mpirunArgs(4), hdet: "bin/hdet"}
	b := &bench{p: defaults(false), rn: rn}
	s := b.newSetups([]string{"convnet"})[0]
	require.NoError(t, s.w.prepare(context.Background(), b, s, "program\nhdet abc\n"))

	p := s.w.plain(4, 0.01)
	assert.Equal(t, 4, p.Procs)
	assert.Equal(t, ".venv/bin/python examples/pytorch/convnet_ddp.py --epochs 3 --max-lr 0.01 --seed 4", strings.Join(p.Cmd("runs/x"), " "))
	assert.Equal(t, []string{"examples/pytorch/convnet_ddp.py"}, p.Files)
	assert.NotContains(t, p.Fingerprint, "program", "plain runs outlive a rebuilt hdet")

	d := s.w.hdet(forms[0], 5, 0.0022)
	assert.Zero(t, d.Procs)
	assert.Equal(t, "mpirun -np 4 --oversubscribe --bind-to none bin/hdet run --run-dir runs/x --progress none --worker -- .venv/bin/python examples/pytorch/convnet_ddp_hdet.py --epochs 3 --max-lr 0.0022 --seed 5",
		strings.Join(d.Cmd("runs/x"), " "))
	assert.NotContains(t, strings.Join(d.Key, " "), "runs/x")
	assert.Contains(t, d.Fingerprint, "hdet abc")

	c := s.w.hdet(forms[1], 5, 0.0022)
	assert.Equal(t, "mpirun -np 4 --oversubscribe --bind-to none bin/hdet run bench/configs/worker-lr.yaml --run-dir runs/y --progress none --set explorers.lr.config.auto.commit=continue --worker -- .venv/bin/python examples/pytorch/convnet_ddp_hdet.py --epochs 3 --max-lr 0.0022 --seed 5",
		strings.Join(c.Cmd("runs/y"), " "))
	assert.Contains(t, c.Files, workerConfig)
	assert.Equal(t, "s1/convnet/seed5/continue-0.0022", runName(s, 5, "continue", 0.0022))

	q := &bench{p: defaults(true), rn: rn}
	assert.Contains(t, strings.Join(q.newSetups([]string{"convnet"})[0].w.plain(2, 0.01).Cmd(""), " "), "--train-samples 12800 --test-samples 2000 --epochs 4")
}

// gptOut is what examples/pytorch/gpt.py prints on rank 0, as a worker
// under hdet (twice: the search pass's start, then the main pass's).
const gptOut = "[rank 0] Python 3.11.2 stdlib ...\n[rank 0] unigram val_bpb 4.4657; model: 2 layers, width 64\n" +
	"[rank 0] Python 3.11.2 stdlib ...\n[rank 0] unigram val_bpb 4.4657; model: 2 layers, width 64\n" +
	`[rank 0] {"steps": 300, "seconds": 62.8, "train_loss": 1.8886, "val_bpb": 2.8561, "unigram_bpb": 4.4657}` + "\n[rank 0] final val_bpb 2.8561\n"

// The GPT setups exist, share their plain runs, run the default form only
// and read the validation bits per byte as the loss, 8 bits as chance.
func TestGPTSetups(t *testing.T) {
	b := &bench{p: defaults(false), rn: &runner{np: 4, mpirun: mpirunArgs(4), hdet: "bin/hdet"}}
	s := b.newSetups([]string{"gpt", "gpt-probe"})
	require.Len(t, s, 2)
	gpt, probe := s[0], s[1]
	assert.Equal(t, "GPT DDP", gpt.Label)
	assert.True(t, gpt.DefaultOnly && probe.DefaultOnly)
	assert.Equal(t, 1e-4, gridLR(gpt.GridFrom))
	assert.Equal(t, strings.Join(gpt.w.plain(4, 0.003).Cmd("a"), " "), strings.Join(probe.w.plain(4, 0.003).Cmd("b"), " "), "the same plain commands")
	assert.Equal(t, "s1/gpt/seed4/plain-0.003", runName(probe, 4, "plain", 0.003), "gpt-probe's plain runs are gpt's")
	assert.Equal(t, "s1/gpt-probe/seed4/default-0.003", runName(probe, 4, "default", 0.003))
	assert.Equal(t, ".venv/bin/python examples/pytorch/gpt.py --steps 300 --layers 2 --width 64 --threads 1 --max-lr 0.003 --seed 4",
		strings.Join(gpt.w.plain(4, 0.003).Cmd(""), " "))
	assert.Contains(t, strings.Join(probe.w.hdet(forms[0], 4, 0.003).Cmd("d"), " "), "--worker -- .venv/bin/python examples/pytorch/gpt_hdet_probe.py --steps 300")
	g, err := setupGroup([]string{"gpt-probe"})
	require.NoError(t, err)
	assert.Equal(t, "gpt", g)

	cos := b.newSetups([]string{"gpt-cosine", "gpt-cosine-probe"})
	require.Len(t, cos, 2)
	assert.Equal(t, "s1/gpt-cosine/seed4/plain-0.003", runName(cos[1], 4, "plain", 0.003), "the cosine pair shares its own plain runs")
	assert.Contains(t, strings.Join(cos[0].w.hdet(forms[0], 4, 0.003).Cmd("d"), " "), "examples/pytorch/gpt_hdet.py --steps 300 --layers 2 --width 64 --threads 1 --schedule cosine --max-lr")
	g, err = setupGroup([]string{"gpt-cosine", "gpt-cosine-probe"})
	require.NoError(t, err)
	assert.Equal(t, "gpt-cosine", g)
	_, err = setupGroup([]string{"gpt", "gpt-cosine"})
	assert.ErrorContains(t, err, "one pair per schedule")

	e, err := gptOutcome(gptOut)
	require.NoError(t, err)
	assert.Equal(t, scriptEnd{Steps: 300, Loop: 62.8, Loss: 2.8561, Chance: 8}, scriptEnd{Steps: e.Steps, Loop: e.Loop, Loss: e.Loss, Chance: e.Chance})
	e, err = gptOutcome("[rank 0] unigram val_bpb 4.4657; model\n")
	assert.ErrorContains(t, err, "final val_bpb")
	assert.Equal(t, 8.0, e.Chance, "chance even for a run that never finished")
	r, err := plainScriptReader(gptOutcome)("d", strings.ReplaceAll(gptOut, "[rank 0] ", ""), false)
	require.NoError(t, err)
	assert.Equal(t, 2.8561, r.TestLoss)
	assert.False(t, r.diverged(), "2.86 bits per byte is far from chance (ln 10 would call it diverged)")
	assert.False(t, result{TestLoss: 4.7, Chance: 8}.diverged(), "worse than the unigram model but learning")
	assert.True(t, result{TestLoss: 7.9995, Chance: 8}.diverged(), "no better than guessing among 256 bytes")
	assert.Equal(t, 8.0, chanceLoss(result{TestLoss: nan, Chance: 8}))
	assert.InDelta(t, 62.8/300, loopPerStep(r), 1e-12)
}

// Study 8's verdict: over +3% is not met; a pair where hdet is much faster
// than torchrun is the machine's noise, so the target is unconfirmed.
func TestGPTOverheadVerdict(t *testing.T) {
	assert.Contains(t, gptOverheadVerdict([]float64{0.01, 0.02, 0.025}), "Target met")
	assert.Contains(t, gptOverheadVerdict([]float64{0.05, 0.04, 0.01}), "Target NOT met")
	assert.Contains(t, gptOverheadVerdict([]float64{-0.37, -0.58, -0.12}), "Target not confirmed")
}

// A worker run's commit is a multiplier of the script's rate (protocol 3):
// the reader turns it into the max_lr it implies; a built-in run's commit
// is the max_lr itself.
func TestWorkerCommitIsAMultiplier(t *testing.T) {
	run := t.TempDir()
	writeRun(t, run, metrics.StartRecord{Ranks: 2, TotalSteps: 20, WindowSteps: 10},
		metrics.WindowRecord{Step: 10, Losses: []metrics.Float{1, 1}, Healthy: []bool{true, true}},
		metrics.CommitRecord{Step: 10, Committed: map[string]metrics.Commit{"lr": {Value: 2.5, ScriptPeakLR: 0.004, PeakLR: 0.01}}},
		metrics.EndRecord{Step: 20, WallSeconds: 2})
	r, err := workerRunReader(gptOutcome, 0.004)(run, gptOut, false)
	require.NoError(t, err)
	assert.InDelta(t, 0.01, r.Committed, 1e-12, "max_lr 0.004 x the committed 2.5")

	builtin := t.TempDir()
	writeRun(t, builtin, metrics.StartRecord{Ranks: 2, TotalSteps: 20, WindowSteps: 10},
		metrics.CommitRecord{Step: 10, Committed: map[string]metrics.Commit{"lr": {Value: 0.003}}},
		metrics.EndRecord{Step: 20, Eval: &metrics.Eval{Loss: 0.5}, WallSeconds: 2})
	r, err = readRun(builtin, false)
	require.NoError(t, err)
	assert.Equal(t, 0.003, r.Committed)
}
