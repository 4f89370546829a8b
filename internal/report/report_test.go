package report

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"image"
	_ "image/png"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"

	"github.com/hdet-dev/hdet/internal/metrics"
)

// blankSizes renders a plot with a title and axes but no data, the
// baseline a real figure must clearly exceed.
var blankSizes = sync.OnceValues(func() (png, svg int) {
	dir, err := os.MkdirTemp("", "blank")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	p := plot.New()
	p.Title.Text = "an empty plot of the same size"
	p.Add(plotter.NewGrid())
	if err := savePlot(p, nil, dir, "blank"); err != nil {
		panic(err)
	}
	size := func(name string) int {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			panic(err)
		}
		return int(fi.Size())
	}
	return size("blank.png"), size("blank.svg")
})

func checkPNG(t *testing.T, path string) {
	t.Helper()
	blank, _ := blankSizes()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	cfg, format, err := image.DecodeConfig(bytes.NewReader(b))
	require.NoError(t, err, path)
	assert.Equal(t, "png", format)
	assert.Equal(t, 768, cfg.Width, path)
	assert.Equal(t, 432, cfg.Height, path)
	assert.Greater(t, len(b), blank+blank/2, path)
}

func checkSVG(t *testing.T, path string) {
	t.Helper()
	_, blank := blankSizes()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Greater(t, len(b), blank+blank/10, path)
	assert.GreaterOrEqual(t, bytes.Count(b, []byte("<path")), 25, "%s: too few drawn paths for data", path)
	dec := xml.NewDecoder(bytes.NewReader(b))
	root := ""
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, path)
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Local
		}
	}
	assert.Equal(t, "svg", root, path)
}

func TestWriteReport(t *testing.T) {
	run := t.TempDir()
	writeRun(t, run, defaultFixture())
	out := filepath.Join(t.TempDir(), "out")

	index, err := Write(run, out, Options{CSV: true})
	require.NoError(t, err)
	assert.True(t, filepath.IsAbs(index))
	assert.Equal(t, filepath.Join(out, "index.html"), index)

	for _, name := range []string{"hparam-lr", "hparam-dropout", "hparam-weight_decay", "loss", "accuracy", "weights", "timing"} {
		checkPNG(t, filepath.Join(out, name+".png"))
		checkSVG(t, filepath.Join(out, name+".svg"))
	}
	// All hyperparameters got the same weights: one heat map, not three.
	_, err = os.Stat(filepath.Join(out, "weights-lr.png"))
	assert.ErrorIs(t, err, fs.ErrNotExist)

	html, err := os.ReadFile(index)
	require.NoError(t, err)
	for _, name := range []string{"hparam-lr.png", "loss.png", "weights.png", "timing.png", "summary.md", CSVFile} {
		assert.Contains(t, string(html), `"`+name+`"`)
	}
	assert.NotContains(t, string(html), "<script")
	assert.NotContains(t, string(html), "http")

	_, err = os.Stat(filepath.Join(out, SummaryFile))
	assert.NoError(t, err)
}

func TestWeightsPerHyperparameterWhenTheyDiffer(t *testing.T) {
	run := t.TempDir()
	fx := defaultFixture()
	fx.distinctWeights = true
	writeRun(t, run, fx)
	out := t.TempDir()
	_, err := Write(run, out, Options{})
	require.NoError(t, err)
	for _, name := range []string{"weights-lr", "weights-dropout", "weights-weight_decay"} {
		checkPNG(t, filepath.Join(out, name+".png"))
	}
	_, err = os.Stat(filepath.Join(out, "weights.png"))
	assert.ErrorIs(t, err, fs.ErrNotExist)
}

func TestWriteDefaultOutDir(t *testing.T) {
	run := t.TempDir()
	writeRun(t, run, defaultFixture())
	index, err := Write(run, "", Options{})
	require.NoError(t, err)
	want, err := filepath.Abs(filepath.Join(run, "report", "index.html"))
	require.NoError(t, err)
	assert.Equal(t, want, index)
	_, err = os.Stat(filepath.Join(run, "report", CSVFile))
	assert.ErrorIs(t, err, fs.ErrNotExist, "no CSV unless asked")
}

