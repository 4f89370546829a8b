package report

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/metrics"
)

// fixture describes a synthetic run shaped like the engine's output.
type fixture struct {
	windows   int  // windows written
	total     int  // windows the start record announces
	finished  bool // write the end record
	seed      uint64
	lrScale   float64 // multiplies the learning rate, to tell two runs apart
	nanWindow int     // window in which rank 3 diverges (loss NaN, unhealthy)
	// distinctWeights gives dropout uniform weights, as an explorer with a
	// very large sigma would, so weights differ between hyperparameters.
	distinctWeights bool
	endEval         *metrics.Eval // the end record's final evaluation
}

const (
	fxRanks     = 4
	fxT         = 50
	fxAutoStart = 8 // first window of the auto phase
)

func defaultFixture() fixture {
	return fixture{windows: 20, total: 20, finished: true, seed: 1, lrScale: 1, nanWindow: 7}
}

func intp(i int) *int { return &i }

// writeRun writes dir/metrics.jsonl through metrics.Writer: 4 ranks, three
// hyperparameters (learning rate and weight decay on a log scale, dropout
// additive), OneCycle-like warm-up then a meta-updated base, a diverged
// replica, a frozen explorer, clamped bases and test evaluations every five
// windows.
func writeRun(t *testing.T, dir string, fx fixture) {
	t.Helper()
	w, err := metrics.OpenWriter(filepath.Join(dir, MetricsFile))
	require.NoError(t, err)
	defer func() { require.NoError(t, w.Close()) }()
	rng := rand.New(rand.NewPCG(fx.seed, 7))
	t0 := 1.7e9
	params := []metrics.Param{
		{Name: "lr", Scale: "log", Spread: "multiplicative", Alpha: 1.0 / 9, Lower: 1e-6, Upper: 1},
		{Name: "dropout", Scale: "linear", Spread: "additive", Alpha: 0.05, Lower: 0, Upper: 0.5},
		{Name: "weight_decay", Scale: "log", Spread: "geometric", Alpha: 1, Lower: 1e-5, Upper: 0.1},
	}
	require.NoError(t, w.Write(metrics.StartRecord{Time: t0, Ranks: fxRanks,
		TotalSteps: fx.total * fxT, WindowSteps: fxT, SyncMode: "local", Hyperparameters: params, ConfigHash: "abc"}))

	rho := []float64{1 - 1.0/9, 1 - 1.0/27, 1 + 1.0/27, 1 + 1.0/9}
	base := map[string]float64{"lr": 0.004 * fx.lrScale, "dropout": 0.1, "weight_decay": 1e-4}
	now := t0
	for k := range fx.windows {
		rec := metrics.WindowRecord{Window: k, Step: (k + 1) * fxT,
			Values: map[string][]metrics.Float{}, Base: map[string]metrics.Float{}, NextBase: map[string]metrics.Float{}}
		if k < fxAutoStart { // warm-up of the schedule
			base["lr"] = 0.004 * fx.lrScale * float64(k+1) / fxAutoStart
		}
		for _, p := range params {
			perm := rng.Perm(fxRanks)
			vals := make([]metrics.Float, fxRanks)
			for r := range fxRanks {
				j := perm[r]
				switch p.Spread {
				case "additive":
					vals[r] = metrics.Float(base[p.Name] + p.Alpha*(float64(j)-1.5)/1.5)
				case "geometric":
					vals[r] = metrics.Float(base[p.Name] * math.Pow(1+p.Alpha, (float64(j)-1.5)/1.5))
				default:
					vals[r] = metrics.Float(base[p.Name] * rho[j])
				}
			}
			rec.Values[p.Name] = vals
			rec.Base[p.Name] = metrics.Float(base[p.Name])
		}
		step := float64(rec.Step)
		rec.Losses = make([]metrics.Float, fxRanks)
		rec.Healthy = make([]bool, fxRanks)
		for r := range fxRanks {
			lr := float64(rec.Values["lr"][r])
			rec.Losses[r] = metrics.Float(2.3*math.Exp(-step*lr) + 0.08 + 0.02*rng.Float64())
			rec.Healthy[r] = true
		}
		if k == fx.nanWindow {
			rec.Losses[3] = metrics.Float(math.NaN())
			rec.Healthy[3] = false
			rec.Events = append(rec.Events, metrics.Event{Kind: metrics.EventUnhealthy, Rank: intp(3), Message: "loss is NaN"})
		}
		if k == 10 {
			rec.Events = append(rec.Events, metrics.Event{Kind: metrics.EventFrozen, Param: "dropout", Message: "explorer dropout failed twice; frozen at 0.1"})
		}
		if k == 12 || k == 13 {
			rec.Events = append(rec.Events, metrics.Event{Kind: metrics.EventClamped, Param: "weight_decay", Message: "base hit the lower bound"})
		}
		if k%5 == 4 {
			rec.Eval = &metrics.Eval{Loss: metrics.Float(2.1*math.Exp(-step/400) + 0.12), Accuracy: metrics.Float(0.9 - 0.8*math.Exp(-step/300))}
			rec.Events = append(rec.Events, metrics.Event{Kind: metrics.EventCheckpoint, Message: "checkpoint written"})
		}
		if k >= fxAutoStart { // meta-update: weights, then a new base
			var mean float64
			n := 0
			for r := range fxRanks {
				if rec.Healthy[r] {
					mean += float64(rec.Losses[r])
					n++
				}
			}
			mean /= float64(n)
			ws := make([]metrics.Float, fxRanks)
			var z float64
			for r := range fxRanks {
				if rec.Healthy[r] {
					e := math.Exp((mean - float64(rec.Losses[r])) / 0.1)
					ws[r] = metrics.Float(e)
					z += e
				}
			}
			rec.Weights = map[string][]metrics.Float{}
			for _, p := range params {
				norm := make([]metrics.Float, fxRanks)
				for r := range ws {
					norm[r] = ws[r] / metrics.Float(z)
					if fx.distinctWeights && p.Name == "dropout" {
						norm[r] = 1.0 / fxRanks
					}
				}
				rec.Weights[p.Name] = norm
			}
			base["lr"] *= 0.93
			if k < 10 { // dropout frozen from window 10 on
				base["dropout"] += 0.01
			}
			base["weight_decay"] = math.Max(base["weight_decay"]*0.7, 1e-5)
		}
		for name, v := range base {
			rec.NextBase[name] = metrics.Float(v)
		}
		rec.FanoutSeconds = 1.2 + 0.1*rng.Float64()
		rec.ConvergeSeconds = 0.05 + 0.01*rng.Float64()
		rec.PlanSeconds = 0.002 + 0.001*rng.Float64()
		now += rec.FanoutSeconds + rec.ConvergeSeconds + 0.02
		rec.Time = now
		require.NoError(t, w.Write(rec))
	}
	if fx.finished {
		require.NoError(t, w.Write(metrics.EndRecord{Time: now + 0.5, Step: fx.windows * fxT,
			WallSeconds: now + 0.5 - t0, Eval: fx.endEval}))
	}
}

