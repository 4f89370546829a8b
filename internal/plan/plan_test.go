package plan

import (
	"bytes"
	"math"
	"testing"

	"github.com/hdet-dev/hdet/hparam"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func samplePlan() *Plan {
	return &Plan{Window: 3, Start: 30, Steps: 4, Params: []ParamPlan{
		{Name: "lr", Base: []float64{0.1, 0.09, 0.08, 0.07}, Spread: hparam.Spread{Kind: hparam.Multiplicative, Alpha: 0.2},
			Bounds: hparam.Bounds{Lower: 1e-8, Upper: 10}, Slots: []uint32{2, 0, 1}},
		{Name: "dropout", Base: []float64{0.3, 0.3, 0.3, 0.3}, Spread: hparam.Spread{Kind: hparam.Additive, Alpha: 0.5},
			Bounds: hparam.Bounds{Lower: 0, Upper: 0.9}, Slots: []uint32{0, 2, 1}, Frozen: true},
		{Name: "wd", Base: []float64{1e-3, 1e-3, 1e-3, 2e-3}, Spread: hparam.Spread{Kind: hparam.Geometric, Alpha: 9},
			Bounds: hparam.Bounds{Lower: 0, Upper: 1}, Slots: []uint32{1, 2, 0}},
	}}
}

func TestPlanRoundTrip(t *testing.T) {
	p := samplePlan()
	b, err := p.MarshalBinary()
	require.NoError(t, err)
	var q Plan
	require.NoError(t, q.UnmarshalBinary(b))
	assert.Equal(t, *p, q)
	assert.Equal(t, byte(planVersion), b[0])

	// Values: slot 0 of 3 is the lowest multiplier, and clamping applies.
	v, err := q.Value("lr", 1, 0)
	require.NoError(t, err)
	assert.InDelta(t, 0.1*0.8, v, 1e-16)
	v, err = q.Value("dropout", 0, 2)
	require.NoError(t, err)
	assert.Equal(t, 0.0, v, "0.3-0.5 clamped to 0")
	v, err = q.Value("wd", 2, 3)
	require.NoError(t, err)
	assert.InDelta(t, 2e-4, v, 1e-18)
	assert.Equal(t, []float64{0.3, 0.3, 0.3, 0.3}, q.Params[1].RankValues(2))
	_, err = q.Value("momentum", 0, 0)
	assert.ErrorIs(t, err, hparam.ErrInvalid)
	_, err = q.Value("lr", 3, 0)
	assert.ErrorIs(t, err, hparam.ErrInvalid)
	_, err = q.Value("lr", 0, 4)
	assert.ErrorIs(t, err, hparam.ErrInvalid)
}

func TestPlanConstantBaseIsCompact(t *testing.T) {
	long := &Plan{Steps: 1000, Params: []ParamPlan{{Name: "lr", Base: make([]float64, 1000),
		Spread: hparam.Spread{Kind: hparam.Multiplicative, Alpha: 0.1}, Bounds: hparam.Bounds{Lower: 0, Upper: 1}, Slots: []uint32{0, 1}}}}
	for i := range long.Params[0].Base {
		long.Params[0].Base[i] = 0.01
	}
	b, err := long.MarshalBinary()
	require.NoError(t, err)
	assert.Less(t, len(b), 60)
	var q Plan
	require.NoError(t, q.UnmarshalBinary(b))
	assert.Equal(t, *long, q)
}

// Slots that do not permute 0..N-1 encode, and every receiver refuses them.
func TestPlanSlotsCheckedOnDecode(t *testing.T) {
	for name, slots := range map[string][]uint32{"not a permutation": {0, 0, 1}, "slot out of range": {0, 3, 1}} {
		p := samplePlan()
		p.Params[0].Slots = slots
		assert.ErrorIs(t, p.Validate(), hparam.ErrInvalid, name)
		b, err := p.MarshalBinary()
		require.NoError(t, err, name)
		var q Plan
		assert.ErrorIs(t, q.UnmarshalBinary(b), hparam.ErrInvalid, name)
	}
}

func TestPlanRejectsInvalid(t *testing.T) {
	for name, mod := range map[string]func(*Plan){
		"ranks differ":  func(p *Plan) { p.Params[1].Slots = []uint32{0, 1} },
		"NaN base":      func(p *Plan) { p.Params[0].Base[1] = math.NaN() },
		"short base":    func(p *Plan) { p.Params[0].Base = p.Params[0].Base[:3] },
		"repeated name": func(p *Plan) { p.Params[1].Name = "lr" },
		"bad spread":    func(p *Plan) { p.Params[0].Spread.Alpha = 1 },
		"bad bounds":    func(p *Plan) { p.Params[0].Bounds = hparam.Bounds{Lower: 1, Upper: 0} },
		"no steps":      func(p *Plan) { p.Steps = 0 },
	} {
		p := samplePlan()
		mod(p)
		_, err := p.MarshalBinary()
		assert.ErrorIs(t, err, hparam.ErrInvalid, name)
		assert.ErrorIs(t, p.Validate(), hparam.ErrInvalid, name)
	}
}

func TestPlanDecodeGarbage(t *testing.T) {
	b, err := samplePlan().MarshalBinary()
	require.NoError(t, err)
	var q Plan
	for i := range b {
		require.ErrorIs(t, q.UnmarshalBinary(b[:i]), hparam.ErrDecode, "prefix of %d bytes", i)
	}
	require.ErrorIs(t, q.UnmarshalBinary(append(b, 0)), hparam.ErrDecode, "trailing byte")
	other := append([]byte{planVersion + 1}, b[1:]...)
	require.ErrorIs(t, q.UnmarshalBinary(other), hparam.ErrDecode, "another version")
	// Every single-byte corruption either decodes to a valid plan or errs.
	for i := range b {
		for _, x := range []byte{0x01, 0x80, 0xff} {
			c := bytes.Clone(b)
			c[i] ^= x
			if err := q.UnmarshalBinary(c); err == nil {
				require.NoError(t, q.Validate())
			} else {
				require.ErrorIs(t, err, hparam.ErrDecode)
			}
		}
	}
	// A huge declared length costs an error, not an allocation.
	require.ErrorIs(t, q.UnmarshalBinary([]byte{1, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 1, 1}), hparam.ErrDecode)
}

func FuzzPlanDecode(f *testing.F) {
	b, err := samplePlan().MarshalBinary()
	require.NoError(f, err)
	f.Add(b)
	// A plan as the controller makes one: constant bases, more ranks.
	q := samplePlan()
	q.Steps = 8
	for i := range q.Params {
		pp := &q.Params[i]
		pp.Base = make([]float64, q.Steps)
		for s := range pp.Base {
			pp.Base[s] = 0.01 * float64(i+1)
		}
		pp.Slots = []uint32{4, 2, 0, 1, 3}
	}
	b, err = q.MarshalBinary()
	require.NoError(f, err)
	f.Add(b)
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, data []byte) {
		var q Plan
		if err := q.UnmarshalBinary(data); err != nil {
			require.ErrorIs(t, err, hparam.ErrDecode)
			return
		}
		// What decodes is valid, and re-encodes to a plan that decodes the same.
		again, err := q.MarshalBinary()
		require.NoError(t, err)
		var r Plan
		require.NoError(t, r.UnmarshalBinary(again))
		require.Equal(t, len(q.Params), len(r.Params))
		for i := range q.Params {
			require.Equal(t, q.Params[i].Slots, r.Params[i].Slots)
			for s := range q.Params[i].Base {
				require.Equal(t, math.Float64bits(q.Params[i].Base[s]), math.Float64bits(r.Params[i].Base[s]))
			}
		}
	})
}

func TestPlanCarriesItsFlags(t *testing.T) {
	for _, f := range []Plan{{Pass: PassMain}, {Probe: true}, {Anneal: true}, {Probe: true, Anneal: true}, {Search: true}, {Probe: true, Search: true}} {
		p := Plan{Window: 2, Start: 20, Steps: 2, Pass: f.Pass, Probe: f.Probe, Anneal: f.Anneal, Search: f.Search,
			Params: []ParamPlan{{Name: "lr", Base: []float64{1, 2}, Spread: hparam.Spread{Kind: hparam.Multiplicative}, Bounds: hparam.Bounds{Lower: 0, Upper: 10}, Slots: []uint32{1, 0}}}}
		b, err := p.MarshalBinary()
		require.NoError(t, err)
		var q Plan
		require.NoError(t, q.UnmarshalBinary(b))
		assert.Equal(t, p, q)
	}
}
