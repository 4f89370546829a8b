package builtin

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/hparam"
)

func TestBuiltinExampleConfigsInit(t *testing.T) {
	ctx := context.Background()
	for _, kind := range []string{LR, Dropout, WeightDecay} {
		x, err := NewExplorer(kind)
		require.NoError(t, err)
		d, err := x.Describe(ctx)
		require.NoError(t, err)
		require.NotEmpty(t, d.ExampleConfig, kind)
		require.NoError(t, x.Init(ctx, hparam.Setup{Name: d.Hyperparameter, Config: d.ExampleConfig, Ranks: 4, TotalSteps: 100, WindowSteps: 10}), kind)
		_, err = x.Plan(ctx, hparam.WindowRequest{Window: 0, Start: 0, Steps: 10})
		require.NoError(t, err, kind)
	}
}