// rawRecord is a metrics.jsonl line read without the metrics package, so
// the summary is checked against an independent reading of the file.
type rawRecord struct {
	Type            string                            `json:"type"`
	Step            int                               `json:"step"`
	TotalSteps      int                               `json:"total_steps"`
	WallSeconds     float64                           `json:"wall_seconds"`
	Losses          []*float64                        `json:"losses"`
	Healthy         []bool                            `json:"healthy"`
	Base            map[string]float64                `json:"base"`
	Eval            *struct{ Loss, Accuracy float64 } `json:"eval"`
	ConvergeSeconds float64                           `json:"converge_seconds"`
	Events          []struct{ Kind, Param string }    `json:"events"`
}

// expected is what summary.md must say, computed straight from the file.
type expected struct {
	windows                      []rawRecord
	total, steps, bestStep       int
	finalLoss, bestLoss          float64
	finalAcc, bestAcc, finalTest float64
	wall, converge               float64
	baseMin, baseMax             map[string]float64
	nullLosses                   int
}

func readExpected(t *testing.T, path string) expected {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	ex := expected{bestLoss: math.Inf(1), bestAcc: math.Inf(-1), finalAcc: math.NaN(), finalTest: math.NaN(),
		baseMin: map[string]float64{}, baseMax: map[string]float64{}}
	lastEvalStep := -1
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var rec rawRecord
		require.NoError(t, json.Unmarshal(sc.Bytes(), &rec))
		switch rec.Type {
		case "start":
			ex.total = rec.TotalSteps
		case "end":
			ex.wall = rec.WallSeconds
			if rec.Eval != nil && rec.Step > lastEvalStep {
				ex.finalAcc, ex.finalTest = rec.Eval.Accuracy, rec.Eval.Loss
				ex.bestAcc = math.Max(ex.bestAcc, rec.Eval.Accuracy)
			}
		case "window":
			ex.windows = append(ex.windows, rec)
			ex.steps = rec.Step
			sum, n := 0.0, 0
			for r, l := range rec.Losses {
				if l == nil {
					ex.nullLosses++
				} else if rec.Healthy[r] {
					sum += *l
					n++
				}
			}
			ex.finalLoss = sum / float64(n)
			if ex.finalLoss < ex.bestLoss {
				ex.bestLoss, ex.bestStep = ex.finalLoss, rec.Step
			}
			if rec.Eval != nil {
				ex.finalAcc, ex.finalTest = rec.Eval.Accuracy, rec.Eval.Loss
				ex.bestAcc = math.Max(ex.bestAcc, rec.Eval.Accuracy)
				lastEvalStep = rec.Step
			}
			ex.converge += rec.ConvergeSeconds
			for name, b := range rec.Base {
				if _, ok := ex.baseMin[name]; !ok {
					ex.baseMin[name], ex.baseMax[name] = b, b
				}
				ex.baseMin[name], ex.baseMax[name] = math.Min(ex.baseMin[name], b), math.Max(ex.baseMax[name], b)
			}
		}
	}
	require.NoError(t, sc.Err())
	return ex
}

