package session

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"unsafe"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/checkpoint"
	"github.com/hdet-dev/hdet/internal/metrics"
	"github.com/hdet-dev/hdet/internal/testenv"
	"github.com/hdet-dev/hdet/mpi/reduce"
)

// solo is a world of one rank.
type solo struct{}

func (solo) Rank() int                                                          { return 0 }
func (solo) Size() int                                                          { return 1 }
func (solo) LocalRank() int                                                     { return 0 }
func (solo) LocalSize() int                                                     { return 1 }
func (solo) AllreduceFloat32([]float32, reduce.Op) error                        { return nil }
func (solo) AllreduceFloat64([]float64, reduce.Op) error                        { return nil }
func (solo) AllreducePtr(unsafe.Pointer, int, reduce.Datatype, reduce.Op) error { return nil }
func (solo) AllgatherFloat64(s, r []float64) error                              { copy(r, s); return nil }
func (solo) BcastMessage(m []byte, _ int) ([]byte, error)                       { return m, nil }

const tiny = "workload: {hidden: [16], batch_size: 32}\ntrain: {steps: 40, window: 10, seed: 2}\nrun: {progress: none, checkpoint_every: 1, keep: 10}\n"

func run(t *testing.T, dir string, sets ...string) (Outcome, string, error) {
	t.Helper()
	var out bytes.Buffer
	sets = append(sets, "workload.data="+testenv.NeedMNIST(t), "run.dir="+dir)
	o, err := Run(context.Background(), Options{World: solo{}, Out: &out, Log: zerolog.Nop(), Config: []byte(tiny), Sets: sets,
		AllreducePath: "host", Host: func() (string, error) { return "localhost", nil }, Abort: func(int) {}})
	return o, out.String(), err
}

// A run, stopped part-way by removing its newest checkpoints, resumes to the
// same parameters; the report waits for the caller.
func TestSessionRunsAndResumesBitExact(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	o, out, err := run(t, dir)
	require.NoError(t, err)
	assert.Contains(t, out, "after 40 steps on 1 ranks")
	require.NotNil(t, o.Report, "rank 0 leaves the report for after MPI_Finalize")
	_, err = os.Stat(filepath.Join(dir, "report"))
	assert.True(t, os.IsNotExist(err), "no report before the caller asks")
	want := o.Result.Checksum

	for _, step := range []string{"30", "40"} {
		require.NoError(t, os.Remove(filepath.Join(dir, "checkpoints", "ckpt-0000000000"+step+".hdet")))
	}
	o, _, err = run(t, dir)
	require.NoError(t, err)
	assert.Equal(t, want, o.Result.Checksum)
	recs, _, err := metrics.ReadFile(filepath.Join(dir, "metrics.jsonl"))
	require.NoError(t, err)
	var starts []int
	for _, r := range metrics.Of[metrics.StartRecord](recs) {
		starts = append(starts, r.ResumedFrom)
	}
	assert.Equal(t, []int{0, 20}, starts)
}

// Every config change that makes a checkpoint unusable is refused, naming
// the field and both values; a finished run is refused too.
func TestResumeRefusesAnIncompatibleConfig(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	_, _, err := run(t, dir)
	require.NoError(t, err)
	_, _, err = run(t, dir)
	var ue *UsageError
	require.ErrorAs(t, err, &ue)
	assert.Contains(t, err.Error(), "holds a finished run")
	require.NoError(t, os.Remove(filepath.Join(dir, "checkpoints", "ckpt-000000000040.hdet")))
	for set, want := range map[string]string{
		"train.window=5":         "train.window (10 in the checkpoint, 5 now)",
		"train.steps=50":         "train.steps (40 in the checkpoint, 50 now)",
		"workload.hidden=[8]":    "the model's shape (workload mnist [16] in the checkpoint, mnist [8] now)",
		"workload.optimizer=sgd": "workload.optimizer (adamw in the checkpoint, sgd now)",
		"train.seed=3":           "train.seed (2 in the checkpoint, 3 now)",
	} {
		_, _, err := run(t, dir, set)
		require.ErrorAs(t, err, &ue, set)
		assert.True(t, Agreed(err), "every rank refuses")
		assert.Contains(t, err.Error(), want)
	}
	ck, _, _, err := checkpoint.Latest(filepath.Join(dir, "checkpoints"))
	require.NoError(t, err)
	assert.Equal(t, 30, ck.Step, "a refused resume leaves the checkpoints alone")
	_, _, err = run(t, dir, "run.checkpoint_minutes=5", "run.keep=4")
	assert.NoError(t, err, "what may change on resume")
	assert.False(t, errors.Is(err, ErrPeerFailed))
}

