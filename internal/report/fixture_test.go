package report

import (
	"math"
	"math/rand/v2"
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
	require.NoError(t, w.Write(metrics.Record{Type: metrics.TypeStart, Time: t0, Ranks: fxRanks,
		TotalSteps: fx.total * fxT, WindowSteps: fxT, SyncMode: "local", Hyperparameters: params, ConfigHash: "abc"}))

	rho := []float64{1 - 1.0/9, 1 - 1.0/27, 1 + 1.0/27, 1 + 1.0/9}
	base := map[string]float64{"lr": 0.004 * fx.lrScale, "dropout": 0.1, "weight_decay": 1e-4}
	now := t0
	for k := range fx.windows {
		rec := metrics.Record{Type: metrics.TypeWindow, Window: k, Step: (k + 1) * fxT,
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
		require.NoError(t, w.Write(metrics.Record{Type: metrics.TypeEnd, Time: now + 0.5, Step: fx.windows * fxT,
			WallSeconds: now + 0.5 - t0, Eval: fx.endEval}))
	}
}
