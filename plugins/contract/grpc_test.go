package contract

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/hashicorp/go-plugin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/hparam"
)

// recorder is an in-process explorer that records what reached it and
// answers with fixed values.
type recorder struct {
	setup    hparam.Setup
	req      hparam.WindowRequest
	obs      hparam.Observation
	loaded   []byte
	planLen  int // 0: answer r.Steps values
	weights  []float64
	failWith error
}

func (r *recorder) Describe(context.Context) (hparam.Descriptor, error) {
	return hparam.Descriptor{Name: "rec", Version: "9.9", Hyperparameter: "h", Scale: hparam.Log,
		Bounds: hparam.Bounds{Lower: 1e-6, Upper: 3}, Spread: hparam.Spread{Kind: hparam.Geometric, Alpha: 0.5},
		ExampleConfig: []byte(`{"x":1}`)}, r.failWith
}

func (r *recorder) Init(_ context.Context, s hparam.Setup) error { r.setup = s; return r.failWith }

func (r *recorder) Plan(_ context.Context, w hparam.WindowRequest) (hparam.WindowPlan, error) {
	r.req = w
	n := w.Steps
	if r.planLen != 0 {
		n = r.planLen
	}
	base := make([]float64, n)
	for i := range base {
		base[i] = float64(w.Start + i)
	}
	return hparam.WindowPlan{Base: base, Spread: hparam.Spread{Kind: hparam.Additive, Alpha: 0.25},
		Bounds: hparam.Bounds{Lower: -1, Upper: math.Inf(1)}, Probe: r.setup.Probe, SearchAtEnd: hparam.SearchDone}, r.failWith
}

func (r *recorder) Observe(_ context.Context, o hparam.Observation) (hparam.Feedback, error) {
	r.obs = o
	return hparam.Feedback{Weights: r.weights, Base: math.Pi, Estimate: -0.25, Offset: math.Ln2, Search: hparam.SearchDone}, r.failWith
}

func (r *recorder) Commit(context.Context) (hparam.Commitment, error) {
	return hparam.Commitment{Offset: -math.Ln2, Value: 0.0046, Note: "kept: why"}, r.failWith
}

func (r *recorder) SaveState(context.Context) ([]byte, error) {
	return []byte("state\x00bytes"), r.failWith
}

func (r *recorder) LoadState(_ context.Context, b []byte) error { r.loaded = b; return r.failWith }

// dial connects a gRPC client adapter to a server adapter serving impl, over
// go-plugin's in-process test connection.
func dial(t *testing.T, impl hparam.Explorer) hparam.Explorer {
	t.Helper()
	// Closing the client shuts the server down through go-plugin's controller.
	client, _ := plugin.TestPluginGRPCConn(t, false, PluginSet(impl))
	t.Cleanup(func() { _ = client.Close() })
	raw, err := client.Dispense(PluginName)
	require.NoError(t, err)
	x, ok := raw.(hparam.Explorer)
	require.True(t, ok, "dispensed %T", raw)
	return x
}