// checkSummary compares Summarize and summary.md for the finished run in
// dir with an independent reading of its metrics.jsonl.
func checkSummary(t *testing.T, dir string) Summary {
	t.Helper()
	ex := readExpected(t, filepath.Join(dir, MetricsFile))
	require.NotEmpty(t, ex.windows)
	s := summaryOf(t, dir)
	assert.Equal(t, ex.steps, s.Steps)
	assert.Equal(t, ex.total, s.TotalSteps)
	assert.Equal(t, len(ex.windows), s.Windows)
	assert.True(t, s.Finished)
	assert.InDelta(t, ex.finalLoss, s.FinalLoss, 1e-12)
	assert.InDelta(t, ex.bestLoss, s.BestLoss, 1e-12)
	assert.Equal(t, ex.bestStep, s.BestLossStep)
	if !math.IsNaN(ex.finalAcc) {
		assert.InDelta(t, ex.finalAcc, s.FinalAccuracy, 1e-12)
		assert.InDelta(t, ex.bestAcc, s.BestAccuracy, 1e-12)
		assert.InDelta(t, ex.finalTest, s.FinalTestLoss, 1e-12)
	}
	assert.InDelta(t, ex.wall, s.WallSeconds, 1e-9)
	assert.InDelta(t, 100*ex.converge/ex.wall, s.ConvergePercent, 1e-9)
	for _, b := range s.Bases {
		assert.Equal(t, ex.windows[0].Base[b.Name], b.Start, b.Name)
		assert.Equal(t, ex.windows[len(ex.windows)-1].Base[b.Name], b.End, b.Name)
		assert.Equal(t, ex.baseMin[b.Name], b.Min, b.Name)
		assert.Equal(t, ex.baseMax[b.Name], b.Max, b.Name)
	}
	assert.Len(t, s.Bases, len(ex.baseMin))

	// summary.md shows these same numbers.
	out := t.TempDir()
	_, err := Write(dir, out, Options{})
	require.NoError(t, err)
	md, err := os.ReadFile(filepath.Join(out, SummaryFile))
	require.NoError(t, err)
	text := string(md)
	for _, want := range []string{
		"| final training loss (mean over healthy ranks) | " + num(ex.finalLoss) + " |",
		"| best training loss | " + num(ex.bestLoss) + " (step " + strconv.Itoa(ex.bestStep) + ") |",
		"| converge overhead (of wall time) | " + pct(100*ex.converge/ex.wall) + " |",
		fmt.Sprintf("step %d of %d (%.1f%%), %d windows, finished", ex.steps, ex.total, 100*float64(ex.steps)/float64(ex.total), len(ex.windows)),
	} {
		assert.Contains(t, text, want)
	}
	if !math.IsNaN(ex.finalAcc) {
		assert.Contains(t, text, "| final test accuracy | "+num(ex.finalAcc)+" |")
	}
	for _, b := range s.Bases {
		assert.Contains(t, text, "| "+b.Name+" | "+b.Scale+" | "+num(ex.windows[0].Base[b.Name])+" |")
	}
	return s
}

func TestSummaryMatchesFile(t *testing.T) {
	run := t.TempDir()
	writeRun(t, run, defaultFixture())
	ex := readExpected(t, filepath.Join(run, MetricsFile))
	require.Len(t, ex.windows, 20)
	require.Equal(t, 1, ex.nullLosses, "the fixture's NaN loss is written as null")
	s := checkSummary(t, run)
	require.Len(t, s.Bases, 3)

	frozenStep, clamped := 0, 0
	for _, w := range ex.windows {
		for _, e := range w.Events {
			switch e.Kind {
			case "frozen":
				frozenStep = w.Step
			case "clamped":
				clamped++
			}
		}
	}
	require.Len(t, s.Events, 2)
	assert.Equal(t, EventGroup{Kind: "frozen", Param: "dropout", Count: 1, FirstStep: frozenStep, LastStep: frozenStep,
		FirstMessage: "explorer dropout failed twice; frozen at 0.1"}, s.Events[0])
	assert.Equal(t, "clamped", s.Events[1].Kind)
	assert.Equal(t, clamped, s.Events[1].Count)
	assert.Equal(t, []RankHealth{{Rank: 3, Windows: []int{7}}}, s.Unhealthy)
}

// TestSummaryMatchesRealRun checks the report of a run the engine wrote:
// testdata/realrun/metrics.jsonl is a real 4-rank MNIST run (300 steps,
// T=25, rank 3 turned NaN from window 10 on), recorded with
// `mpirun -np 4 hdet run --set train.steps=300 --set train.eval_every=3
// --set explorers.lr.config.auto.start=150 --set train.fault_nan_rank=3
// --set train.fault_nan_window=10`.
func TestSummaryMatchesRealRun(t *testing.T) {
	dir := filepath.Join("testdata", "realrun")
	s := checkSummary(t, dir)
	assert.Equal(t, []RankHealth{{Rank: 3, Windows: []int{10, 11}}}, s.Unhealthy)
	out := t.TempDir()
	_, err := Write(dir, out, Options{CSV: true})
	require.NoError(t, err)
	for _, name := range []string{"loss", "timing"} {
		checkPNG(t, filepath.Join(out, name+".png"))
		checkSVG(t, filepath.Join(out, name+".svg"))
	}
	r, err := Load(dir)
	require.NoError(t, err)
	for _, p := range r.Params {
		checkPNG(t, filepath.Join(out, "hparam-"+fileStem(p.Name)+".png"))
	}
}

