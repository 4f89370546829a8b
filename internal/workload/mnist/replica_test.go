package mnist

import (
	"context"
	"errors"
	"testing"

	"github.com/hdet-dev/hdet/internal/engine"
	"github.com/hdet-dev/hdet/internal/workload/internal/blas"
	"github.com/stretchr/testify/require"
)

func mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func TestLossFallsAndTestAccuracyRises(t *testing.T) {
	for _, opt := range []string{AdamW, SGD} {
		t.Run(opt, func(t *testing.T) {
			r := newReplica(t, smallConfig(opt))
			_, acc0, err := r.Evaluate(context.Background())
			require.NoError(t, err)
			res, err := r.TrainWindow(context.Background(), engine.Window{Start: 0, Steps: 300})
			require.NoError(t, err)
			require.Len(t, res.Losses, 300)
			require.Less(t, mean(res.Losses[280:]), 0.3*mean(res.Losses[:20]))
			loss, acc, err := r.Evaluate(context.Background())
			require.NoError(t, err)
			require.Greater(t, acc, 0.95)
			require.Greater(t, acc, acc0)
			require.Less(t, loss, 0.3)
		})
	}
}

// lrRamp is a per-step learning rate, so that splitting a window must
// slice the values correctly to give the same run.
func lrRamp(start, steps int) engine.Values {
	v := make([]float64, steps)
	for i := range v {
		v[i] = 1e-3 * (1 + float64((start+i)%17)/17)
	}
	return engine.Values{HLR: v, HDropout: constant(0.2, steps)}
}

func TestDeterministicAcrossWindowSplitsAndResume(t *testing.T) {
	backends(t, func(t *testing.T) {
		for _, opt := range []string{AdamW, SGD} {
			t.Run(opt, func(t *testing.T) {
				cfg := smallConfig(opt)
				cfg.WorldSize, cfg.Rank = 3, 1 // 800/3/16 = 16 steps per epoch: the run crosses epochs
				ctx := context.Background()
				const total = 60

				whole := newReplica(t, cfg)
				res, err := whole.TrainWindow(ctx, engine.Window{Start: 0, Steps: total, V: lrRamp(0, total)})
				require.NoError(t, err)

				split := newReplica(t, cfg)
				var losses []float64
				start := 0
				for _, n := range []int{7, 13, 0, 1, 39} {
					r, err := split.TrainWindow(ctx, engine.Window{Start: start, Steps: n, V: lrRamp(start, n)})
					require.NoError(t, err)
					losses = append(losses, r.Losses...)
					start += n
				}
				require.Equal(t, total, start)
				require.Equal(t, res.Losses, losses)
				require.Equal(t, whole.SyncBuffer(true), split.SyncBuffer(true))

				// Resume: a fresh replica given the slab at step 20 continues bit for bit.
				first := newReplica(t, cfg)
				_, err = first.TrainWindow(ctx, engine.Window{Start: 0, Steps: 20, V: lrRamp(0, 20)})
				require.NoError(t, err)
				resumed := newReplica(t, cfg) // fresh: nothing but the slab carries over
				copy(resumed.SyncBuffer(true), first.SyncBuffer(true))
				r2, err := resumed.TrainWindow(ctx, engine.Window{Start: 20, Steps: total - 20, V: lrRamp(20, total-20)})
				require.NoError(t, err)
				require.Equal(t, res.Losses[20:], r2.Losses)
				require.Equal(t, whole.SyncBuffer(true), resumed.SyncBuffer(true))
			})
		}
	})
}

func TestSameSeedSameRunDifferentRankDifferentData(t *testing.T) {
	cfg := smallConfig(AdamW)
	cfg.WorldSize = 2
	a, b := newReplica(t, cfg), newReplica(t, cfg)
	cfg.Rank = 1
	other := newReplica(t, cfg)
	require.Equal(t, a.SyncBuffer(false), other.SyncBuffer(false), "init depends on the seed only")

	ctx := context.Background()
	ra, err := a.TrainWindow(ctx, engine.Window{Start: 0, Steps: 40})
	require.NoError(t, err)
	rb, err := b.TrainWindow(ctx, engine.Window{Start: 0, Steps: 40})
	require.NoError(t, err)
	ro, err := other.TrainWindow(ctx, engine.Window{Start: 0, Steps: 40})
	require.NoError(t, err)
	require.Equal(t, ra.Losses, rb.Losses)
	require.Equal(t, a.SyncBuffer(true), b.SyncBuffer(true))
	require.NotEqual(t, ra.Losses, ro.Losses)

	cfg.Seed = 2
	c := newReplica(t, cfg)
	require.NotEqual(t, a.SyncBuffer(false)[:100], c.SyncBuffer(false)[:100])
}

