package bridge

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hdet-dev/hdet/internal/testenv"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/engine"
)

type started struct {
	*Worker
	out *testenv.SyncBuffer
}

func pythonOptions(t *testing.T, mode string, args ...string) Options {
	if mode == SyncGradients {
		args = append(args, "--ddp")
	}
	return Options{
		Command:   append([]string{testenv.Python, "testdata/worker.py"}, args...),
		WorldSize: 1, SyncMode: mode,
		Timeout: time.Minute,
	}
}

func startPython(t *testing.T, opts Options) started {
	t.Helper()
	testenv.NeedTorch(t)
	out := &testenv.SyncBuffer{}
	opts.Stdout, opts.Stderr = out, out
	w, err := Start(context.Background(), opts)
	require.NoError(t, err, "worker output:\n%s", out)
	t.Cleanup(func() { _ = w.Close() })
	return started{w, out}
}

// windowPlan builds a window's values: a ramp per hyperparameter, different
// per window (lr's are multipliers of the script's own rate).
func windowPlan(k, steps int) engine.Values {
	v := engine.Values{"lr": {}, "weight_decay": {}, "temperature": {}}
	for i := 0; i < steps; i++ {
		v["lr"] = append(v["lr"], 0.01*float64(k+1)+0.001*float64(i))
		v["weight_decay"] = append(v["weight_decay"], 1e-4*float64(i+1))
		v["temperature"] = append(v["temperature"], 1+0.25*float64(i))
	}
	return v
}

func TestWorkerTrainsWindows(t *testing.T) {
	w := startPython(t, pythonOptions(t, SyncLocal, "--steps", "12"))
	assert.ElementsMatch(t, []string{"lr", "weight_decay", "momentum", "temperature",
		"lr/body", "lr/head", "weight_decay/body", "weight_decay/head"}, w.Hyperparameters())
	const params = 8*4 + 4 + 4 + 1
	assert.Equal(t, params, w.ParamCount())
	h := w.Hello()
	assert.Equal(t, 12, h.TotalSteps)
	assert.Equal(t, "SGD", h.Optimizer)
	assert.True(t, h.Evaluate)
	assert.Equal(t, "cpu", h.Device)
	var explored []any
	for _, e := range h.Explore {
		explored = append(explored, e["name"])
	}
	assert.Equal(t, []any{"lr", "weight_decay", "temperature"}, explored)
	// SGD with momentum keeps one buffer per parameter; the buffer has room
	// for it before the first step creates it.
	assert.Len(t, w.SyncBuffer(true), 2*params)
	assert.Len(t, w.SyncBuffer(false), params)

	ctx := context.Background()
	for k := 0; k < 3; k++ {
		v := windowPlan(k, 4)
		res, err := w.TrainWindow(ctx, engine.Window{Start: 4 * k, Steps: 4, V: v})
		require.NoError(t, err, "window %d; worker output:\n%s", k, w.out)
		require.Len(t, res.Losses, 4)
		for _, l := range res.Losses {
			assert.False(t, math.IsNaN(l) || math.IsInf(l, 0), "loss %v", l)
		}
		assert.Equal(t, v, w.Applied(), "the worker applied exactly the plan")
		assert.Equal(t, 0.05, w.PeakLR(), "the script's own rate, before the multiplier")
		if k == 1 {
			// Stand in for the all-reduce: the worker must load what is left here.
			buf := w.SyncBuffer(true)
			for i := range buf {
				buf[i] = 0.5
				if i >= params {
					buf[i] = 0.25
				}
			}
			sum, state, err := w.Evaluate(ctx)
			require.NoError(t, err)
			assert.Equal(t, 0.5*params, sum, "evaluate sees the loaded parameters")
			assert.Equal(t, 0.25*params, state, "and the loaded optimizer state")
		}
	}
	require.NoError(t, w.Close())
	assert.Contains(t, w.out.String(), "worker.py finished 12 steps")
	assert.Nil(t, w.SyncBuffer(false), "no buffer after Close")
	_, err := w.TrainWindow(ctx, engine.Window{Start: 12, Steps: 1})
	assert.ErrorIs(t, err, ErrClosed)
}

