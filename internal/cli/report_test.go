package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/metrics"
)

// writeSmallRun writes a three-window run of two ranks exploring "lr".
func writeSmallRun(t *testing.T, dir string) {
	t.Helper()
	w, err := metrics.OpenWriter(filepath.Join(dir, "metrics.jsonl"))
	require.NoError(t, err)
	require.NoError(t, w.Write(metrics.StartRecord{Time: 100, Ranks: 2, TotalSteps: 30, WindowSteps: 10,
		Hyperparameters: []metrics.Param{{Name: "lr", Scale: "log", Spread: "multiplicative", Alpha: 0.1, Lower: 1e-5, Upper: 1}}}))
	for k := range 3 {
		lr := 0.01 / float64(k+1)
		require.NoError(t, w.Write(metrics.WindowRecord{Time: 101 + float64(k), Window: k, Step: 10 * (k + 1),
			Losses:        []metrics.Float{metrics.Float(2 - 0.5*float64(k)), metrics.Float(2.1 - 0.5*float64(k))},
			Healthy:       []bool{true, true},
			Values:        map[string][]metrics.Float{"lr": {metrics.Float(lr * 0.9), metrics.Float(lr * 1.1)}},
			Base:          map[string]metrics.Float{"lr": metrics.Float(lr)},
			Weights:       map[string][]metrics.Float{"lr": {0.6, 0.4}},
			FanoutSeconds: 0.9, ConvergeSeconds: 0.1,
			Eval: &metrics.Eval{Loss: metrics.Float(1.9 - 0.5*float64(k)), Accuracy: metrics.Float(0.5 + 0.1*float64(k))}}))
	}
	require.NoError(t, w.Write(metrics.EndRecord{Time: 104, WallSeconds: 4}))
	require.NoError(t, w.Close())
}

func runReportCmd(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	s := Streams{Out: &out, Err: &errb}
	code = exitCode(s, "report", runReport(s, args))
	return code, out.String(), errb.String()
}

func TestReportCommand(t *testing.T) {
	run := t.TempDir()
	writeSmallRun(t, run)
	outDir := filepath.Join(t.TempDir(), "rep")

	// Flags after the run directory work too.
	code, stdout, stderr := runReportCmd(run, "--out", outDir, "--csv")
	require.Equal(t, ExitOK, code, stderr)
	index := strings.TrimSpace(stdout)
	assert.Equal(t, filepath.Join(outDir, "index.html"), index)
	for _, name := range []string{"index.html", "summary.md", "windows.csv", "hparam-lr.png", "hparam-lr.svg", "loss.png", "weights.png", "timing.png"} {
		_, err := os.Stat(filepath.Join(outDir, name))
		assert.NoError(t, err, name)
	}
	md, err := os.ReadFile(filepath.Join(outDir, "summary.md"))
	require.NoError(t, err)
	assert.Contains(t, string(md), ("step 30 of 30 (100.0%), 3 windows, finished"))
	assert.Contains(t, string(md), ("| final training loss (mean over healthy ranks) | 1.05 |"))
	assert.Contains(t, string(md), ("| converge overhead (of wall time) | 7.5% |"))

	// Default output directory: RUN_DIR/report.
	code, stdout, stderr = runReportCmd(run)
	require.Equal(t, ExitOK, code, stderr)
	assert.Equal(t, filepath.Join(run, "report", "index.html"), strings.TrimSpace(stdout))

	// --tensorboard puts the event files elsewhere.
	tb := filepath.Join(t.TempDir(), "tb")
	code, _, stderr = runReportCmd(run, "--tensorboard", tb)
	require.Equal(t, ExitOK, code, stderr)
	files, err := filepath.Glob(filepath.Join(tb, "train", "events.out.tfevents.*"))
	require.NoError(t, err)
	assert.Len(t, files, 1)
}

func TestReportCompareCommand(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	writeSmallRun(t, a)
	writeSmallRun(t, b)
	out := t.TempDir()
	code, stdout, stderr := runReportCmd("--compare", a, b, "--out", out)
	require.Equal(t, ExitOK, code, stderr)
	assert.Equal(t, filepath.Join(out, "index.html"), strings.TrimSpace(stdout))
	_, err := os.Stat(filepath.Join(out, "compare-loss.png"))
	assert.NoError(t, err)
}

func TestReportCommandErrors(t *testing.T) {
	corrupt := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(corrupt, "metrics.jsonl"), []byte("garbage\n"), 0o644))
	noStart := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(noStart, "metrics.jsonl"), []byte(`{"type":"end"}`+"\n"), 0o644))
	run := t.TempDir()
	writeSmallRun(t, run)

	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"no args":         {nil, "one RUN_DIR"},
		"two runs":        {[]string{run, run}, "one RUN_DIR"},
		"corrupt":         {[]string{corrupt, "--out", t.TempDir()}, "not a metrics.jsonl file"},
		"no start record": {[]string{noStart, "--out", t.TempDir()}, "no start record"},
		"missing":         {[]string{filepath.Join(run, "nope")}, "no such file"},
		"compare one":     {[]string{"--compare", run}, "at least two"},
		"compare csv":     {[]string{"--compare", "--csv", run, run}, "--csv"},
		"compare tb":      {[]string{"--compare", "--tensorboard", t.TempDir(), run, run}, "--tensorboard apply to a single run"},
		"bad flag":        {[]string{"--color", run}, "color"},
	} {
		t.Run(name, func(t *testing.T) {
			code, _, stderr := runReportCmd(tc.args...)
			assert.Equal(t, ExitUsage, code)
			assert.Contains(t, stderr, tc.want)
		})
	}
}
