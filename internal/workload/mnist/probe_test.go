package mnist

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/engine"
)

// tinyConfig is a model small enough to recompute by hand, trained with
// dropout and label smoothing so that eval mode is visible.
func tinyConfig(opt string) Config {
	cfg := DefaultConfig()
	cfg.Hidden = []int{8}
	cfg.BatchSize = 8
	cfg.Optimizer = opt
	cfg.Dropout, cfg.LabelSmoothing = 0.3, 0.1
	cfg.ProbeExamples = 50
	cfg.Data = &Data{Train: synthetic(200, 6, 3, 1, 1)}
	return cfg
}

// handProbe is the eval-mode loss, computed in float64 by refLoss, of the
// mean of iterates on r's probe examples.
func handProbe(r *Replica, iterates [][]float64) float64 {
	avg := make([]float64, len(iterates[0]))
	for _, it := range iterates {
		for i, x := range it {
			avg[i] += x / float64(len(iterates))
		}
	}
	idx := r.probeScratch().idx
	ws := newWorkspace(r.layers, len(idx))
	ws.load(r.cfg.Data.Train, len(idx), func(k int) int { return int(idx[k]) })
	return refLoss(r, avg, ws, len(idx), 0, 0)
}

func params64(r *Replica) []float64 {
	out := make([]float64, r.nParam)
	for i, x := range r.SyncBuffer(false) {
		out[i] = float64(x)
	}
	return out
}

func TestProbeIsTheEvalLossOfTheTailAverage(t *testing.T) {
	for _, opt := range []string{AdamW, SGD} {
		t.Run(opt, func(t *testing.T) {
			ctx := context.Background()
			const steps = 7
			for _, tail := range []int{1, 3, steps, steps + 5} {
				probed := newReplica(t, tinyConfig(opt))
				require.True(t, probed.CanProbe())
				res, err := probed.TrainWindow(ctx, engine.Window{Start: 4, Steps: steps, V: lrRamp(4, steps), ProbeTail: tail})
				require.NoError(t, err)

				// By hand: the same steps one at a time, keeping the tail's iterates.
				hand := newReplica(t, tinyConfig(opt))
				var iterates [][]float64
				for i := range steps {
					_, err := hand.TrainWindow(ctx, engine.Window{Start: 4 + i, Steps: 1, V: lrRamp(4+i, 1)})
					require.NoError(t, err)
					if i >= steps-min(tail, steps) {
						iterates = append(iterates, params64(hand))
					}
				}
				want := handProbe(hand, iterates)
				require.InEpsilon(t, want, res.Probe, 1e-5, "tail %d", tail)
				require.Positive(t, res.ProbeSeconds, "the probe's time is reported")
				// The probe is scratch: training went exactly as without it.
				require.Equal(t, hand.SyncBuffer(true), probed.SyncBuffer(true))
			}
		})
	}
}

func TestNoProbeTailNoProbe(t *testing.T) {
	r := newReplica(t, tinyConfig(AdamW))
	res, err := r.TrainWindow(context.Background(), engine.Window{Steps: 3, V: lrRamp(0, 3)})
	require.NoError(t, err)
	require.True(t, math.IsNaN(res.Probe))
	require.Zero(t, res.ProbeSeconds)
	require.Nil(t, r.probe, "no probe scratch allocated for a window that does not probe")
}

func TestProbeSetIsTheSameOnEveryRankAndFollowsTheSeed(t *testing.T) {
	var first []int32
	for rank := range 4 {
		cfg := tinyConfig(AdamW)
		cfg.Rank, cfg.WorldSize = rank, 4
		cfg.BatchSize = 4
		idx := newReplica(t, cfg).probeScratch().idx
		if rank == 0 {
			first = idx
			require.Len(t, idx, 50)
			seen := map[int32]bool{}
			for _, i := range idx {
				require.False(t, seen[i], "example %d drawn twice", i)
				require.True(t, i >= 0 && i < 200)
				seen[i] = true
			}
			continue
		}
		require.Equal(t, first, idx, "rank %d", rank)
	}
	other := tinyConfig(AdamW)
	other.Seed = 2
	require.NotEqual(t, first, newReplica(t, other).probeScratch().idx)

	capped := tinyConfig(AdamW)
	capped.ProbeExamples = 1000
	require.Len(t, newReplica(t, capped).probeScratch().idx, 200, "capped at the training set's size")
}

