package bridge

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/engine"
)

// TestMain lets this test binary act as a misbehaving worker: Start runs it
// with BRIDGE_FAKE_WORKER set.
func TestMain(m *testing.M) {
	if mode := os.Getenv("BRIDGE_FAKE_WORKER"); mode != "" {
		fakeWorker(mode)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func fakeWorker(mode string) {
	if mode == "exit3" {
		os.Exit(3)
	}
	c, err := net.Dial("unix", os.Getenv("HDET_SOCKET"))
	if err != nil {
		os.Exit(9)
	}
	hello := &Hello{Protocol: ProtocolVersion, Hyperparameters: []string{"lr"}, ParamCount: 2, Dtype: "float32",
		Buffers: []string{BufferFD}, ParamGroups: []ParamGroup{{Key: "0", Size: 2}}, SyncMode: SyncLocal}
	switch mode {
	case "garbage":
		_, _ = c.Write([]byte("Traceback (most recent call last):\n"))
	case "version":
		hello.Protocol = 99
		_ = writeFrame(c, &message{Type: msgHello, Hello: hello}, nil)
	case "silent":
	case "env":
		// Report the environment in the error message, for TestEnvironment.
		var env []string
		for _, k := range []string{"HDET_RANK", "HDET_WORLD_SIZE", "HDET_LOCAL_RANK", "HDET_SYNC_MODE", "HDET_RUN_DIR", "HDET_PASS", "HDET_RESUME_STATE", "HDET_RESUME_STEP", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "PYTHONFAULTHANDLER", "EXTRA"} {
			if v, ok := os.LookupEnv(k); ok {
				env = append(env, k+"="+v)
			}
		}
		_ = writeFrame(c, &message{Type: msgError, Message: strings.Join(env, " ")}, nil)
	case "resumable":
		resumable(c, hello)
	case "badloss":
		_ = writeFrame(c, &message{Type: msgHello, Hello: hello}, nil)
		if m, _, err := readFrame(c); err != nil || m.Type != msgWelcome {
			os.Exit(8)
		}
		_ = writeFrame(c, &message{Type: msgReady}, nil)
		if _, _, err := readFrame(c); err != nil {
			os.Exit(8)
		}
		_ = writeFrame(c, &message{Type: msgDone, Steps: 2}, []byte{1, 2, 3}) // not 2 float64
	}
	time.Sleep(time.Minute) // stay alive: the bridge must notice by itself
}

func startFake(t *testing.T, mode string, opts Options) (*Worker, error) {
	t.Helper()
	if opts.WorldSize == 0 {
		opts.WorldSize = 1
	}
	opts.Command = []string{os.Args[0]}
	opts.Env = append(opts.Env, "BRIDGE_FAKE_WORKER="+mode)
	opts.Stdout, opts.Stderr = io.Discard, io.Discard
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 20 * time.Second
	}
	return Start(context.Background(), opts)
}

func TestStartFailures(t *testing.T) {
	for _, tc := range []struct {
		mode, want string
		is         error
		timeout    time.Duration
	}{
		{"exit3", "exit status 3", ErrExited, 0},
		{"garbage", "frame does not start with", ErrProtocol, 0},
		{"version", "worker speaks 99, this hdet speaks 4", ErrVersion, 0},
		{"silent", "no HELLO within 500ms", ErrTimeout, 500 * time.Millisecond},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			w, err := startFake(t, tc.mode, Options{Rank: 2, WorldSize: 4, MasterPort: 29557, StartTimeout: tc.timeout})
			require.Error(t, err)
			assert.Nil(t, w)
			assert.ErrorIs(t, err, tc.is)
			assert.Contains(t, err.Error(), tc.want)
			assert.True(t, strings.HasPrefix(err.Error(), "rank 2: worker (pid "), err.Error())
		})
	}
}

func TestBadDoneIsProtocolError(t *testing.T) {
	w, err := startFake(t, "badloss", Options{})
	require.NoError(t, err)
	_, err = w.TrainWindow(context.Background(), engine.Window{Start: 0, Steps: 2})
	assert.ErrorIs(t, err, ErrProtocol)
	assert.Contains(t, err.Error(), "expected 2 float64 (16 bytes), got 3 bytes")
	assert.NoError(t, w.Close())
}