func TestEndRecordEval(t *testing.T) {
	run := t.TempDir()
	fx := defaultFixture()
	fx.windows, fx.total = 18, 18 // last window evaluation at step 750
	fx.endEval = &metrics.Eval{Loss: 0.05, Accuracy: 0.99}
	writeRun(t, run, fx)
	s := summaryOf(t, run)
	assert.Equal(t, 0.99, s.FinalAccuracy)
	assert.Equal(t, 0.99, s.BestAccuracy)
	assert.Equal(t, 900, s.BestAccuracyStep)
	assert.Equal(t, 0.05, s.FinalTestLoss)

	// With a window evaluation at the same step, the end record's is a repeat.
	run = t.TempDir()
	fx = defaultFixture()
	fx.endEval = &metrics.Eval{Loss: 0.05, Accuracy: 0.99}
	writeRun(t, run, fx)
	r, err := Load(run)
	require.NoError(t, err)
	evs := r.Evals()
	require.Len(t, evs, 4)
	assert.Equal(t, 1000, evs[3].Step)
	assert.NotEqual(t, metrics.Float(0.99), evs[3].Accuracy)
}

func TestUnfinishedAndTruncatedRun(t *testing.T) {
	run := t.TempDir()
	fx := defaultFixture()
	fx.windows, fx.finished = 12, false
	writeRun(t, run, fx)
	f, err := os.OpenFile(filepath.Join(run, MetricsFile), os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString(`{"type":"window","window":12,"step":650,"losses":[0.5,0.`)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	out := t.TempDir()
	_, err = Write(run, out, Options{CSV: true})
	require.NoError(t, err)
	md, err := os.ReadFile(filepath.Join(out, SummaryFile))
	require.NoError(t, err)
	assert.Contains(t, string(md), "step 600 of 1000 (60.0%), 12 windows, no end record: still running or stopped early")
	assert.Contains(t, string(md), "cut short")
	checkPNG(t, filepath.Join(out, "loss.png"))

	r, err := Load(run)
	require.NoError(t, err)
	s := Summarize(r)
	assert.False(t, s.Finished)
	assert.True(t, s.Truncated)
	assert.Greater(t, s.WallSeconds, 0.0, "wall time from the records' times without an end record")
}

func TestStartOnlyAndSingleWindow(t *testing.T) {
	for _, windows := range []int{0, 1} {
		run := t.TempDir()
		fx := defaultFixture()
		fx.windows, fx.finished = windows, false
		writeRun(t, run, fx)
		out := t.TempDir()
		index, err := Write(run, out, Options{CSV: true})
		require.NoError(t, err, "windows=%d", windows)
		_, err = os.Stat(index)
		require.NoError(t, err)
		if windows == 1 {
			checkPNG(t, filepath.Join(out, "hparam-lr.png"))
		}
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, MetricsFile), []byte("this is not json\nat all\n"), 0o644))
	_, err := Write(dir, t.TempDir(), Options{})
	assert.ErrorIs(t, err, metrics.ErrCorrupt)

	require.NoError(t, os.WriteFile(filepath.Join(dir, MetricsFile), []byte(`{"type":"window","window":0,"step":5}`+"\n"), 0o644))
	_, err = Write(dir, t.TempDir(), Options{})
	assert.ErrorIs(t, err, metrics.ErrNoStart)

	_, err = Write(filepath.Join(dir, "missing"), t.TempDir(), Options{})
	assert.ErrorIs(t, err, fs.ErrNotExist)
}

func TestLoadMetricsFilePath(t *testing.T) {
	run := t.TempDir()
	writeRun(t, run, defaultFixture())
	r, err := Load(filepath.Join(run, MetricsFile))
	require.NoError(t, err)
	assert.Equal(t, filepath.Base(run), r.Name)
	assert.Len(t, r.Windows, 20)
}