// Eval mode: the probe of given parameters does not depend on the dropout or
// label smoothing the replica trains with.
func TestProbeIsInEvalMode(t *testing.T) {
	ctx := context.Background()
	a := newReplica(t, tinyConfig(AdamW))
	_, err := a.TrainWindow(ctx, engine.Window{Steps: 5, V: lrRamp(0, 5)})
	require.NoError(t, err)
	plain := tinyConfig(AdamW)
	plain.Dropout, plain.LabelSmoothing = 0, 0
	b := newReplica(t, plain)
	copy(b.SyncBuffer(true), a.SyncBuffer(true))
	var probes []float64
	for _, r := range []*Replica{a, b} {
		r.accumulateTail(1)
		p, err := r.probeLoss(ctx)
		require.NoError(t, err)
		probes = append(probes, p)
	}
	require.Equal(t, probes[0], probes[1])
	require.InEpsilon(t, handProbe(a, [][]float64{params64(a)}), probes[0], 1e-5)
}

// Resume with probing on: a fresh replica given the slab at a window end
// continues with the same losses, probes and parameters, and probing changes
// nothing in training.
func TestProbingResumeIsBitExact(t *testing.T) {
	ctx := context.Background()
	cfg := smallConfig(AdamW)
	cfg.WorldSize, cfg.Rank = 3, 2
	const T, windows = 10, 6
	run := func(r *Replica, from int, probe bool) (losses, probes []float64) {
		for w := from; w < windows; w++ {
			tail := 0
			if probe {
				tail = T / 2
			}
			res, err := r.TrainWindow(ctx, engine.Window{Start: w * T, Steps: T, V: lrRamp(w*T, T), ProbeTail: tail})
			require.NoError(t, err)
			losses, probes = append(losses, res.Losses...), append(probes, res.Probe)
		}
		return losses, probes
	}
	whole := newReplica(t, cfg)
	losses, probes := run(whole, 0, true)
	for _, p := range probes {
		require.False(t, math.IsNaN(p))
	}

	plain := newReplica(t, cfg)
	plainLosses, _ := run(plain, 0, false)
	require.Equal(t, plainLosses, losses)
	require.Equal(t, plain.SyncBuffer(true), whole.SyncBuffer(true))

	first := newReplica(t, cfg)
	for w := range 2 {
		_, err := first.TrainWindow(ctx, engine.Window{Start: w * T, Steps: T, V: lrRamp(w*T, T), ProbeTail: T / 2})
		require.NoError(t, err)
	}
	resumed := newReplica(t, cfg) // fresh: nothing but the slab carries over
	copy(resumed.SyncBuffer(true), first.SyncBuffer(true))
	l2, p2 := run(resumed, 2, true)
	require.Equal(t, losses[2*T:], l2)
	require.Equal(t, probes[2:], p2)
	require.Equal(t, whole.SyncBuffer(true), resumed.SyncBuffer(true))
}

// The tail average and the evaluation workspace are allocated once, by the
// first probing window, and reused by every later one.
func TestProbingReusesItsScratch(t *testing.T) {
	ctx := context.Background()
	r := newReplica(t, smallConfig(AdamW))
	window := func(start int) {
		_, err := r.TrainWindow(ctx, engine.Window{Start: start, Steps: 4, V: lrRamp(start, 4), ProbeTail: 2})
		require.NoError(t, err)
	}
	window(0)
	scratch, avg, ws := r.probe, &r.probe.avg[0], r.eval
	for w := 1; w < 4; w++ {
		window(4 * w)
		require.Same(t, scratch, r.probe)
		require.Same(t, avg, &r.probe.avg[0])
		require.Same(t, ws, r.eval)
	}
}