func TestShardsAreDisjointAndCoverTheEpoch(t *testing.T) {
	cfg := smallConfig(AdamW)
	cfg.WorldSize = 3
	seen := map[int32]int{}
	var spe int
	for rank := range 3 {
		cfg.Rank = rank
		r := newReplica(t, cfg)
		spe = r.StepsPerEpoch()
		require.Equal(t, 800/3/16, spe)
		for step := range spe {
			for _, i := range r.batchIndices(step) {
				seen[i]++
			}
		}
		// The next epoch reshuffles.
		require.NotEqual(t, r.batchIndices(0), r.batchIndices(spe))
	}
	require.Len(t, seen, 3*spe*16, "no example is read twice in an epoch")
	for i, n := range seen {
		require.Equal(t, 1, n, "example %d", i)
	}
}

// zeroReducer stands in for the engine's allreduce: it records the calls and
// zeroes the gradient, which must then leave SGD (without decay) in place.
type zeroReducer struct {
	calls, size int
	err         error
}

func (z *zeroReducer) AllreduceMean(g []float32) error {
	z.calls++
	z.size = len(g)
	clear(g)
	return z.err
}

func TestGradReducerRunsBetweenBackwardAndStep(t *testing.T) {
	cfg := smallConfig(SGD)
	cfg.WeightDecay = 0
	r := newReplica(t, cfg)
	before := append([]float32(nil), r.SyncBuffer(false)...)
	z := &zeroReducer{}
	_, err := r.TrainWindow(context.Background(), engine.Window{Start: 0, Steps: 5, Grads: z})
	require.NoError(t, err)
	require.Equal(t, 5, z.calls)
	require.Equal(t, r.ParamCount(), z.size)
	require.Equal(t, before, r.SyncBuffer(false))

	z.err = errors.New("link down")
	_, err = r.TrainWindow(context.Background(), engine.Window{Start: 5, Steps: 3, Grads: z})
	require.ErrorIs(t, err, z.err)
}

// changed reports which parameter groups (hidden, output) moved from before.
func changed(r *Replica, before []float32) (hidden, output bool) {
	now := r.SyncBuffer(false)
	for _, s := range r.segs {
		for i := s.lo; i < s.hi; i++ {
			if now[i] != before[i] {
				if s.output {
					output = true
				} else {
					hidden = true
				}
			}
		}
	}
	return hidden, output
}

func TestLearningRateGroupsOverrideLR(t *testing.T) {
	cfg := smallConfig(SGD)
	cfg.WeightDecay = 0
	ctx := context.Background()
	for _, tc := range []struct {
		name           string
		v              engine.Values
		hidden, output bool
	}{
		{"lr/output beats lr", engine.Values{HLR: {0}, HLROutput: {0.1}}, false, true},
		{"lr/hidden beats lr", engine.Values{HLR: {0}, HLRHidden: {0.1}}, true, false},
		{"lr alone drives both", engine.Values{HLR: {0}}, false, false},
		{"config lr when absent", engine.Values{HDropout: {0}}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newReplica(t, cfg)
			before := append([]float32(nil), r.SyncBuffer(false)...)
			_, err := r.TrainWindow(ctx, engine.Window{Start: 0, Steps: 1, V: tc.v})
			require.NoError(t, err)
			h, o := changed(r, before)
			require.Equal(t, tc.hidden, h, "hidden layers moved")
			require.Equal(t, tc.output, o, "output layer moved")
		})
	}
}

func TestAbsentValuesFallBackToConfig(t *testing.T) {
	cfg := smallConfig(AdamW)
	ctx := context.Background()
	a, b := newReplica(t, cfg), newReplica(t, cfg)
	_, err := a.TrainWindow(ctx, engine.Window{Start: 0, Steps: 10})
	require.NoError(t, err)
	_, err = b.TrainWindow(ctx, engine.Window{Start: 0, Steps: 10, V: engine.Values{
		HLR: constant(cfg.LR, 10), HDropout: constant(cfg.Dropout, 10), HMomentum: constant(cfg.Momentum, 10),
		HWeightDecay: constant(cfg.WeightDecay, 10), HLabelSmoothing: constant(cfg.LabelSmoothing, 10),
	}})
	require.NoError(t, err)
	require.Equal(t, a.SyncBuffer(true), b.SyncBuffer(true))
	// And each value does reach the step.
	for _, name := range []string{HDropout, HMomentum, HWeightDecay, HLabelSmoothing} {
		c := newReplica(t, cfg)
		_, err = c.TrainWindow(ctx, engine.Window{Start: 0, Steps: 10, V: engine.Values{name: constant(0.5, 10)}})
		require.NoError(t, err)
		require.NotEqual(t, a.SyncBuffer(true), c.SyncBuffer(true), name)
	}
}