func TestWorkerRejectsBadPlans(t *testing.T) {
	w := startPython(t, pythonOptions(t, SyncLocal, "--steps", "4"))
	ctx := context.Background()
	for name, v := range map[string]engine.Values{
		"unknown name": {"beta3": {1, 1}},
		"wrong length": {"lr": {0.1}},
		"NaN value":    {"lr": {0.1, math.NaN()}},
	} {
		_, err := w.TrainWindow(ctx, engine.Window{Start: 0, Steps: 2, V: v})
		assert.ErrorIs(t, err, ErrBadPlan, name)
	}
	_, err := w.TrainWindow(ctx, engine.Window{Start: 1, Steps: 2})
	assert.ErrorIs(t, err, ErrBadPlan, "wrong start step")
	// Bad plans are refused before anything is sent: the worker still works.
	res, err := w.TrainWindow(ctx, engine.Window{Start: 0, Steps: 4, V: engine.Values{"lr": {0.1, 0.1, 0.1, 0.1}}})
	require.NoError(t, err)
	assert.Len(t, res.Losses, 4)
	assert.NoError(t, w.Close())
}

func TestWorkerWithAdamWAndNoExploredValues(t *testing.T) {
	w := startPython(t, pythonOptions(t, SyncLocal, "--steps", "6", "--optimizer", "adamw"))
	ctx := context.Background()
	res, err := w.TrainWindow(ctx, engine.Window{Start: 0, Steps: 3})
	require.NoError(t, err)
	assert.Len(t, res.Losses, 3)
	// AdamW: exp_avg and exp_avg_sq per parameter, plus one step counter per tensor.
	buf := w.SyncBuffer(true)
	require.Len(t, buf, 3*w.ParamCount()+4)
	// Per parameter, keys sorted: exp_avg, exp_avg_sq, step.
	off := w.ParamCount()
	for _, n := range []int{8 * 4, 4, 4, 1} {
		assert.Equal(t, float32(3), buf[off+2*n], "step counter after 3 steps")
		off += 2*n + 1
	}
	_, err = w.TrainWindow(ctx, engine.Window{Start: 3, Steps: 3, V: engine.Values{"momentum": {0.9, 0.8, 0.7}}})
	require.NoError(t, err)
	assert.NoError(t, w.Close())
}

func TestWorkerKilledMidWindow(t *testing.T) {
	w := startPython(t, pythonOptions(t, SyncLocal, "--steps", "12", "--die-at-step", "6"))
	ctx := context.Background()
	_, err := w.TrainWindow(ctx, engine.Window{Start: 0, Steps: 4, V: windowPlan(0, 4)})
	require.NoError(t, err)
	_, err = w.TrainWindow(ctx, engine.Window{Start: 4, Steps: 4, V: windowPlan(1, 4)})
	require.ErrorIs(t, err, ErrExited)
	var we *WorkerError
	require.ErrorAs(t, err, &we)
	assert.Equal(t, 0, we.Rank)
	assert.Contains(t, err.Error(), "rank 0: worker (pid ")
	assert.Contains(t, err.Error(), "training window 1 (steps 4-7)")
	assert.Contains(t, err.Error(), "killed by signal 9")
	_, again := w.TrainWindow(ctx, engine.Window{Start: 4, Steps: 4, V: windowPlan(1, 4)})
	assert.Equal(t, err, again, "the failure is sticky")
	assert.NoError(t, w.Close())
}

// The signal that asks hdet to checkpoint and stop also reaches the script
// under srun (slurmstepd signals every process of a task): the script
// ignores it and trains on, and hdet stops it at the window end.
func TestWorkerIgnoresSIGUSR1(t *testing.T) {
	w := startPython(t, pythonOptions(t, SyncLocal, "--steps", "8"))
	ctx := context.Background()
	_, err := w.TrainWindow(ctx, engine.Window{Start: 0, Steps: 4, V: windowPlan(0, 4)})
	require.NoError(t, err)
	require.NoError(t, w.cmd.Process.Signal(syscall.SIGUSR1))
	_, err = w.TrainWindow(ctx, engine.Window{Start: 4, Steps: 4, V: windowPlan(1, 4)})
	require.NoError(t, err, "worker output:\n%s", w.out)
	require.NoError(t, w.Close())
	assert.Contains(t, w.out.String(), "worker.py finished 8 steps")
}