// Two-pass fixture (docs/design.md §1.2): a search pass of fx2Search
// windows, a commit, then a main pass over the whole schedule of fx2Steps
// steps (its last window short), every window with base_steps.
const (
	fx2Search = 5
	fx2Steps  = 20*fxT + 10
	fx2U      = 0.6931471805599453 // the committed lr offset: ×2
	fx2Drop   = 0.05               // the committed dropout offset
)

// fx2Schedule is the lr schedule at step i (0-based): a linear warm-up to
// 0.004 over the first quarter, then a linear decay to 1e-5.
func fx2Schedule(i int) float64 {
	warm := fx2Steps / 4
	if i < warm {
		return 0.004 * float64(i+1) / float64(warm)
	}
	return 0.004 + (1e-5-0.004)*float64(i-warm)/float64(fx2Steps-1-warm)
}

// fx2Config is the run's config.yaml as far as the report reads it: the
// schedules' peaks.
const fx2Config = `explorers:
  - name: lr
    config:
      schedule: {kind: onecycle, max_lr: 0.004}
  - name: dropout
    config:
      schedule: 0.1
`

// writeTwoPassRun writes dir/metrics.jsonl and dir/config.yaml of a
// finished two-pass run: 4 ranks, lr (log, multiplicative) and dropout
// (linear, additive); rank 2 unhealthy in window 2 of each pass; test
// evaluations every five windows of each pass and at the end.
func writeTwoPassRun(t *testing.T, dir string) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(dir, ConfigFile), []byte(fx2Config), 0o644))
	w, err := metrics.OpenWriter(filepath.Join(dir, MetricsFile))
	require.NoError(t, err)
	defer func() { require.NoError(t, w.Close()) }()
	params := []metrics.Param{
		{Name: "lr", Scale: "log", Spread: "multiplicative", Alpha: 0.5, Lower: 1e-8, Upper: 10},
		{Name: "dropout", Scale: "linear", Spread: "additive", Alpha: 0.08, Lower: 0, Upper: 0.9},
	}
	t0 := 1.7e9
	require.NoError(t, w.Write(metrics.StartRecord{Time: t0, Ranks: fxRanks,
		TotalSteps: fx2Steps, WindowSteps: fxT, SyncMode: "gradients", Hyperparameters: params}))
	now := t0
	for k := range fx2Search { // u grows towards the committed offset
		u := fx2U * float64(k+1) / fx2Search
		now++
		require.NoError(t, w.Write(fx2Window(passSearch, k, u, fx2Drop*float64(k+1)/fx2Search, now)))
	}
	require.NoError(t, w.Write(metrics.CommitRecord{Time: now, Step: fx2Search * fxT,
		Committed: map[string]metrics.Commit{"lr": {Offset: fx2U, Value: 0.008}, "dropout": {Offset: fx2Drop, Value: 0.15}}}))
	for k := range (fx2Steps + fxT - 1) / fxT {
		now++
		require.NoError(t, w.Write(fx2Window(passMain, k, fx2U, fx2Drop, now)))
	}
	require.NoError(t, w.Write(metrics.EndRecord{Time: now + 1, Step: fx2Steps,
		WallSeconds: now + 1 - t0, Eval: &metrics.Eval{Loss: 0.04, Accuracy: 0.985}}))
}