func TestEnvironment(t *testing.T) {
	t.Setenv("RANK", "77") // inherited values must not leak through
	t.Setenv("MASTER_PORT", "1")
	require.NoError(t, os.Unsetenv("OMP_NUM_THREADS"))
	require.NoError(t, os.Unsetenv("PYTHONFAULTHANDLER"))
	_, err := startFake(t, "env", Options{Rank: 1, WorldSize: 3, LocalRank: 1, LocalSize: 3, SyncMode: SyncGradients,
		MasterPort: 29555, GPU: "1", Env: []string{"EXTRA=x"}})
	require.ErrorIs(t, err, ErrWorker)
	for _, kv := range []string{"HDET_RANK=1", "HDET_WORLD_SIZE=3", "HDET_LOCAL_RANK=1", "HDET_SYNC_MODE=gradients",
		"RANK=1", "WORLD_SIZE=3", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=3", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=29555", "CUDA_VISIBLE_DEVICES=1", "OMP_NUM_THREADS=1", "PYTHONFAULTHANDLER=1", "EXTRA=x"} {
		assert.Contains(t, err.Error(), kv)
	}
	assert.Contains(t, strings.Fields(err.Error()), "HDET_PASS=search", "the pass, always")
	assert.NotContains(t, err.Error(), "HDET_RESUME_", "a fresh start")

	t.Setenv("HDET_SYNC_MODE", "gradients")
	_, err = startFake(t, "env", Options{Rank: 0, WorldSize: 2, MasterPort: 29556, SyncMode: ""})
	require.ErrorIs(t, err, ErrWorker)
	assert.NotContains(t, err.Error(), "HDET_SYNC_MODE", "no configured mode: the script's")
	assert.NotContains(t, err.Error(), "RANK=77")
	assert.NotContains(t, err.Error(), "OMP_NUM_THREADS", "one rank on the host: the script's threads")
	for _, kv := range []string{"RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=0", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=29556"} {
		assert.Contains(t, err.Error(), kv, "torchrun's variables in every mode")
	}
	// A replica of 4 over two hosts of 2 ranks: torchrun's view on this host.
	_, err = startFake(t, "env", Options{Rank: 6, WorldSize: 8, LocalRank: 0, LocalSize: 2, ReplicaSize: 4, ReplicaRank: 2,
		ReplicaLocalRank: 0, ReplicaLocalSize: 2, MasterPort: 29558})
	require.ErrorIs(t, err, ErrWorker)
	for _, kv := range []string{"RANK=2", "WORLD_SIZE=4", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=2", "HDET_RANK=6"} {
		assert.Contains(t, strings.Fields(err.Error()), kv)
	}
	t.Setenv("OMP_NUM_THREADS", "4")
	t.Setenv("PYTHONFAULTHANDLER", "")
	_, err = startFake(t, "env", Options{Rank: 0, WorldSize: 2, LocalSize: 2, MasterPort: 29557})
	require.ErrorIs(t, err, ErrWorker)
	assert.Contains(t, err.Error(), "OMP_NUM_THREADS=4", "the user's setting stands")
	assert.Contains(t, strings.Fields(err.Error()), "PYTHONFAULTHANDLER=", "the user's setting stands (empty: off)")
}

func TestOptionsValidation(t *testing.T) {
	for name, o := range map[string]Options{
		"no command":   {WorldSize: 1, SyncMode: SyncLocal},
		"bad rank":     {Command: []string{"x"}, Rank: 4, WorldSize: 4, SyncMode: SyncLocal},
		"bad mode":     {Command: []string{"x"}, WorldSize: 1, SyncMode: "diloco"},
		"no port":      {Command: []string{"x"}, WorldSize: 2, SyncMode: SyncGradients},
		"bad timeout":  {Command: []string{"x"}, WorldSize: 1, SyncMode: SyncLocal, Timeout: -1},
		"neg local rk": {Command: []string{"x"}, WorldSize: 1, SyncMode: SyncLocal, LocalRank: -1},
		"replica's local rank": {Command: []string{"x"}, WorldSize: 4, MasterPort: 1, ReplicaSize: 2, ReplicaRank: 1,
			ReplicaLocalRank: 2, ReplicaLocalSize: 2},
	} {
		_, err := Start(context.Background(), o)
		assert.ErrorIs(t, err, ErrOptions, name)
	}
}

