package engine

import (
	"bytes"
	"context"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/hparam/builtin"
	"github.com/hdet-dev/hdet/internal/controller"
	"github.com/hdet-dev/hdet/internal/engine/enginetest"
	"github.com/hdet-dev/hdet/internal/metrics"
)

// The in-process ranks are what the engine talks to under mpirun.
var (
	_ Comm      = enginetest.Comm{}
	_ Converger = enginetest.Comm{}
)

// toyParams is toyReplica's parameter count; its sync buffer holds one
// more value, its optimizer state (the steps it took).
const toyParams = 3

// toyReplica is one rank's deterministic model: each step moves its
// parameters toward a target that depends on the rank (its data) at the
// plan's learning rate, through Grads when the engine hands one. It records
// every window it trains.
type toyReplica struct {
	rank     int
	buf      []float32
	nanCalls map[int]bool // TrainWindow calls (0-based) that end with a NaN loss and parameter
	calls    []toyCall
	restarts int
}

// toyCall is one TrainWindow: its start, the learning rate at its last
// step, the mean loss, and the sync buffer before and after.
type toyCall struct {
	start         int
	lr, loss      float64
	before, after []float32
}

func newToyReplica(rank int) *toyReplica {
	return &toyReplica{rank: rank, buf: make([]float32, toyParams+1), nanCalls: map[int]bool{}}
}

func (r *toyReplica) Hyperparameters() []string { return []string{"lr"} }
func (r *toyReplica) ParamCount() int           { return toyParams }
func (r *toyReplica) CanProbe() bool            { return false }
func (r *toyReplica) SyncBuffer(opt bool) []float32 {
	if opt {
		return r.buf
	}
	return r.buf[:toyParams]
}

func (r *toyReplica) Evaluate(context.Context) (float64, float64, error) {
	panic("the engine evaluates a ShardEvaluator in shards")
}

// EvaluateShard makes the test loss depend on every shard and on the
// parameters: shard s contributes (s+1) times parameter 0 over 10 examples.
func (r *toyReplica) EvaluateShard(_ context.Context, shard, _ int) (float64, float64, float64, error) {
	return float64(r.buf[0]) * float64(shard+1), float64(shard), 10, nil
}

func (r *toyReplica) target(j int) float32 { return float32(j+1) + 0.25*float32(r.rank) }

func (r *toyReplica) TrainWindow(_ context.Context, w Window) (WindowResult, error) {
	c := toyCall{start: w.Start, lr: w.V["lr"][w.Steps-1], before: slices.Clone(r.buf)}
	p, grad, losses := r.buf[:toyParams], make([]float32, toyParams), make([]float64, w.Steps)
	for i := range w.Steps {
		for j := range p {
			grad[j] = p[j] - r.target(j)
			losses[i] += 0.5 * float64(grad[j]) * float64(grad[j])
		}
		if w.Grads != nil {
			if err := w.Grads.AllreduceMean(grad); err != nil {
				return WindowResult{}, err
			}
		}
		for j := range p {
			p[j] -= float32(w.V["lr"][i]) * grad[j]
		}
		r.buf[toyParams]++
	}
	if r.nanCalls[len(r.calls)] {
		losses[0], p[0] = math.NaN(), float32(math.NaN())
	}
	c.loss, c.after = mean(losses), slices.Clone(r.buf)
	r.calls = append(r.calls, c)
	return WindowResult{Losses: losses, Probe: math.NaN()}, nil
}

// restart is Options.Restart: back to the step-0 state (zeros).
func (r *toyReplica) restart(context.Context) error {
	r.restarts++
	clear(r.buf)
	return nil
}

// ranksSpec is a run of the loop on in-process ranks: world ranks in
// replicas of g, steps in windows of window, rank 0's controller with the
// built-in lr explorer configured by lr, the toy replicas; tweak adjusts a
// rank's options (o.Controller is set on rank 0).
type ranksSpec struct {
	world, g      int
	steps, window int
	mainWindow    int // Options.MainWindow and the controller's
	lr            string
	nan           map[int][]int // per rank, the TrainWindow calls that end NaN
	fail          func(enginetest.Call) error
	tweak         func(rank int, o *Options, rep *toyReplica)
	// setup, when set, runs on the rank's goroutine before Run: what
	// needs collectives (a resume's Restore).
	setup func(ctx context.Context, rank int, o *Options) error
}

