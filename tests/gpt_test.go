package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/metrics"
	"github.com/hdet-dev/hdet/internal/testenv"
)

// The lines hdet adds to gpt.py: gpt_hdet.py imports hdet and attaches the
// optimizer (the softmax temperature explored with --explore-temperature);
// gpt_hdet_probe.py also registers a probe.
const (
	gptImport = "import hdet"
	gptAttach = `    opt = hdet.attach(opt, args.steps, callbacks={"temperature": model.set_temperature}, explore=["lr"] + [{"name": "temperature", "base": args.temperature, "plugin": "hdet-explorer-weight-decay", "lower": 0.25, "upper": 4.0}] * args.explore_temperature)`
	gptProbe  = "    hdet.probe(lambda: evaluate(model, fixed_windows(val, args.context, 64, offset=0.5)))  # none of the reported windows"
)

func exampleLines(t *testing.T, name string) []string {
	t.Helper()
	b, err := os.ReadFile(examplePath(t, name))
	require.NoError(t, err)
	return strings.Split(string(b), "\n")
}

// insertedLines are the lines of b that are not a's, by their index in b,
// when b is a with lines inserted (nothing changed or removed).
func insertedLines(t *testing.T, a, b []string) map[int]string {
	t.Helper()
	out := map[int]string{}
	i := 0
	for j, l := range b {
		if i < len(a) && a[i] == l {
			i++
			continue
		}
		out[j] = l
	}
	require.Equal(t, len(a), i, "every line of the first file is in the second, in order")
	return out
}

// gpt_hdet.py is gpt.py with two lines added, the docstrings included:
// `import hdet` ahead of torch's imports and hdet.attach right after the
// optimizer is built. gpt_hdet_probe.py is gpt_hdet.py with one more line,
// hdet.probe, right after the attach line.
func TestGPTExampleDiffs(t *testing.T) {
	plain, hdet, probe := exampleLines(t, "gpt.py"), exampleLines(t, "gpt_hdet.py"), exampleLines(t, "gpt_hdet_probe.py")

	added := insertedLines(t, plain, hdet)
	require.Len(t, added, 2, "gpt.py and gpt_hdet.py differ in two added lines: %v", added)
	i := slices.Index(hdet, gptImport)
	require.GreaterOrEqual(t, i, 0, "gpt_hdet.py adds %q", gptImport)
	assert.Equal(t, gptImport, added[i])
	assert.Equal(t, "import torch", hdet[i+1], "hdet's import, ahead of torch's")
	j := slices.Index(hdet, gptAttach)
	require.GreaterOrEqual(t, j, 0, "gpt_hdet.py adds the attach line")
	assert.Equal(t, gptAttach, added[j])
	assert.True(t, strings.HasPrefix(hdet[j-1], "    opt = torch.optim.AdamW("), "attach right after the optimizer is built: %q", hdet[j-1])

	added = insertedLines(t, hdet, probe)
	require.Len(t, added, 1, "gpt_hdet_probe.py is gpt_hdet.py with one line added: %v", added)
	k := slices.Index(probe, gptProbe)
	require.GreaterOrEqual(t, k, 0, "gpt_hdet_probe.py adds the probe line")
	assert.Equal(t, gptAttach, probe[k-1], "the probe right after the attach line")
}

// gptArgs is a small GPT for CI: 2 layers of width 64, context 32, 8 windows
// per rank and step, 40 steps, evaluated at steps 0 and 20 and at the end.
var gptArgs = []string{"--steps", "40", "--layers", "2", "--width", "64", "--heads", "4", "--context", "32",
	"--batch-size", "8", "--val-windows", "64", "--eval-every", "20", "--max-lr", "3e-3"}

var (
	gptFirstBPB = regexp.MustCompile(`\[rank 0\] step 0: val_bpb ([0-9.]+)`)
	gptFinalBPB = regexp.MustCompile(`\[rank 0\] final val_bpb ([0-9.]+)`)
	gptUnigram  = regexp.MustCompile(`\[rank 0\] unigram val_bpb ([0-9.]+)`)
)

