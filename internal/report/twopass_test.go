package report

import (
	"encoding/csv"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/metrics"
)

func twoPassRun(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	writeTwoPassRun(t, dir)
	return dir
}

func loadRun(t *testing.T, dir string) *Run {
	t.Helper()
	r, err := Load(dir)
	require.NoError(t, err)
	return r
}

func TestLoadTwoPassRun(t *testing.T) {
	r := loadRun(t, twoPassRun(t))
	require.True(t, r.TwoPass())
	assert.Equal(t, fx2Search*fxT, r.SearchSteps())
	assert.Len(t, r.pass(passSearch), fx2Search)
	assert.Len(t, r.pass(passMain), 21, "the main pass's windows count from 0 again and replace none of the search pass's")
	assert.Empty(t, r.Replaced)
	assert.Equal(t, fx2Steps, r.Steps(), "the main pass's steps")
	evs := r.Evals()
	require.NotEmpty(t, evs)
	last := evs[len(evs)-1]
	assert.Equal(t, EvalAt{passMain, fx2Steps, metrics.Eval{Loss: 0.04, Accuracy: 0.985}}, last, "the end record's evaluation is the main pass's")
	search := r.passEvals(passSearch)
	require.Len(t, search, 1)
	assert.Equal(t, [2]int{passSearch, 250}, [2]int{search[0].Pass, search[0].Step})
	assert.InDelta(t, 0.986, float64(search[0].Accuracy), 1e-12)
}

func TestTwoPassSummary(t *testing.T) {
	dir := twoPassRun(t)
	s := summaryOf(t, dir)
	assert.True(t, s.TwoPass)
	assert.Equal(t, 250, s.SearchSteps)
	assert.Equal(t, 0.985, s.FinalAccuracy, "the main pass's")
	assert.Equal(t, []RankHealth{{Rank: 2, Pass: passSearch, Windows: []int{2}}, {Rank: 2, Pass: passMain, Windows: []int{2}}}, s.Unhealthy)
	require.Len(t, s.Offsets, 2, "offsets over the search pass only")
	assert.InDelta(t, fx2U, s.Offsets[0].Final, 1e-12)

	out := t.TempDir()
	_, err := Write(dir, out, Options{})
	require.NoError(t, err)
	md, err := os.ReadFile(filepath.Join(out, SummaryFile))
	require.NoError(t, err)
	text := string(md)
	for _, want := range []string{
		"## Committed",
		"| passes | two: a search pass of 250 steps (25% of the 1010-step run), then the main pass from step 0 at the committed values; the run cost 1.25 runs |",
		"| lr | max_lr 0.008 = 2× the schedule's 0.004 (offset u = 0.6931) |",
		"| dropout | value 0.15 = the schedule's 0.1 + 0.05 (offset u = 0.05) |",
		"| main pass: final test accuracy, test loss | 0.985, 0.04 |",
		"| progress | step 1010 of 1010 (100.0%) of the main pass, after a search pass of 250 steps; 26 windows (5 search, 21 main), finished |",
		"| main pass: final test accuracy | 0.985 |",
		"| hyperparameter | pass | scale | start | min | max | end |",
		"| lr | main | log |",
		"| lr | search | log |",
		"| 2 | search | 1 | 2 |",
		"| 2 | main | 1 | 2 |",
	} {
		assert.Contains(t, text, want)
	}
	assert.NotContains(t, text, "controller's conclusion", "the Committed section says it")
}

// The real run in testdata/twopass: `mpirun -np 4 hdet run
// bench/configs/hdet.yaml --set explorers.lr.config.schedule.max_lr=0.00046`
// (MNIST, 702 steps, T=50), which committed after a 250-step search pass.
func TestSummaryOfRealTwoPassRun(t *testing.T) {
	dir := filepath.Join("testdata", "twopass")
	s := summaryOf(t, dir)
	md := s.Markdown()
	assert.Contains(t, md, "| lr | max_lr 0.004847 = 10.5× the schedule's 0.00046 (offset u = 2.355) |")
	assert.Contains(t, md, "| passes | two: a search pass of 250 steps (36% of the 702-step run), then the main pass from step 0 at the committed values; the run cost 1.36 runs |")
	assert.Contains(t, md, "| main pass: final test accuracy, test loss | 0.98, 0.0632 |")

	r := loadRun(t, dir)
	p := r.Params[0]
	search, main := traceParam(r.pass(passSearch), p, r.Ranks), traceParam(r.pass(passMain), p, 0)
	assert.True(t, search.perStep)
	assert.Len(t, search.xs, 250)
	assert.Len(t, main.xs, 702)
	out := t.TempDir()
	_, err := Write(dir, out, Options{CSV: true})
	require.NoError(t, err)
	for _, name := range []string{"hparam-lr", "loss", "accuracy", "timing", "offset-lr", "effective-lr"} {
		checkPNG(t, filepath.Join(out, name+".png"))
	}
}