func TestWorkerRaisesMidWindow(t *testing.T) {
	w := startPython(t, pythonOptions(t, SyncLocal, "--steps", "8", "--fail-at-step", "2"))
	_, err := w.TrainWindow(context.Background(), engine.Window{Start: 0, Steps: 4})
	require.ErrorIs(t, err, ErrWorker)
	assert.Contains(t, err.Error(), "rank 0: worker (pid ")
	assert.Contains(t, err.Error(), "the script raised at step 2 of 8: RuntimeError: worker.py failing on purpose at step 2")
	assert.Contains(t, err.Error(), "Traceback (most recent call last)", "quotes the traceback")
}

func TestWorkerEndsEarly(t *testing.T) {
	w := startPython(t, pythonOptions(t, SyncLocal, "--steps", "8", "--end-at-step", "6"))
	ctx := context.Background()
	_, err := w.TrainWindow(ctx, engine.Window{Start: 0, Steps: 4})
	require.NoError(t, err)
	_, err = w.TrainWindow(ctx, engine.Window{Start: 4, Steps: 4})
	require.ErrorIs(t, err, ErrWorker)
	assert.Contains(t, err.Error(), "training window 1 (steps 4-7): worker reported an error: the script ended after 6 of the 8 optimizer steps it gave hdet (total_steps)")
}

// A script that crashes natively after the run (as torch's gloo backend
// can while the interpreter finalizes): Close names the signal and quotes
// faulthandler's report, which hdet turns on in the worker, with the line
// of the script that crashed.
func TestWorkerNativeCrashQuotesStacks(t *testing.T) {
	w := startPython(t, pythonOptions(t, SyncLocal, "--steps", "4", "--abort-after-stop"))
	_, err := w.TrainWindow(context.Background(), engine.Window{Start: 0, Steps: 4})
	require.NoError(t, err)
	err = w.Close()
	require.ErrorIs(t, err, ErrExited)
	msg := err.Error()
	assert.Contains(t, msg, "finishing after STOP: worker process exited (killed by signal 6 (aborted))")
	assert.Contains(t, msg, "--- rank 0's worker stderr: its error ---\nFatal Python error: Aborted")
	assert.Regexp(t, `File ".*worker\.py", line \d+ in <module>`, msg)
	assert.NotContains(t, msg, "Extension modules:")
}

// An optimizer step past total_steps raises; the script's exit status after
// STOP is Close's error. The script's own rates were restored after every
// step: it sees 0.05, never the multiplied rate.
func TestWorkerStepsPastTheEnd(t *testing.T) {
	w := startPython(t, pythonOptions(t, SyncLocal, "--steps", "4", "--extra-step"))
	res, err := w.TrainWindow(context.Background(), engine.Window{Start: 0, Steps: 4, V: engine.Values{"lr": {0.1, 0.2, 0.3, 0.4}}})
	require.NoError(t, err)
	assert.Equal(t, 0.05, res.Level, "the script's own rate at the window's end, for the search's evidence")
	err = w.Close()
	require.ErrorIs(t, err, ErrExited)
	assert.Contains(t, err.Error(), "finishing after STOP: worker process exited (exit status 1)")
	assert.Contains(t, err.Error(), "RuntimeError: hdet: optimizer step 5 is past total_steps=4 given to hdet.attach")
	assert.Contains(t, w.out.String(), "[rank 0] worker.py finished 4 steps, lr [0.05, 0.05]", "the script's own rates, each line prefixed")
}

func TestWorkerProbe(t *testing.T) {
	w := startPython(t, pythonOptions(t, SyncLocal, "--steps", "8", "--probe"))
	require.True(t, w.CanProbe())
	ctx := context.Background()
	res, err := w.TrainWindow(ctx, engine.Window{Start: 0, Steps: 4, ProbeTail: 2})
	require.NoError(t, err)
	assert.Len(t, res.Losses, 4)
	assert.Greater(t, res.Probe, 0.0)
	res, err = w.TrainWindow(ctx, engine.Window{Start: 4, Steps: 4})
	require.NoError(t, err)
	assert.True(t, math.IsNaN(res.Probe), "no probe asked")
	require.NoError(t, w.Close())
}