func TestGRPCRoundTripsEveryCall(t *testing.T) {
	rec := &recorder{weights: []float64{0.1, 0.2, 0.7}}
	x := dial(t, rec)
	ctx := context.Background()

	d, err := x.Describe(ctx)
	require.NoError(t, err)
	assert.Equal(t, hparam.Descriptor{Name: "rec", Version: "9.9", Hyperparameter: "h", Scale: hparam.Log,
		Bounds: hparam.Bounds{Lower: 1e-6, Upper: 3}, Spread: hparam.Spread{Kind: hparam.Geometric, Alpha: 0.5},
		ExampleConfig: []byte(`{"x":1}`)}, d)

	setup := hparam.Setup{Name: "lr/hidden", Config: []byte(`{"a":1}`), Ranks: 3, TotalSteps: 1 << 40, WindowSteps: 7, Seed: math.MaxUint64, Probe: true}
	require.NoError(t, x.Init(ctx, setup))
	assert.Equal(t, setup, rec.setup)

	p, err := x.Plan(ctx, hparam.WindowRequest{Window: 2, Start: 14, Steps: 7})
	require.NoError(t, err)
	assert.Equal(t, hparam.WindowRequest{Window: 2, Start: 14, Steps: 7}, rec.req)
	assert.Equal(t, []float64{14, 15, 16, 17, 18, 19, 20}, p.Base)
	assert.Equal(t, hparam.Spread{Kind: hparam.Additive, Alpha: 0.25}, p.Spread)
	assert.Equal(t, -1.0, p.Bounds.Lower)
	assert.True(t, math.IsInf(p.Bounds.Upper, 1), "+Inf bound must cross the wire")
	assert.True(t, p.Probe)
	assert.Equal(t, hparam.SearchDone, p.SearchAtEnd, "the search state expected at the run's end crosses the wire")

	f, err := x.Observe(ctx, hparam.Observation{Window: 2, Values: []float64{1, 2, 3}, Losses: []float64{0.5, math.NaN(), math.Inf(1)}, Probe: []float64{math.Inf(-1), 0.25, math.NaN()}, Level: 0.0046})
	require.NoError(t, err)
	assert.Equal(t, []float64{1, 2, 3}, rec.obs.Values)
	assert.Equal(t, 0.0046, rec.obs.Level, "the run's learning rate crosses the wire")
	assert.Equal(t, 0.5, rec.obs.Losses[0])
	assert.True(t, math.IsNaN(rec.obs.Losses[1]), "NaN loss must reach the explorer as NaN")
	assert.True(t, math.IsInf(rec.obs.Losses[2], 1))
	assert.True(t, math.IsInf(rec.obs.Probe[0], -1))
	assert.Equal(t, 0.25, rec.obs.Probe[1])
	assert.True(t, math.IsNaN(rec.obs.Probe[2]), "an unhealthy rank's probe loss arrives as NaN")
	assert.Equal(t, hparam.Feedback{Weights: []float64{0.1, 0.2, 0.7}, Base: math.Pi, Estimate: -0.25, Offset: math.Ln2, Search: hparam.SearchDone}, f)
	c, err := x.Commit(ctx)
	require.NoError(t, err)
	assert.Equal(t, hparam.Commitment{Offset: -math.Ln2, Value: 0.0046, Note: "kept: why"}, c, "the note crosses the wire")

	_, err = x.Observe(ctx, hparam.Observation{Window: 3, Values: []float64{1, 2, 3}, Losses: []float64{1, 1, 1}})
	require.NoError(t, err)
	assert.Nil(t, rec.obs.Probe, "a window without a probe arrives without one")

	st, err := x.SaveState(ctx)
	require.NoError(t, err)
	assert.Equal(t, []byte("state\x00bytes"), st)
	require.NoError(t, x.LoadState(ctx, []byte{0, 1, 2}))
	assert.Equal(t, []byte{0, 1, 2}, rec.loaded)
}

func TestGRPCCarriesExplorerErrors(t *testing.T) {
	x := dial(t, &recorder{failWith: errors.New("config: alpha must be positive")})
	err := x.Init(context.Background(), hparam.Setup{})
	require.Error(t, err)
	assert.Equal(t, "config: alpha must be positive", err.Error(), "the explorer's own words, no gRPC status around them")
}

// A refusal (an error wrapping hparam.ErrInvalid) crosses as gRPC's
// InvalidArgument and is hparam.ErrInvalid again on the host, in the
// explorer's words; any other error is not.
func TestGRPCCarriesRefusals(t *testing.T) {
	x := dial(t, &recorder{failWith: fmt.Errorf("%w: alpha: must be positive", hparam.ErrInvalid)})
	err := x.Init(context.Background(), hparam.Setup{})
	require.ErrorIs(t, err, hparam.ErrInvalid)
	assert.Equal(t, "invalid value: alpha: must be positive", err.Error())
	_, err = x.Observe(context.Background(), hparam.Observation{})
	assert.ErrorIs(t, err, hparam.ErrInvalid)

	x = dial(t, &recorder{failWith: errors.New("disk full")})
	assert.NotErrorIs(t, x.Init(context.Background(), hparam.Setup{}), hparam.ErrInvalid)
}

func TestGRPCClientRejectsOutOfProtocolAnswers(t *testing.T) {
	x := dial(t, &recorder{planLen: 3, weights: []float64{1}})
	_, err := x.Plan(context.Background(), hparam.WindowRequest{Window: 0, Steps: 5})
	assert.ErrorIs(t, err, ErrBadAnswer)
	_, err = x.Observe(context.Background(), hparam.Observation{Values: []float64{1, 2}, Losses: []float64{1, 2}})
	assert.ErrorIs(t, err, ErrBadAnswer)
}

func TestGRPCClientHonoursDeadline(t *testing.T) {
	x := dial(t, &recorder{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := x.Describe(ctx)
	require.Error(t, err)
}