func TestFrameRoundTrip(t *testing.T) {
	var b bytes.Buffer
	payload := make([]byte, 16)
	binary.LittleEndian.PutUint64(payload, math.Float64bits(math.NaN()))
	binary.LittleEndian.PutUint64(payload[8:], math.Float64bits(0.25))
	in := &message{Type: msgPlan, Window: 3, Start: 30, Steps: 10, Values: map[string][]float64{"lr": {0.1, 1e-300}}, Load: true}
	require.NoError(t, writeFrame(&b, in, payload))
	m, p, err := readFrame(&b)
	require.NoError(t, err)
	assert.Equal(t, in, m)
	f, err := float64s(p, 2)
	require.NoError(t, err)
	assert.True(t, math.IsNaN(f[0]), "NaN losses survive the binary part")
	assert.Equal(t, 0.25, f[1])
	_, _, err = readFrame(&b)
	assert.ErrorIs(t, err, io.EOF, "clean end between frames")
}

func TestReadFrameRejectsGarbage(t *testing.T) {
	header := func(nj, nb uint32) []byte {
		h := append([]byte("HDET"), make([]byte, 8)...)
		binary.LittleEndian.PutUint32(h[4:], nj)
		binary.LittleEndian.PutUint32(h[8:], nb)
		return h
	}
	js, _ := json.Marshal(map[string]string{"x": "y"})
	for name, raw := range map[string][]byte{
		"bad magic":       []byte("GET / HTTP/1.1\r\n"),
		"short header":    []byte("HDET\x01"),
		"huge json":       header(1<<31, 0),
		"huge binary":     header(2, 1<<31),
		"empty json":      header(0, 0),
		"truncated body":  append(header(100, 0), '{'),
		"not json":        append(header(3, 0), "abc"...),
		"no message type": append(header(uint32(len(js)), 0), js...),
	} {
		_, _, err := readFrame(bytes.NewReader(raw))
		assert.ErrorIs(t, err, ErrProtocol, name)
	}
}

func TestTailKeepsLastLines(t *testing.T) {
	tl := newTail(16)
	_, _ = tl.Write([]byte("first line\nsecond\nthird\n"))
	assert.Equal(t, "second\nthird\n", tl.String())
	err := &WorkerError{Rank: 3, PID: 42, Op: "training window 0 (steps 0-9)", Err: ErrExited, Stderr: "boom\n"}
	assert.Equal(t, "rank 3: worker (pid 42) training window 0 (steps 0-9): worker process exited\n--- rank 3's worker stderr: its error ---\nboom", err.Error())
}

// What an error quotes of a worker's stderr: the last traceback whole, or,
// without one, the last lines that are not warnings.
func TestRelevantStderr(t *testing.T) {
	warn := "/x/site-packages/torch/a.py:3: UserWarning: TypedStorage is deprecated\n  return cls(*args)\n"
	tb := "Traceback (most recent call last):\n  File \"train.py\", line 1, in <module>\n    import torch\nModuleNotFoundError: No module named 'torch'\n"
	assert.Equal(t, strings.TrimSpace(tb), relevant(warn+"Traceback (most recent call last):\nold\n"+warn+tb))
	assert.Equal(t, "loading data\nhdet: gave up", relevant("loading data\n"+warn+"hdet: gave up\n"))
	assert.Empty(t, relevant(warn))

	// A worker that aborted in torch's teardown: faulthandler's report.
	fatal := "terminate called without an active exception\nFatal Python error: Aborted\n" +
		"Python runtime state: finalizing (tstate=0x1)\n\nThread 0x7f (most recent call first):\n  <no Python frame>\n"
	got := relevant("step 15\n" + tb + "training on\n" + fatal + "\nExtension modules: numpy.core, torch._C (total: 2)\n")
	assert.Equal(t, strings.TrimSpace(fatal), got, "the native message, the state and the stacks; no module list")
	assert.Equal(t, strings.TrimSpace(tb), relevant("Fatal Python error: Aborted\n"+tb), "the last report wins")
	long := "Fatal Python error: Segmentation fault\n" + strings.Repeat("  File \"x.py\", line 1 in f\n", 100)
	assert.Len(t, strings.Split(relevant(long), "\n"), maxFatal, "a deep stack is cut")
}