// Per-step figures draw a point per step of each pass, and a rank's value
// at a step keeps its slot's ratio (or distance) to that step's base.
func TestParamTracePerStep(t *testing.T) {
	r := loadRun(t, twoPassRun(t))
	lr, dropout := r.Params[0], r.Params[1]
	search := traceParam(r.pass(passSearch), lr, r.Ranks)
	main := traceParam(r.pass(passMain), lr, r.Ranks)
	require.True(t, search.perStep)
	require.True(t, main.perStep)
	assert.Len(t, search.xs, r.SearchSteps())
	assert.Len(t, main.xs, fx2Steps)
	for i, x := range main.xs {
		require.Equal(t, float64(i+1), x, "x is the steps done after each step")
	}
	for rank := range r.Ranks {
		assert.Len(t, search.ranks[rank], r.SearchSteps())
	}

	w := r.pass(passSearch)[3] // steps 151..200
	for rank := range r.Ranks {
		ratio := float64(w.Values["lr"][rank] / w.Base["lr"])
		assert.InDelta(t, float64(w.Values["lr"][rank]), search.ranks[rank][199], 1e-15, "the window's last step is its recorded value")
		assert.InDelta(t, float64(w.BaseSteps["lr"][0])*ratio, search.ranks[rank][150], 1e-15)
	}
	d := traceParam(r.pass(passSearch), dropout, r.Ranks)
	shift := float64(w.Values["dropout"][1] - w.Base["dropout"])
	assert.InDelta(t, float64(w.BaseSteps["dropout"][0])+shift, d.ranks[1][150], 1e-15, "additive: the same distance")
}

func TestParamTraceOldRunIsPerWindow(t *testing.T) {
	for _, dir := range []string{filepath.Join("testdata", "realrun"), ""} {
		if dir == "" {
			dir = t.TempDir()
			writeRun(t, dir, defaultFixture())
		}
		r := loadRun(t, dir)
		assert.False(t, r.TwoPass())
		tr := traceParam(r.pass(passSearch), r.Params[0], r.Ranks)
		assert.False(t, tr.perStep, "no base_steps: one point per window, as before")
		assert.Equal(t, windowSteps(r.Windows), tr.xs)
		md := Summarize(r).Markdown()
		assert.Contains(t, md, "| passes | one: the run never committed |")
		assert.Contains(t, md, "| final test accuracy |", "the results keep their labels")
	}
}

// A long run's per-step lines are thinned to about maxTracePoints, each
// window's last step kept.
func TestParamTraceThinsLongRuns(t *testing.T) {
	p := metrics.Param{Name: "lr", Scale: "log", Spread: "multiplicative"}
	var ws []metrics.WindowRecord
	for k := range 3 {
		steps := make([]metrics.Float, 5000)
		for i := range steps {
			steps[i] = 1
		}
		ws = append(ws, metrics.WindowRecord{Window: k, Step: (k + 1) * 5000, BaseSteps: map[string][]metrics.Float{"lr": steps},
			Base: map[string]metrics.Float{"lr": 1}, Values: map[string][]metrics.Float{"lr": {2}}})
	}
	tr := traceParam(ws, p, 1)
	assert.LessOrEqual(t, len(tr.xs), maxTracePoints+len(ws))
	assert.Greater(t, len(tr.xs), maxTracePoints/2)
	assert.Contains(t, tr.xs, 5000.0)
	assert.Equal(t, 15000.0, tr.xs[len(tr.xs)-1])
	assert.Equal(t, 2.0, tr.ranks[0][0])
}