// ranksRun is what a ranksSpec's run left: each rank's replica, result,
// error and log, rank 0's metrics records, and the world.
type ranksRun struct {
	w    *enginetest.World
	reps []*toyReplica
	res  []Result
	errs []error
	logs []*bytes.Buffer
	recs []metrics.Record
}

// constLR is the lr explorer at 0.05 with its default spread, no search.
const constLR = `{"schedule":0.05,"auto":{"enabled":false}}`

func runRanks(t *testing.T, s ranksSpec) *ranksRun {
	t.Helper()
	s.g, s.steps, s.window = max(s.g, 1), orDefault(s.steps, 12), orDefault(s.window, 2)
	r := &ranksRun{w: enginetest.NewWorld(s.world, s.g), res: make([]Result, s.world)}
	for rank := range s.world {
		r.reps, r.logs = append(r.reps, newToyReplica(rank)), append(r.logs, &bytes.Buffer{})
		for _, c := range s.nan[rank] {
			r.reps[rank].nanCalls[c] = true
		}
	}
	if s.fail != nil {
		r.w.Fail(s.fail)
	}
	path := filepath.Join(t.TempDir(), "metrics.jsonl")
	opts := make([]Options, s.world)
	for rank := range opts {
		opts[rank] = s.options(t, r, rank, path)
	}
	r.errs = r.w.Run(func(rank int) error {
		ctx := context.Background()
		if s.setup != nil {
			if err := s.setup(ctx, rank, &opts[rank]); err != nil {
				return err
			}
		}
		var err error
		r.res[rank], err = Run(ctx, opts[rank])
		return err
	})
	require.NoError(t, opts[0].Metrics.Close())
	recs, _, err := metrics.ReadFile(path)
	require.NoError(t, err)
	r.recs = recs
	return r
}

// options are rank's, made on the test's goroutine: rank 0 gets the
// controller and the metrics writer.
func (s ranksSpec) options(t *testing.T, r *ranksRun, rank int, metricsPath string) Options {
	o := Options{Comm: r.w.Comm(rank), Replica: r.reps[rank], Steps: s.steps, Window: s.window, MainWindow: s.mainWindow, Sync: SyncLocal,
		Log: zerolog.New(r.logs[rank]).With().Int("rank", rank).Logger()}
	if s.g > 1 {
		o.Groups = &Groups{Layout: Layout{World: s.world, Size: s.g}, Replica: r.w.ReplicaComm(rank), Cross: r.w.CrossComm(rank)}
	}
	if rank == 0 {
		ex, err := builtin.NewExplorer(builtin.LR)
		require.NoError(t, err)
		o.Controller, err = controller.NewController(context.Background(), controller.RunShape{Ranks: s.world / s.g, TotalSteps: s.steps, WindowSteps: s.window, MainWindowSteps: s.mainWindow, Seed: 7},
			[]controller.NamedExplorer{{Name: "lr", Explorer: ex, Config: []byte(s.lr)}})
		require.NoError(t, err)
		o.Metrics, err = metrics.OpenWriter(metricsPath)
		require.NoError(t, err)
		require.NoError(t, o.Metrics.Write(metrics.StartRecord{Ranks: s.world / s.g, TotalSteps: s.steps, WindowSteps: s.window}))
	}
	if s.tweak != nil {
		s.tweak(rank, &o, r.reps[rank])
	}
	return o
}

// orDefault is v, or def when v is 0.
func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// windows are the window records of rank 0's metrics.
func (r *ranksRun) windows() []metrics.WindowRecord {
	return metrics.Of[metrics.WindowRecord](r.recs)
}

// converged is what the converge gives when the ranks' buffers are bufs
// (nil: left out): their sum in rank order, as the in-process ranks add,
// times 1/n, as the engine scales it.
func converged(bufs ...[]float32) []float32 {
	out := make([]float32, toyParams+1)
	n := 0
	for _, b := range bufs {
		if b == nil {
			continue
		}
		n++
		for i, v := range b {
			out[i] += v
		}
	}
	inv := 1 / float32(n)
	for i := range out {
		out[i] *= inv
	}
	return out
}

// afterCall is every rank's buffer after its TrainWindow call c.
func (r *ranksRun) afterCall(c int) [][]float32 {
	var out [][]float32
	for _, rep := range r.reps {
		out = append(out, rep.calls[c].after)
	}
	return out
}