func TestBadWindowsAreRejectedBeforeTraining(t *testing.T) {
	r := newReplica(t, smallConfig(AdamW))
	before := append([]float32(nil), r.SyncBuffer(true)...)
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		start int
		v     engine.Values
		want  error
	}{
		{"unknown name", 0, engine.Values{"temperature": {1, 1}}, ErrUnknownHyperparameter},
		{"dropout 1", 0, engine.Values{HDropout: {0.1, 1}}, ErrInvalidValue},
		{"negative lr", 0, engine.Values{HLROutput: {0.1, -1}}, ErrInvalidValue},
		{"wrong length", 0, engine.Values{HLR: {0.1}}, nil},
		{"negative start", -1, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := r.TrainWindow(ctx, engine.Window{Start: tc.start, Steps: 2, V: tc.v})
			require.Error(t, err)
			if tc.want != nil {
				require.ErrorIs(t, err, tc.want)
			}
			require.Equal(t, before, r.SyncBuffer(true), "nothing trained")
		})
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	res, err := r.TrainWindow(cancelled, engine.Window{Start: 0, Steps: 2})
	require.ErrorIs(t, err, context.Canceled)
	require.Empty(t, res.Losses)
	_, _, err = r.Evaluate(cancelled)
	require.ErrorIs(t, err, context.Canceled)
}

func TestSyncBufferIsTheSlab(t *testing.T) {
	for _, tc := range []struct {
		opt    string
		states int
	}{{AdamW, 2}, {SGD, 1}} {
		r := newReplica(t, smallConfig(tc.opt))
		n := 20*32 + 32 + 32*16 + 16 + 16*4 + 4
		require.Equal(t, n, r.ParamCount())
		require.Len(t, r.SyncBuffer(false), n)
		require.Len(t, r.SyncBuffer(true), n*(1+tc.states))
		// Writes through the buffer are the model's parameters (zero-copy).
		clear(r.SyncBuffer(true))
		_, acc, err := r.Evaluate(context.Background())
		require.NoError(t, err)
		require.InDelta(t, 0.25, acc, 0.1, "all-zero model predicts class 0 only")
		require.Equal(t, &r.SyncBuffer(true)[0], &r.SyncBuffer(false)[0])
	}
	r := newReplica(t, smallConfig(AdamW))
	r.cfg.Data.Test = nil
	_, _, err := r.Evaluate(context.Background())
	require.ErrorIs(t, err, ErrNoTestSet)
}

func TestConfigValidationNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		field string
		edit  func(c *Config)
	}{
		{"hidden", func(c *Config) { c.Hidden = nil }},
		{"hidden[1]", func(c *Config) { c.Hidden = []int{4, 0} }},
		{"batch_size", func(c *Config) { c.BatchSize = 0 }},
		{"batch_size", func(c *Config) { c.BatchSize = 500; c.WorldSize = 2 }},
		{"optimizer", func(c *Config) { c.Optimizer = "adam" }},
		{"lr", func(c *Config) { c.LR = -1 }},
		{"momentum", func(c *Config) { c.Momentum = 1 }},
		{"weight_decay", func(c *Config) { c.WeightDecay = -0.1 }},
		{"dropout", func(c *Config) { c.Dropout = 1 }},
		{"label_smoothing", func(c *Config) { c.LabelSmoothing = -0.1 }},
		{"beta2", func(c *Config) { c.Beta2 = 1 }},
		{"eps", func(c *Config) { c.Eps = 0 }},
		{"world_size", func(c *Config) { c.WorldSize = 0 }},
		{"rank", func(c *Config) { c.Rank = 1 }},
		{"data", func(c *Config) { c.Data = nil }},
		{"data", func(c *Config) { c.Data = &Data{Train: &Dataset{N: 1, Dim: 1, Classes: 2}} }},
		{"data", func(c *Config) { c.Data.Test = synthetic(10, 5, 4, 1, 1) }},
	} {
		t.Run(tc.field, func(t *testing.T) {
			cfg := smallConfig(AdamW)
			tc.edit(&cfg)
			_, err := New(cfg)
			require.ErrorIs(t, err, ErrInvalidConfig)
			var ce *ConfigError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, tc.field, ce.Field)
			require.Contains(t, err.Error(), tc.field+": ")
		})
	}
	_, err := New(smallConfig(SGD))
	require.NoError(t, err)
}

// unloadable is a BLAS backend whose library is missing.
type unloadable struct{ blas.Gonum }

func (unloadable) Load() error { return errors.New("blas: cannot load OpenBLAS (libopenblas.so.0)") }

// A missing BLAS library stops New with the loader's message, not as a
// config error and not with a panic at the first product.
func TestNewWithoutBLAS(t *testing.T) {
	old := gemm
	gemm = unloadable{}
	defer func() { gemm = old }()
	_, err := New(smallConfig(AdamW))
	require.ErrorContains(t, err, "libopenblas.so.0")
	require.NotErrorIs(t, err, ErrInvalidConfig)
}