func TestWorkerHangs(t *testing.T) {
	opts := pythonOptions(t, SyncLocal, "--steps", "8", "--hang-at-step", "1")
	opts.Timeout = 2 * time.Second
	w := startPython(t, opts)
	pid := w.PID()
	_, err := w.TrainWindow(context.Background(), engine.Window{Start: 0, Steps: 4})
	require.ErrorIs(t, err, ErrTimeout)
	assert.Contains(t, err.Error(), "no DONE within 2s")
	require.NoError(t, w.Close())
	assert.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "the hung worker was killed")
}

// TestWorkerGradientsMode runs two ranks whose script uses DDP (gloo) and
// stands in for MPI by averaging their buffers here.
func TestWorkerGradientsMode(t *testing.T) {
	testenv.NeedTorch(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())

	ws := make([]started, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range ws {
		wg.Add(1)
		go func() { // both must start together: DDP's rendezvous waits for all ranks
			defer wg.Done()
			opts := pythonOptions(t, SyncGradients, "--steps", "8")
			opts.Rank, opts.WorldSize, opts.MasterPort = r, 2, port
			out := &testenv.SyncBuffer{}
			opts.Stdout, opts.Stderr = out, out
			w, err := Start(context.Background(), opts)
			ws[r], errs[r] = started{w, out}, err
		}()
	}
	wg.Wait()
	for r := range ws {
		require.NoError(t, errs[r], "rank %d: %s", r, ws[r].out)
		t.Cleanup(func() { _ = ws[r].Close() })
	}
	assert.Equal(t, ws[0].SyncBuffer(false), ws[1].SyncBuffer(false), "DDP starts both ranks equal")

	window := func(k int) {
		var wg sync.WaitGroup
		for r, w := range ws {
			wg.Add(1)
			go func() {
				defer wg.Done()
				lr := float64(r+1) * 0.02 // each rank its own step size
				_, errs[r] = w.TrainWindow(context.Background(), engine.Window{Start: 4 * k, Steps: 4, V: engine.Values{"lr": {lr, lr, lr, lr}}})
			}()
		}
		wg.Wait()
		for r := range ws {
			require.NoError(t, errs[r], "rank %d window %d: %s", r, k, ws[r].out)
		}
	}
	window(0)
	b0, b1 := ws[0].SyncBuffer(false), ws[1].SyncBuffer(false)
	assert.NotEqual(t, b0, b1, "different step sizes on the same gradients make the ranks drift")
	for i := range b0 {
		b0[i] = (b0[i] + b1[i]) / 2
		b1[i] = b0[i]
	}
	s0, _, err := ws[0].Evaluate(context.Background())
	require.NoError(t, err)
	s1, _, err := ws[1].Evaluate(context.Background())
	require.NoError(t, err)
	assert.Equal(t, s0, s1, "both ranks loaded the average")
	window(1)
	for r, w := range ws {
		require.NoError(t, w.Close(), "rank %d: %s", r, w.out)
	}
}

// BenchmarkWindow measures the cost per training step of the tiny test
// model through the bridge, with windows of T steps: the difference between
// T=1 and T=100 is the per-window exchange (PLAN, DONE, the buffer copies).
func BenchmarkWindow(b *testing.B) {
	for _, T := range []int{1, 100} {
		b.Run(fmt.Sprintf("T=%d", T), func(b *testing.B) {
			testenv.NeedTorch(b)
			w, err := Start(context.Background(), Options{
				Command:   []string{testenv.Python, "testdata/worker.py", "--steps", "100000000"},
				WorldSize: 1, SyncMode: SyncLocal, Stdout: io.Discard, Stderr: io.Discard,
			})
			require.NoError(b, err)
			defer w.Close()
			v := engine.Values{"lr": make([]float64, T)}
			for i := range v["lr"] {
				v["lr"][i] = 0.01
			}
			start := 0
			for b.Loop() {
				_, err := w.TrainWindow(context.Background(), engine.Window{Start: start, Steps: T, V: v})
				require.NoError(b, err)
				start += T
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(start), "ns/step")
		})
	}
}