// fx2Window is window k of a pass at offsets u (lr) and d (dropout): the
// search pass spreads the ranks, the main pass trains them all at the base.
func fx2Window(pass, k int, u, d float64, now float64) metrics.WindowRecord {
	first, end := k*fxT, min((k+1)*fxT, fx2Steps)
	rec := metrics.WindowRecord{Time: now, Pass: pass, Window: k, Step: end,
		Values: map[string][]metrics.Float{}, Base: map[string]metrics.Float{}, BaseSteps: map[string][]metrics.Float{},
		Losses: make([]metrics.Float, fxRanks), Healthy: make([]bool, fxRanks), FanoutSeconds: 0.5, ConvergeSeconds: 0.05}
	for i := first; i < end; i++ {
		rec.BaseSteps["lr"] = append(rec.BaseSteps["lr"], metrics.Float(fx2Schedule(i)*math.Exp(u)))
		rec.BaseSteps["dropout"] = append(rec.BaseSteps["dropout"], metrics.Float(0.1+d))
	}
	rec.Base["lr"], rec.Base["dropout"] = rec.BaseSteps["lr"][end-first-1], rec.BaseSteps["dropout"][0]
	rho := []float64{1, 1, 1, 1}
	shift := []float64{0, 0, 0, 0}
	if pass == passSearch {
		rho, shift = []float64{0.5, 0.833, 1.167, 1.5}, []float64{-0.08, -0.027, 0.027, 0.08}
	}
	for r := range fxRanks {
		slot := (r + k) % fxRanks // the slots move from window to window
		rec.Values["lr"] = append(rec.Values["lr"], rec.Base["lr"]*metrics.Float(rho[slot]))
		rec.Values["dropout"] = append(rec.Values["dropout"], rec.Base["dropout"]+metrics.Float(shift[slot]))
		rec.Losses[r] = metrics.Float(2.3*math.Exp(-float64(end)/150) + 0.05 + 0.01*float64(r))
		rec.Healthy[r] = true
	}
	if k == 2 {
		rec.Losses[2], rec.Healthy[2] = metrics.Float(math.NaN()), false
	}
	if k%5 == 4 { // the main pass, at the committed values, does a little better
		better := 0.003 * float64(pass)
		rec.Eval = &metrics.Eval{Loss: metrics.Float(0.1 - better + 1/float64(end)), Accuracy: metrics.Float(0.99 + better - 1/float64(end))}
	}
	if pass == passSearch {
		rec.Offset = map[string]metrics.Float{"lr": metrics.Float(u), "dropout": metrics.Float(d)}
	}
	return rec
}
