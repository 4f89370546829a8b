package bridge

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/engine"
	"github.com/hdet-dev/hdet/internal/plan"
	"github.com/hdet-dev/hdet/internal/workload"
)

// resumable is the fake worker of the resume tests: its HELLO says what
// FAKE_PROTOCOL, FAKE_RESUMABLE, FAKE_START_STEP and FAKE_PEAK_LR say; then it answers
// each SAVE by writing the request, as JSON, to the path it names, plus
// HDET_PASS and HDET_RESUME_STEP (a write refused: SAVED says why, as the
// client does), and exits at any other message.
func resumable(c net.Conn, hello *Hello) {
	hello.Resumable = os.Getenv("FAKE_RESUMABLE") == "1"
	hello.StartStep, _ = strconv.Atoi(os.Getenv("FAKE_START_STEP"))
	hello.ScriptPeakLR, _ = strconv.ParseFloat(os.Getenv("FAKE_PEAK_LR"), 64)
	if v := os.Getenv("FAKE_PROTOCOL"); v != "" {
		hello.Protocol, _ = strconv.Atoi(v)
	}
	_ = writeFrame(c, &message{Type: msgHello, Hello: hello}, nil)
	if m, _, err := readFrame(c); err != nil || m.Type != msgWelcome || m.Protocol != hello.Protocol {
		os.Exit(8)
	}
	_ = writeFrame(c, &message{Type: msgReady}, nil)
	for {
		var h [headerSize]byte
		if _, err := io.ReadFull(c, h[:]); err != nil {
			os.Exit(0)
		}
		body := make([]byte, binary.LittleEndian.Uint32(h[4:])+binary.LittleEndian.Uint32(h[8:]))
		var req saveRequest
		if _, err := io.ReadFull(c, body); err != nil || json.Unmarshal(body, &req) != nil || req.Type != msgSave {
			os.Exit(0)
		}
		b, _ := json.Marshal(map[string]any{"path": req.Path, "step": req.Step, "pass": req.Pass,
			"env_pass": os.Getenv("HDET_PASS"), "env_step": os.Getenv("HDET_RESUME_STEP")})
		saved := &message{Type: msgSaved, Path: req.Path, Step: req.Step}
		if strings.HasSuffix(req.Path, "full.pt") { // a full disk, as Python's OSError says it
			saved.Refused, saved.Errno = "[Errno 28] No space left on device", int(syscall.ENOSPC)
		} else if err := os.WriteFile(req.Path, b, 0o644); err != nil {
			saved.Refused = err.Error()
		}
		_ = writeFrame(c, saved, nil)
	}
}

func fakeEnv(resumable bool, step int, protocol int) []string {
	env := []string{"FAKE_START_STEP=" + strconv.Itoa(step), "FAKE_PROTOCOL=" + strconv.Itoa(protocol)}
	if resumable {
		env = append(env, "FAKE_RESUMABLE=1")
	}
	return env
}

func TestSaveStateWritesTheWorkersFile(t *testing.T) {
	dir := t.TempDir()
	w, err := startFake(t, "resumable", Options{RunDir: dir, Env: fakeEnv(true, 0, ProtocolVersion)})
	require.NoError(t, err)
	defer w.Close()
	assert.True(t, w.Resumable())
	ctx := context.Background()
	path := filepath.Join(StateDir(dir, 0), StateFile(plan.PassSearch, 0))
	assert.Equal(t, filepath.Join(dir, "worker", "rank-0", "search-step-0.pt"), path)
	require.NoError(t, w.SaveState(ctx, path, 0, plan.PassSearch))
	var got map[string]any
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &got))
	assert.Equal(t, map[string]any{"path": path, "step": 0.0, "pass": "search", "env_pass": "search", "env_step": ""}, got)

	err = w.SaveState(ctx, path, 10, plan.PassSearch)
	assert.ErrorIs(t, err, ErrOptions, "the worker is at step 0, not 10")
	assert.Contains(t, err.Error(), "the worker is at step 0 of the search pass")
	err = w.SaveState(ctx, path, 0, plan.PassMain)
	assert.ErrorIs(t, err, ErrOptions, "nor in the main pass")
}