func TestTwoPassFigures(t *testing.T) {
	dir := twoPassRun(t)
	out := t.TempDir()
	_, err := Write(dir, out, Options{})
	require.NoError(t, err)
	for _, name := range []string{"hparam-lr", "hparam-dropout", "loss", "accuracy", "timing", "offset-lr", "effective-lr", "effective-dropout"} {
		checkPNG(t, filepath.Join(out, name+".png"))
		checkSVG(t, filepath.Join(out, name+".svg"))
	}
	svg, err := os.ReadFile(filepath.Join(out, "hparam-lr.svg"))
	require.NoError(t, err)
	for _, label := range []string{"rank 0 (search)", "base (search)", "committed (main pass)", "commit (step 250)"} {
		assert.Contains(t, string(svg), label)
	}
	html, err := os.ReadFile(filepath.Join(out, "index.html"))
	require.NoError(t, err)
	assert.Contains(t, string(html), "<h2>Committed</h2>")
	assert.Contains(t, string(html), "max_lr 0.008 = 2× the schedule&#39;s 0.004")
}

func TestTwoPassCSV(t *testing.T) {
	dir := twoPassRun(t)
	var b strings.Builder
	require.NoError(t, WriteCSV(&b, loadRun(t, dir)))
	rows, err := csv.NewReader(strings.NewReader(b.String())).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, 1+fx2Search+21)
	assert.Equal(t, []string{"pass", "window", "step"}, rows[0][:3])
	assert.Equal(t, []string{"0", "4", "250"}, rows[fx2Search][:3])
	assert.Equal(t, []string{"1", "0", "50"}, rows[1+fx2Search][:3])
	assert.Equal(t, []string{"1", "20", "1010"}, rows[len(rows)-1][:3])
}

func TestCompareTwoPassRun(t *testing.T) {
	root := t.TempDir()
	a, b := filepath.Join(root, "twopass"), filepath.Join(root, "onepass")
	require.NoError(t, os.Mkdir(a, 0o755))
	require.NoError(t, os.Mkdir(b, 0o755))
	writeTwoPassRun(t, a)
	writeRun(t, b, defaultFixture())
	out := t.TempDir()
	_, err := Compare([]string{a, b}, out)
	require.NoError(t, err)
	checkPNG(t, filepath.Join(out, "compare-loss.png"))
	md, err := os.ReadFile(filepath.Join(out, CompareFile))
	require.NoError(t, err)
	s := summaryOf(t, a)
	assert.Contains(t, string(md), "| twopass | 1010 / 1010 | "+num(s.FinalLoss)+" |")
	assert.Contains(t, string(md), "| 0.985 |")
	assert.Contains(t, string(md), "| 250 steps (the run cost 1.25 runs) |")
	assert.Contains(t, string(md), "| — (one pass) |")
	final := means(loadRun(t, a).pass(passMain))
	assert.InDelta(t, final[len(final)-1], s.FinalLoss, 1e-12, "the main pass's last window")
}

func TestLoadRefusesPassesNoRunWrites(t *testing.T) {
	for name, lines := range map[string]string{
		"main pass without a commit": `{"type":"window","pass":1,"window":0,"step":5}`,
		"a third pass":               `{"type":"commit","step":5}` + "\n" + `{"type":"window","pass":2,"window":0,"step":5}`,
	} {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, MetricsFile), []byte(`{"type":"start","ranks":1}`+"\n"+lines+"\n"), 0o644))
		_, err := Load(dir)
		assert.ErrorIs(t, err, metrics.ErrCorrupt, name)
	}
}

func TestCommittedText(t *testing.T) {
	nan := math.NaN()
	for _, tc := range []struct {
		c    Committed
		want string
	}{
		{Committed{Scale: "log", Offset: math.Log(0.5), Value: 0.0005, Peak: nan}, "0.0005 = 0.5× the schedule's (offset u = -0.6931)"},
		{Committed{Scale: "linear", Offset: -0.02, Value: 0.08, Peak: 0.1, PeakField: "value"}, "value 0.08 = the schedule's 0.1 − 0.02 (offset u = -0.02)"},
		{Committed{Scale: "log", Value: 0.001, Frozen: true, Peak: nan}, "frozen at 0.001 (its explorer failed)"},
	} {
		assert.Equal(t, tc.want, tc.c.Text())
	}
}
