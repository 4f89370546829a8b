package builtin

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/hparam"
)

// FuzzBuiltinInit: whatever a user writes in an explorer's config block
// is either refused with ErrInvalid or runs a whole run's windows without
// panicking or failing (the built-in explorers run inside plugin
// processes, where a panic is a lost explorer).
func FuzzBuiltinInit(f *testing.F) {
	kinds := []string{LR, Dropout, WeightDecay}
	for i, k := range kinds {
		e, err := NewExplorer(k)
		require.NoError(f, err)
		d, err := e.Describe(context.Background())
		require.NoError(f, err)
		f.Add(uint8(i), d.ExampleConfig)
	}
	for _, cfg := range []string{
		`{"schedule": {"max_lr": 0.1}, "spread": {"alpha": "NaN"}}`,
		`{"schedule": {"max_lr": 0.1}, "auto": {"form": "paper", "start": 35}}`,
		`{"schedule": {"kind": "cosine", "peak": 1e-300}, "auto": {"estimator": "softmax", "beta": 0.9}}`,
		`{"schedule": 0.1, "spread": {"alpha": 0.5, "narrow_from": 0.2}, "auto": {"until": 0.9, "clip": 1e300}}`,
		`{"schedule": {"kind": "step", "initial": 1, "step_size": 1, "gamma": 1e-300}}`,
	} {
		f.Add(uint8(0), []byte(cfg))
	}
	f.Fuzz(func(t *testing.T, kind uint8, cfg []byte) {
		e, err := NewExplorer(kinds[int(kind)%len(kinds)])
		require.NoError(t, err)
		s := setup4
		s.Config = cfg
		ctx := context.Background()
		if err := e.Init(ctx, s); err != nil {
			require.True(t, errors.Is(err, hparam.ErrInvalid), "%v", err)
			return
		}
		for k := range s.TotalSteps / s.WindowSteps {
			wp, err := e.Plan(ctx, hparam.WindowRequest{Window: k, Start: k * s.WindowSteps, Steps: s.WindowSteps})
			require.NoError(t, err, "window %d", k)
			values := wp.Spread.Values(wp.Base[len(wp.Base)-1], s.Ranks, wp.Bounds)
			losses := make([]float64, len(values))
			for r, v := range values {
				losses[r] = 1 + math.Abs(math.Log1p(math.Abs(v))-0.1*float64(k%3))
			}
			_, err = e.Observe(ctx, hparam.Observation{Window: k, Values: values, Losses: losses, Probe: losses})
			require.NoError(t, err, "window %d", k)
		}
	})
}