// A disk that refuses the state file, in the worker or before it, is
// workload.ErrStateRefused, and the worker saves again at the next window.
func TestRefusedSaveLeavesTheWorkerRunning(t *testing.T) {
	dir := t.TempDir()
	w, err := startFake(t, "resumable", Options{RunDir: dir, Env: fakeEnv(true, 0, ProtocolVersion)})
	require.NoError(t, err)
	defer w.Close()
	ctx := context.Background()
	taken := filepath.Join(dir, "taken.pt")
	require.NoError(t, os.Mkdir(taken, 0o755))
	err = w.SaveState(ctx, taken, 0, plan.PassSearch)
	require.ErrorIs(t, err, workload.ErrStateRefused, "the worker could not write it")
	assert.Contains(t, err.Error(), "is a directory")
	blocked := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(blocked, nil, 0o644))
	err = w.SaveState(ctx, filepath.Join(blocked, "rank-0", "x.pt"), 0, plan.PassSearch)
	require.ErrorIs(t, err, workload.ErrStateRefused, "hdet could not make its folder")
	err = w.SaveState(ctx, filepath.Join(dir, "full.pt"), 0, plan.PassSearch)
	require.ErrorIs(t, err, workload.ErrStateRefused, "a full disk")
	assert.Contains(t, err.Error(), "no space left on device (the file system of "+dir+" has ", "named as hdet's own writes are")
	require.NoError(t, w.SaveState(ctx, filepath.Join(dir, "ok.pt"), 0, plan.PassSearch), "the worker runs on")
}

func TestResumedWorkerStartsAtItsStep(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(StateDir(dir, 0), StateFile(plan.PassMain, 20))
	w, err := startFake(t, "resumable", Options{RunDir: dir, Pass: plan.PassMain, ResumeState: state, ResumeStep: 20,
		Env: append(fakeEnv(true, 20, ProtocolVersion), "FAKE_PEAK_LR=0.25")})
	require.NoError(t, err)
	defer w.Close()
	assert.Equal(t, 0.25, w.PeakLR(), "the peak rate of the pass before the resume, from the HELLO")
	path := filepath.Join(StateDir(dir, 0), StateFile(plan.PassMain, 20))
	require.NoError(t, w.SaveState(context.Background(), path, 20, plan.PassMain), "it is at step 20 of the main pass")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Contains(t, string(b), `"env_pass":"main","env_step":"20","pass":"main"`)
	_, err = w.TrainWindow(context.Background(), engine.Window{Start: 0, Steps: 2, V: engine.Values{"lr": {1, 1}}})
	assert.ErrorIs(t, err, ErrBadPlan)
	assert.Contains(t, err.Error(), "window starts at step 0, the worker is at step 20")
}

func TestResumeRefusesAWorkerThatDidNot(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(StateDir(dir, 1), StateFile(plan.PassSearch, 30))
	for _, tc := range []struct {
		name      string
		resume    string
		resumable bool
		step      int
		is        error
		want      string
	}{
		{"not resumable", state, false, 0, ErrSetting, "the script did not pass state= to hdet.attach this time"},
		{"another step", state, true, 10, ErrConflict, "hdet resumes this run at step 30 of the search pass, but the script says it continues from step 10"},
		{"not asked", "", true, 10, ErrConflict, "the script says it continues from step 10 (hdet.attach's start_step), but hdet starts it from step 0 of the search pass"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := startFake(t, "resumable", Options{Rank: 1, WorldSize: 2, MasterPort: 29559, RunDir: dir, ResumeState: tc.resume, ResumeStep: 30,
				Env: fakeEnv(tc.resumable, tc.step, ProtocolVersion)})
			assert.Nil(t, w)
			require.ErrorIs(t, err, tc.is)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// A version-3 worker (an older hdet package) still runs, answered in its
// version, and is never resumable.
func TestVersion3WorkerRunsNotResumable(t *testing.T) {
	w, err := startFake(t, "resumable", Options{Env: fakeEnv(false, 0, 3)})
	require.NoError(t, err)
	defer w.Close()
	assert.False(t, w.Resumable())
	err = w.SaveState(context.Background(), filepath.Join(t.TempDir(), "x.pt"), 0, plan.PassSearch)
	assert.ErrorIs(t, err, ErrOptions)
	assert.True(t, strings.Contains(err.Error(), "not resumable"), err.Error())
}