func parseFloat(t *testing.T, re *regexp.Regexp, out string) float64 {
	t.Helper()
	m := re.FindStringSubmatch(out)
	require.NotNil(t, m, "no %s in:\n%s", re, out)
	v, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	return v
}

// gpt_hdet_probe.py (a byte-level GPT under DDP: two AdamW param groups,
// gradient clipping, zero_grad(set_to_none=True)) with nanoGPT's schedule
// (warm-up and cosine set by hand every step) and the softmax temperature
// explored, under `hdet run --worker` on 4 ranks, T = 5 (a search pass of
// a quarter of the run, 2 windows: the first asks for the probe, which the
// update at its end reads): gradients mode, the ranks apply distinct
// learning-rate multipliers and temperatures, the probe reaches the
// controller, the validation loss falls.
func TestGPTWorker(t *testing.T) {
	var traceDir string
	r := runWorker(t, 4, "train: {window: 5}", func(d string, _ *exec.Cmd) { traceDir = d },
		examplePath(t, "gpt_hdet_probe.py"), append(slices.Clone(gptArgs), "--schedule", "cosine", "--explore-temperature")...)
	checkWorkerRun(t, r, 4, 8, traceDir)
	out := r.stdout + r.stderr

	recs := r.records(t)
	assert.Equal(t, "gradients", recs[0].(metrics.StartRecord).SyncMode, "the script set up DDP")
	assert.Equal(t, 40, r.end(t).Step)
	distinct := map[string]map[metrics.Float]bool{"lr": {}, "temperature": {}}
	probed := 0
	for _, rec := range metrics.Of[metrics.WindowRecord](recs) {
		for name, seen := range distinct {
			vs := rec.Values[name]
			require.Len(t, vs, 4, "window %d: one %s per rank", rec.Window, name)
			for _, v := range vs {
				seen[v] = true
			}
		}
		if len(rec.Probe) == 4 {
			probed++
		}
	}
	assert.GreaterOrEqual(t, len(distinct["lr"]), 4, "the ranks applied different learning rates")
	assert.GreaterOrEqual(t, len(distinct["temperature"]), 4, "the ranks applied different softmax temperatures")
	assert.Regexp(t, `committed after a search pass of 10 steps: lr x[0-9.]+: peak lr 0.003 -> [0-9.e-]+ \(x[0-9.]+\)( \((kept|shown): .*?\))?, temperature [0-9.]+`, r.stdout)
	assert.Positive(t, probed, "the probe's losses reached the controller")
	assert.NotContains(t, out, "NaN")

	first, final, unigram := parseFloat(t, gptFirstBPB, out), parseFloat(t, gptFinalBPB, out), parseFloat(t, gptUnigram, out)
	t.Logf("val bits/byte: %.4f at step 0, %.4f at the end (unigram %.4f)", first, final, unigram)
	assert.Less(t, final, first-2, "the validation loss falls")
}

// Outside hdet gpt_hdet_probe.py (hdet's lines: the import, attach and
// probe) is gpt.py: the same output, single process, with each schedule.
func TestGPTOutsideHdet(t *testing.T) {
	testenv.NeedTorch(t)
	seconds := regexp.MustCompile(`"seconds": [0-9.]+`)
	run := func(script, schedule string) string {
		cmd := exec.Command(testenv.Python, examplePath(t, script), "--steps", "6", "--layers", "1",
			"--width", "32", "--context", "16", "--val-windows", "8", "--eval-every", "2", "--schedule", schedule,
			"--explore-temperature")
		cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool {
			return strings.HasPrefix(kv, "RANK=") || strings.HasPrefix(kv, "WORLD_SIZE=")
		}), "PYTHONPATH="+filepath.Join(repoRoot(t), "python"))
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		return seconds.ReplaceAllString(string(out), `"seconds": S`)
	}
	for _, schedule := range []string{"onecycle", "cosine", "wsd"} {
		plain := run("gpt.py", schedule)
		assert.Contains(t, plain, "final val_bpb")
		assert.Contains(t, plain, "("+schedule+")")
		assert.Equal(t, plain, run("gpt_hdet_probe.py", schedule), schedule)
	}
}