func TestResumedRunKeepsLastCopyOfWindow(t *testing.T) {
	run := t.TempDir()
	fx := defaultFixture()
	fx.windows, fx.finished = 6, false
	writeRun(t, run, fx)
	// The resumed run restarts from window 4 with other losses.
	fx.windows, fx.finished, fx.seed = 20, true, 9
	writeRun(t, run, fx)
	r, err := Load(run)
	require.NoError(t, err)
	assert.Len(t, r.Windows, 20)
	assert.Equal(t, 1, r.Resumes)
	assert.NotNil(t, r.End)
	for i, w := range r.Windows {
		assert.Equal(t, i, w.Window)
	}
}

func TestCSV(t *testing.T) {
	run := t.TempDir()
	writeRun(t, run, defaultFixture())
	out := t.TempDir()
	_, err := Write(run, out, Options{CSV: true})
	require.NoError(t, err)
	f, err := os.Open(filepath.Join(out, CSVFile))
	require.NoError(t, err)
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, 21, "header and one row per window")
	header := rows[0]
	// pass, window, step, 4 losses, mean, 4 healthy, 3×(base+4 values), 3×4 weights, 3 seconds, 2 eval
	assert.Len(t, header, 3+4+1+4+3*5+3*4+3+2)
	col := map[string]int{}
	for i, h := range header {
		col[h] = i
	}
	for _, name := range []string{"pass", "window", "step", "loss_r0", "loss_r3", "loss_mean", "healthy_r3", "lr_base", "lr_r0",
		"dropout_base", "weight_decay_r3", "weight_lr_r0", "fanout_seconds", "converge_seconds", "plan_seconds", "eval_loss", "eval_accuracy"} {
		assert.Contains(t, col, name)
	}

	r, err := Load(run)
	require.NoError(t, err)
	for i, w := range r.Windows {
		row := rows[i+1]
		assert.Equal(t, "0", row[col["pass"]], "one pass")
		assert.Equal(t, strconv.Itoa(w.Step), row[col["step"]])
		got, err := strconv.ParseFloat(row[col["lr_base"]], 64)
		require.NoError(t, err)
		assert.Equal(t, float64(w.Base["lr"]), got)
	}
	nan := rows[1+7]
	assert.Equal(t, "", nan[col["loss_r3"]], "a NaN loss is an empty cell")
	assert.Equal(t, "0", nan[col["healthy_r3"]])
	assert.Equal(t, "", rows[1][col["weight_lr_r0"]], "no weights before the auto phase")
	assert.NotEqual(t, "", rows[1+9][col["weight_lr_r0"]])
	assert.Equal(t, "", rows[1][col["eval_accuracy"]])
	assert.NotEqual(t, "", rows[1+4][col["eval_accuracy"]])
}

func TestCompare(t *testing.T) {
	root := t.TempDir()
	a, b := filepath.Join(root, "hdet-run"), filepath.Join(root, "baseline")
	require.NoError(t, os.Mkdir(a, 0o755))
	require.NoError(t, os.Mkdir(b, 0o755))
	writeRun(t, a, defaultFixture())
	fx := defaultFixture()
	fx.seed, fx.lrScale, fx.windows, fx.finished = 2, 0.5, 15, false
	writeRun(t, b, fx)

	out := filepath.Join(root, "cmp")
	index, err := Compare([]string{a, b}, out)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(out, "index.html"), index)
	checkPNG(t, filepath.Join(out, "compare-loss.png"))
	checkSVG(t, filepath.Join(out, "compare-loss.svg"))

	md, err := os.ReadFile(filepath.Join(out, CompareFile))
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(md)), "\n")
	var rows []string
	for _, l := range lines {
		if strings.HasPrefix(l, "| hdet-run |") || strings.HasPrefix(l, "| baseline |") {
			rows = append(rows, l)
		}
	}
	require.Len(t, rows, 2)
	sa, sb := summaryOf(t, a), summaryOf(t, b)
	assert.Contains(t, rows[0], "| 1000 / 1000 | "+num(sa.FinalLoss)+" |")
	assert.Contains(t, rows[1], "| 750 / 1000 (unfinished) | "+num(sb.FinalLoss)+" |")

	html, err := os.ReadFile(index)
	require.NoError(t, err)
	assert.Contains(t, string(html), `src="compare-loss.png"`)
}

