package sdk

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/hparam"
)

// halfway moves the base halfway to the first rank's value.
type halfway struct{ next float64 }

func (halfway) Describe() hparam.Descriptor {
	return hparam.Descriptor{Name: "h", Version: "1", Hyperparameter: "h", Scale: hparam.Linear,
		Bounds: hparam.Bounds{Lower: 0, Upper: 1}, Spread: hparam.Spread{Kind: hparam.Additive, Alpha: 0.1}}
}

func (halfway) Start(hparam.Setup) (float64, error) { return 0.5, nil }

func (h halfway) Update(base float64, o hparam.Observation) (float64, []float64, error) {
	if h.next != 0 {
		return h.next, nil, nil
	}
	return base + (o.Values[0]-base)/2, []float64{1, 0}, nil
}

func TestFromRulePlansObservesAndRestores(t *testing.T) {
	ctx := context.Background()
	x := FromRule(halfway{})
	_, err := x.Plan(ctx, hparam.WindowRequest{Steps: 2})
	assert.Error(t, err, "plan before init")

	require.NoError(t, x.Init(ctx, hparam.Setup{Ranks: 2, Config: []byte("{}")}))
	p, err := x.Plan(ctx, hparam.WindowRequest{Window: 0, Steps: 3})
	require.NoError(t, err)
	assert.Equal(t, []float64{0.5, 0.5, 0.5}, p.Base)
	assert.Equal(t, hparam.Spread{Kind: hparam.Additive, Alpha: 0.1}, p.Spread)

	f, err := x.Observe(ctx, hparam.Observation{Values: []float64{0.7, 0.3}, Losses: []float64{1, math.NaN()}})
	require.NoError(t, err)
	assert.InDelta(t, 0.6, f.Base, 1e-12)
	assert.Equal(t, []float64{1, 0}, f.Weights)

	st, err := x.SaveState(ctx)
	require.NoError(t, err)
	y := FromRule(halfway{})
	require.NoError(t, y.LoadState(ctx, st))
	p, err = y.Plan(ctx, hparam.WindowRequest{Steps: 1})
	require.NoError(t, err)
	assert.InDelta(t, 0.6, p.Base[0], 1e-12)
}

func TestFromRuleClampsAndRejectsNaN(t *testing.T) {
	ctx := context.Background()
	x := FromRule(halfway{next: 5})
	require.NoError(t, x.Init(ctx, hparam.Setup{}))
	f, err := x.Observe(ctx, hparam.Observation{Values: []float64{0}, Losses: []float64{0}})
	require.NoError(t, err)
	assert.Equal(t, 1.0, f.Base, "clamped to the upper bound")

	x = FromRule(halfway{next: math.NaN()})
	require.NoError(t, x.Init(ctx, hparam.Setup{}))
	_, err = x.Observe(ctx, hparam.Observation{Values: []float64{0}, Losses: []float64{0}})
	assert.Error(t, err)
	assert.Error(t, x.LoadState(ctx, []byte("not json")))
}