// A workload.kind no workload has is a usage error naming the ones there
// are (session/workloads.go lists them).
func TestUnknownWorkloadKind(t *testing.T) {
	_, _, err := run(t, filepath.Join(t.TempDir(), "run"), "workload.kind=resnet")
	var ue *UsageError
	require.ErrorAs(t, err, &ue)
	assert.Contains(t, err.Error(), `workload.kind: got "resnet", want one of mnist`)
}

// A PyTorch worker that fails while finishing (after STOP) fails the job,
// on the rank it ran on, so hdet exits non-zero, but loses none of the run:
// model.bin, the end record and the report are still written, and the
// ranks end together (no collective is left). One that finishes cleanly
// does not fail.
func TestWorkerFailingAfterStopFailsTheRun(t *testing.T) {
	testenv.NeedTorch(t)
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	t.Setenv("PYTHONPATH", filepath.Join(root, "python"))
	script := filepath.Join(root, "internal", "bridge", "testdata", "worker.py")
	plugins := t.TempDir() // the script explores lr: hdet starts its built-in explorer
	build := exec.Command("go", "build", "-o", plugins, "./cmd/hdet-explorer-lr")
	build.Dir = root
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, fail := range []bool{false, true} {
		cmd := []string{testenv.Python, script, "--steps", "20", "--explore", "lr"}
		if fail {
			cmd = append(cmd, "--fail-after-stop")
		}
		dir := filepath.Join(t.TempDir(), "run")
		o, err := Run(context.Background(), Options{World: solo{}, Out: io.Discard, Log: zerolog.Nop(),
			Config: []byte("train: {steps: 20, window: 10}\nrun: {progress: none}\n"), Sets: []string{"run.dir=" + dir},
			Worker: cmd, PluginDir: plugins, AllreducePath: "host", Host: func() (string, error) { return "localhost", nil }, Abort: func(int) {}})
		if !fail {
			require.NoError(t, err)
			assert.Equal(t, 20, o.Result.Steps)
			continue
		}
		require.Error(t, err)
		assert.Contains(t, err.Error(), "the run finished (model.bin, metrics.jsonl and the report are in "+dir+
			"), then the script failed after hdet's STOP: worker: ")
		assert.Contains(t, err.Error(), "finishing after STOP: worker process exited (exit status 3)")
		assert.True(t, AfterRun(err))
		assert.True(t, Agreed(err), "no collective is left: the ranks end together; this one exits 1")
		assert.Equal(t, 20, o.Result.Steps)
		assert.FileExists(t, filepath.Join(dir, "model.bin"))
		end, rerr := os.ReadFile(filepath.Join(dir, "metrics.jsonl"))
		require.NoError(t, rerr)
		assert.Contains(t, string(end), `"type":"end"`)
		assert.Nil(t, o.Report, "written before the ranks part")
		assert.FileExists(t, filepath.Join(dir, "report", "index.html"))
	}
}

// A run directory on a full disk is a runtime error (exit 1) that names the
// room left and says a relaunch resumes; a path that is not a directory is
// the user's (a usage error, exit 2).
func TestRunDirErrorFullDiskIsNotUsage(t *testing.T) {
	dir := t.TempDir()
	full := runDirError(&os.PathError{Op: "write", Path: filepath.Join(dir, "config.yaml"), Err: syscall.ENOSPC}, dir)
	var ue *UsageError
	assert.False(t, errors.As(full, &ue), "a full disk is not a usage error: %v", full)
	assert.ErrorIs(t, full, syscall.ENOSPC)
	assert.Contains(t, full.Error(), "free of")
	assert.Contains(t, full.Error(), "launch the same command again once there is room")
	notDir := runDirError(&os.PathError{Op: "mkdir", Path: dir, Err: syscall.ENOTDIR}, dir)
	assert.True(t, errors.As(notDir, &ue), "a path that is not a directory is a usage error: %v", notDir)
}