func TestRunLabelsDisambiguate(t *testing.T) {
	runs := []*Run{{Dir: "a/run", Name: "run"}, {Dir: "b/run", Name: "run"}, {Dir: "c", Name: "c"}}
	assert.Equal(t, []string{"a/run", "b/run", "c"}, runLabels(runs))
}

func summaryOf(t *testing.T, dir string) Summary {
	t.Helper()
	r, err := Load(dir)
	require.NoError(t, err)
	return Summarize(r)
}

// Under replica groups the summary counts replicas and says of how many
// ranks; without, it prints the ranks as before.
func TestSummaryNamesReplicaGroups(t *testing.T) {
	assert.Equal(t, "4", Summary{Ranks: 4}.ranksText())
	assert.Equal(t, "4", Summary{Ranks: 4, ReplicaSize: 1}.ranksText())
	assert.Equal(t, "3 replicas of 2 ranks (6 ranks)", Summary{Ranks: 3, ReplicaSize: 2}.ranksText())
	r := &Run{Start: metrics.StartRecord{Ranks: 3, ReplicaSize: 2, WorldSize: 6}, Ranks: 3}
	assert.Equal(t, 2, Summarize(r).ReplicaSize)
}

// A window that failed everywhere and rolled back is replaced by its re-run
// in the plots, but its events and left-out ranks stay in the summary.
func TestRolledBackWindowKeepsItsEvents(t *testing.T) {
	dir := t.TempDir()
	w, err := metrics.OpenWriter(filepath.Join(dir, MetricsFile))
	require.NoError(t, err)
	nan, one := metrics.Float(math.NaN()), metrics.Float(1)
	for _, rec := range []metrics.Record{
		metrics.StartRecord{Ranks: 2, TotalSteps: 20, WindowSteps: 10},
		metrics.WindowRecord{Window: 0, Step: 10, Losses: []metrics.Float{nan, nan}, Healthy: []bool{false, false},
			Events: []metrics.Event{{Kind: metrics.EventRollback, Message: "rolled back to the checkpoint at step 0"}}},
		metrics.WindowRecord{Window: 0, Step: 10, Losses: []metrics.Float{one, one}, Healthy: []bool{true, true}},
		metrics.WindowRecord{Window: 1, Step: 20, Losses: []metrics.Float{one, one}, Healthy: []bool{true, true}},
	} {
		require.NoError(t, w.Write(rec))
	}
	require.NoError(t, w.Close())
	r, err := Load(dir)
	require.NoError(t, err)
	require.Len(t, r.Windows, 2)
	assert.True(t, r.Windows[0].Healthy[0], "the re-run is the window's record")
	s := Summarize(r)
	require.Len(t, s.Events, 1)
	assert.Equal(t, metrics.EventRollback, s.Events[0].Kind)
	assert.Equal(t, []RankHealth{{Rank: 0, Windows: []int{0}}, {Rank: 1, Windows: []int{0}}}, s.Unhealthy)
}

// Events of replaced passes are tallied in step order with the rest: an
// event group's first and last steps are those of the run.
func TestReplacedPassesKeepStepOrder(t *testing.T) {
	clamped := []metrics.Event{{Kind: metrics.EventClamped, Param: "lr", Message: "clamped"}}
	r := &Run{
		Windows:  []metrics.WindowRecord{{Window: 0, Step: 10, Events: clamped}, {Window: 1, Step: 20}, {Window: 2, Step: 30, Events: clamped}},
		Replaced: []metrics.WindowRecord{{Window: 1, Step: 20, Events: clamped}},
	}
	s := Summarize(r)
	require.Len(t, s.Events, 1)
	assert.Equal(t, EventGroup{Kind: metrics.EventClamped, Param: "lr", Count: 3, FirstStep: 10, LastStep: 30, FirstMessage: "clamped"}, s.Events[0])
}
