package report

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/metrics"
	"github.com/hdet-dev/hdet/internal/tensorboard"
	"github.com/hdet-dev/hdet/internal/testenv"
)

// readTensorBoard reads the scalars of the TensorBoard runs (folders) with
// TensorBoard's own EventAccumulator: by run, by tag, [step, value, wall].
const readTensorBoard = `
import json, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
out = {}
for run in sys.argv[1:]:
    ea = EventAccumulator(run, size_guidance={"scalars": 0})
    ea.Reload()
    out[run] = {tag: [[e.step, e.value, e.wall_time] for e in ea.Scalars(tag)] for tag in ea.Tags()["scalars"]}
print(json.dumps(out))
`

func needTensorBoard(t *testing.T) {
	t.Helper()
	out, err := exec.Command(testenv.Python, "-c", "import tensorboard").CombinedOutput()
	if err != nil {
		testenv.Need(t, fmt.Errorf("no tensorboard for %s: %w: %s", testenv.Python, err, out), testenv.GetTorch)
	}
}

// The event files of a real two-pass run (make run's, in testdata/default:
// the search pass, the commit, the main pass) read back in TensorBoard as exactly the curves written,
// and those curves are metrics.jsonl's numbers.
func TestTensorBoardReadsBack(t *testing.T) {
	needTensorBoard(t)
	dir := filepath.Join("testdata", "default")
	out := t.TempDir()
	_, err := Write(dir, out, Options{})
	require.NoError(t, err)
	r, err := Load(dir)
	require.NoError(t, err)
	require.True(t, r.TwoPass())

	runs := map[int]string{passSearch: filepath.Join(out, "tensorboard", tbSearch), passMain: filepath.Join(out, "tensorboard", tbMain)}
	cmd := exec.Command(testenv.Python, "-c", readTensorBoard, runs[passSearch], runs[passMain])
	stdout, err := cmd.Output()
	require.NoError(t, err, "%s", stderrOf(err))
	var got map[string]map[string][][3]float64
	require.NoError(t, json.Unmarshal(stdout, &got))

	for p, run := range runs {
		want := map[string][][3]float64{}
		for _, s := range passScalars(r, p) {
			want[s.Tag] = append(want[s.Tag], [3]float64{float64(s.Step), float64(float32(s.Value)), s.Wall})
		}
		assert.Equal(t, want, got[run], "pass %d", p)
	}

	search, main := got[runs[passSearch]], got[runs[passMain]]
	ws := r.pass(passSearch)
	require.Len(t, search["loss/rank_0"], len(ws))
	for i, w := range ws {
		assert.Equal(t, float64(w.Step), search["loss/rank_0"][i][0])
		assert.InDelta(t, float64(w.Losses[0]), search["loss/rank_0"][i][1], 1e-6*float64(w.Losses[0]))
		assert.Equal(t, w.Time, search["loss/rank_0"][i][2])
	}
	for _, tag := range []string{"loss/mean", "loss/rank_3", "lr/base", "lr/rank_2", "lr/offset", "dropout/rank_1", "weight_decay/base", "drift", "seconds/converge"} {
		assert.NotEmpty(t, search[tag], tag)
	}
	lr := float64(r.Commit.Committed["lr"].Value)
	require.Len(t, search["commit/lr"], 1)
	assert.Equal(t, [3]float64{float64(r.Commit.Step), float64(float32(lr)), r.Commit.Time}, search["commit/lr"][0])
	assert.NotEmpty(t, main["eval/accuracy"])
	assert.NotContains(t, main, "commit/lr", "the commit is drawn where the search pass ended")
	assert.Len(t, main["loss/mean"], len(r.pass(passMain)))
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

// A one-pass run has one TensorBoard run, "train"; once it commits (a
// report of the live run, then the final one), the two passes' replace it.
func TestTensorBoardOnePassThenTwo(t *testing.T) {
	run := t.TempDir()
	writeRun(t, run, defaultFixture())
	r, err := Load(run)
	require.NoError(t, err)
	require.False(t, r.TwoPass())
	tb := t.TempDir()
	dirs, err := writeTensorBoard(r, tb)
	require.NoError(t, err)
	assert.Equal(t, []string{filepath.Join(tb, tbTrain)}, dirs)
	assert.FileExists(t, filepath.Join(tb, tbTrain, tbFile(r)))

	last := r.Windows[len(r.Windows)-1]
	r.Commit = &metrics.CommitRecord{Time: last.Time, Step: last.Step}
	dirs, err = writeTensorBoard(r, tb)
	require.NoError(t, err)
	assert.Equal(t, []string{filepath.Join(tb, tbSearch), filepath.Join(tb, tbMain)}, dirs)
	assert.NoFileExists(t, filepath.Join(tb, tbTrain, tbFile(r)), "the one-pass file is gone")
}

// Non-finite values (a diverged rank's loss) are left out, not written as
// NaN points.
func TestTensorBoardLeavesOutNonFinite(t *testing.T) {
	run := t.TempDir()
	writeRun(t, run, defaultFixture()) // rank 3 diverges in window 7
	r, err := Load(run)
	require.NoError(t, err)
	var rank3 []tensorboard.Scalar
	for _, s := range passScalars(r, passSearch) {
		assert.True(t, finite(s.Value), "%s at %d", s.Tag, s.Step)
		if s.Tag == "loss/rank_3" {
			rank3 = append(rank3, s)
		}
	}
	assert.Len(t, rank3, len(r.Windows)-1)
}
