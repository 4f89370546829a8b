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

const (
	torchImport = "from torch.optim.lr_scheduler import OneCycleLR"
	hdetImport  = "from hdet import OneCycleLR"
	probeImport = "from hdet import OneCycleLR, probe"
)

func exampleLines(t *testing.T, name string) []string {
	t.Helper()
	b, err := os.ReadFile(examplePath(t, name))
	require.NoError(t, err)
	return strings.Split(string(b), "\n")
}

// differingLines are the indices where two files of the same length differ.
func differingLines(t *testing.T, a, b []string) []int {
	t.Helper()
	require.Equal(t, len(a), len(b), "the same number of lines")
	var out []int
	for i := range a {
		if a[i] != b[i] {
			out = append(out, i)
		}
	}
	return out
}

// gpt_hdet.py is gpt.py with one line changed, the scheduler's import; the
// docstrings included. gpt_hdet_probe.py is gpt_hdet.py with hdet's probe
// imported on the same line and one line added that registers it.
func TestGPTExampleDiffs(t *testing.T) {
	plain, hdet, probe := exampleLines(t, "gpt.py"), exampleLines(t, "gpt_hdet.py"), exampleLines(t, "gpt_hdet_probe.py")

	diff := differingLines(t, plain, hdet)
	require.Len(t, diff, 1, "gpt.py and gpt_hdet.py differ in one line")
	assert.Equal(t, torchImport, plain[diff[0]])
	assert.Equal(t, hdetImport, hdet[diff[0]])

	var added []int
	for i, l := range probe {
		if strings.HasPrefix(strings.TrimSpace(l), "probe(") {
			added = append(added, i)
		}
	}
	require.Len(t, added, 1, "gpt_hdet_probe.py adds one probe(...) line")
	withoutProbe := slices.Delete(slices.Clone(probe), added[0], added[0]+1)
	diff = differingLines(t, hdet, withoutProbe)
	require.Len(t, diff, 1, "gpt_hdet_probe.py, its probe line left out, differs from gpt_hdet.py in one line")
	assert.Equal(t, probeImport, withoutProbe[diff[0]])
}

// gptArgs is a small GPT for CI: 2 layers of width 64, context 32, 8 windows
// per rank and step, 40 steps (4 windows of 10), evaluated at steps 0 and 20
// and at the end.
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
// gradient clipping, zero_grad(set_to_none=True)) under `hdet run --worker`
// on 4 ranks, T = 10: gradients mode, the ranks apply distinct learning
// rates, the probe reaches the controller, the validation loss falls.
func TestGPTWorker(t *testing.T) {
	var traceDir string
	r := runWorker(t, 4, "train: {window: 10}", func(d string, _ *exec.Cmd) { traceDir = d },
		examplePath(t, "gpt_hdet_probe.py"), gptArgs...)
	checkWorkerRun(t, r, 4, 4, traceDir)
	out := r.stdout + r.stderr

	recs := r.records(t)
	assert.Equal(t, "gradients", recs[0].SyncMode, "the script set up DDP")
	assert.Equal(t, 40, r.end(t).Step)
	distinct := map[metrics.Float]bool{}
	probed := 0
	for _, rec := range recs {
		if rec.Type != metrics.TypeWindow {
			continue
		}
		lrs := rec.Values["lr"]
		require.Len(t, lrs, 4, "window %d: one lr per rank", rec.Window)
		for _, v := range lrs {
			distinct[v] = true
		}
		if len(rec.Probe) == 4 {
			probed++
		}
	}
	assert.GreaterOrEqual(t, len(distinct), 4, "the ranks applied different learning rates")
	assert.Positive(t, probed, "the probe's losses reached the controller")
	assert.NotContains(t, out, "NaN")

	first, final, unigram := parseFloat(t, gptFirstBPB, out), parseFloat(t, gptFinalBPB, out), parseFloat(t, gptUnigram, out)
	t.Logf("val bits/byte: %.4f at step 0, %.4f at the end (unigram %.4f)", first, final, unigram)
	assert.Less(t, final, first-2, "the validation loss falls")
}

// Outside hdet gpt_hdet_probe.py (both of hdet's lines: OneCycleLR and
// probe) is gpt.py: the same output, single process.
func TestGPTOutsideHdet(t *testing.T) {
	testenv.NeedTorch(t)
	seconds := regexp.MustCompile(`"seconds": [0-9.]+`)
	run := func(script string) string {
		cmd := exec.Command(testenv.Python, append([]string{examplePath(t, script)}, "--steps", "5", "--layers", "1",
			"--width", "32", "--context", "16", "--val-windows", "8")...)
		cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool {
			return strings.HasPrefix(kv, "RANK=") || strings.HasPrefix(kv, "WORLD_SIZE=")
		}), "PYTHONPATH="+filepath.Join(repoRoot(t), "python"))
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		return seconds.ReplaceAllString(string(out), `"seconds": S`)
	}
	plain := run("gpt.py")
	assert.Contains(t, plain, "final val_bpb")
	assert.Equal(t, plain, run("gpt_hdet_probe.py"))
}
