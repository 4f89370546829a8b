package report

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/hdet-dev/hdet/internal/atomicfile"
	"github.com/hdet-dev/hdet/internal/metrics"
	"github.com/hdet-dev/hdet/internal/tensorboard"
)

// DefaultTensorBoardDir is where Write puts the TensorBoard event files
// when Options.TensorBoard is empty: a folder inside the report's, so that
// tensorboard --logdir on the run directory, or on a folder of runs, finds
// them.
func DefaultTensorBoardDir(outDir string) string { return filepath.Join(outDir, "tensorboard") }

// TensorBoard runs, one folder per pass: a run that committed has a search
// and a main pass, each counting steps from 0; one that did not, one pass.
const (
	tbSearch = "search"
	tbMain   = "main"
	tbTrain  = "train"
)

// tbFile is the event file's name in a pass's folder: TensorBoard reads
// files named *tfevents*; the same name for the same run, so that writing
// again (a report of a live run, then the final one) replaces it.
func tbFile(r *Run) string {
	return fmt.Sprintf("events.out.tfevents.%d.hdet", int64(r.FirstStart.Time))
}

// writeTensorBoard writes r's values as TensorBoard scalars into dir, one
// folder per pass, and returns the folders written. A one-pass run's folder
// is replaced by the two passes' once the run commits.
func writeTensorBoard(r *Run, dir string) ([]string, error) {
	passes := map[int]string{passSearch: tbTrain}
	if r.TwoPass() {
		passes = map[int]string{passSearch: tbSearch, passMain: tbMain}
		stale := filepath.Join(dir, tbTrain, tbFile(r))
		if err := os.Remove(stale); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("report: %w", err)
		}
	}
	var out []string
	for _, p := range []int{passSearch, passMain} {
		name, ok := passes[p]
		if !ok {
			continue
		}
		sub := filepath.Join(dir, name)
		if err := os.MkdirAll(sub, 0o755); err != nil {
			return nil, fmt.Errorf("report: %w", err)
		}
		data := tensorboard.Events(r.FirstStart.Time, passScalars(r, p))
		if err := atomicfile.Write(filepath.Join(sub, tbFile(r)), data); err != nil {
			return nil, fmt.Errorf("report: %w", err)
		}
		out = append(out, sub)
	}
	return out, nil
}

// passScalars is pass p's curves: per window each rank's loss and probe
// loss, their mean over the healthy ranks, the drift and the phases'
// seconds; per hyperparameter its base at every step, each rank's value,
// the learned offset and estimate; the evaluations; at the search pass's
// end, the committed values. Values that are not finite are left out.
func passScalars(r *Run, p int) []tensorboard.Scalar {
	var out []tensorboard.Scalar
	var add addFn = func(tag string, step int, wall float64, v float64) {
		if finite(v) {
			out = append(out, tensorboard.Scalar{Tag: tag, Step: int64(step), Wall: wall, Value: v})
		}
	}
	for _, w := range r.pass(p) {
		add("loss/mean", w.Step, w.Time, MeanLoss(w))
		perRank(add, "loss", w, w.Losses, r.Ranks)
		perRank(add, "probe", w, w.Probe, r.Ranks)
		if w.Drift != nil {
			add("drift", w.Step, w.Time, float64(*w.Drift))
		}
		add("seconds/plan", w.Step, w.Time, w.PlanSeconds)
		add("seconds/fanout", w.Step, w.Time, w.FanoutSeconds)
		add("seconds/converge", w.Step, w.Time, w.ConvergeSeconds)
		for _, prm := range r.Params {
			paramScalars(add, prm.Name, w, r.Ranks)
		}
	}
	walls := map[int]float64{} // an evaluation's time: its window's, or the end record's
	for _, w := range r.pass(p) {
		walls[w.Step] = w.Time
	}
	for _, e := range r.passEvals(p) {
		wall, ok := walls[e.Step]
		if !ok && r.End != nil {
			wall = r.End.Time
		}
		add("eval/loss", e.Step, wall, float64(e.Loss))
		add("eval/accuracy", e.Step, wall, float64(e.Accuracy))
	}
	if p == passSearch && r.Commit != nil {
		for _, prm := range r.Params {
			if c, ok := r.Commit.Committed[prm.Name]; ok {
				add("commit/"+prm.Name, r.Commit.Step, r.Commit.Time, float64(c.Value))
			}
		}
	}
	return out
}

type addFn func(tag string, step int, wall float64, v float64)

// paramScalars adds hyperparameter name's curves of window w: its base at
// each step (at the window's last step for runs recorded before
// base_steps), each rank's value at the window's last step, the offset and
// estimate.
func paramScalars(add addFn, name string, w metrics.WindowRecord, ranks int) {
	if steps := w.BaseSteps[name]; len(steps) > 0 {
		first := w.Step - len(steps)
		for i, b := range steps {
			add(name+"/base", first+i+1, w.Time, float64(b))
		}
	} else if b, ok := w.Base[name]; ok {
		add(name+"/base", w.Step, w.Time, float64(b))
	}
	perRank(add, name, w, w.Values[name], ranks)
	if v, ok := w.Offset[name]; ok {
		add(name+"/offset", w.Step, w.Time, float64(v))
	}
	if v, ok := w.Estimate[name]; ok {
		add(name+"/estimate", w.Step, w.Time, float64(v))
	}
}

// perRank adds one curve per rank, group/rank_NN, the rank zero-padded so
// that TensorBoard lists the ranks in order.
func perRank(add addFn, group string, w metrics.WindowRecord, vs []metrics.Float, ranks int) {
	width := len(strconv.Itoa(max(ranks, len(vs)) - 1))
	for i, v := range vs {
		add(fmt.Sprintf("%s/rank_%0*d", group, width, i), w.Step, w.Time, float64(v))
	}
}
