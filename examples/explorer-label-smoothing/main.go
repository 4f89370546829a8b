// Command explorer-label-smoothing is the worked example of an hdet explorer:
// it explores label smoothing with an additive spread and, after each window,
// moves the base part of the way toward the value of the rank with the lowest
// finite loss. Build it as bin/plugins/hdet-explorer-label-smoothing.
package main

import (
	"encoding/json"
	"math"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/plugins/sdk"
)

type rule struct {
	Initial float64 `json:"start"` // first base (default 0.1)
	Step    float64 `json:"step"`  // fraction of the way to the best rank's value (default 0.5)
}

func (r *rule) Describe() hparam.Descriptor {
	return hparam.Descriptor{Name: "label-smoothing", Version: "1.0.0", Hyperparameter: "label_smoothing",
		Scale: hparam.Linear, Bounds: hparam.Bounds{Lower: 0, Upper: 0.3},
		Spread:        hparam.Spread{Kind: hparam.Additive, Alpha: 0.05},
		ExampleConfig: []byte(`{"start":0.1,"step":0.5}`)}
}

func (r *rule) Start(s hparam.Setup) (float64, error) {
	*r = rule{Initial: 0.1, Step: 0.5}
	err := json.Unmarshal(s.Config, r)
	return r.Initial, err
}

func (r *rule) Update(base float64, o hparam.Observation) (float64, []float64, error) {
	best := -1
	for i, l := range o.Losses {
		if !math.IsNaN(l) && !math.IsInf(l, 0) && (best < 0 || l < o.Losses[best]) {
			best = i
		}
	}
	if best < 0 {
		return base, nil, nil // no healthy rank this window: keep the base
	}
	return base + r.Step*(o.Values[best]-base), nil, nil
}

func main() { sdk.Serve(sdk.FromRule(&rule{})) }
