package hparam

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBuiltinExampleConfigsInit(t *testing.T) {
	ctx := context.Background()
	for _, kind := range []string{BuiltinLR, BuiltinDropout, BuiltinWeightDecay} {
		x, err := NewBuiltinExplorer(kind)
		require.NoError(t, err)
		d, err := x.Describe(ctx)
		require.NoError(t, err)
		require.NotEmpty(t, d.ExampleConfig, kind)
		require.NoError(t, x.Init(ctx, Setup{Name: d.Hyperparameter, Config: d.ExampleConfig, Ranks: 4, TotalSteps: 100, WindowSteps: 10}), kind)
		_, err = x.Plan(ctx, WindowRequest{Window: 0, Start: 0, Steps: 10})
		require.NoError(t, err, kind)
	}
}
