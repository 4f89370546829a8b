package plan

import (
	"math"
	"slices"

	"github.com/hdet-dev/hdet/hparam"
)

// BaseLR is the learning-rate base a display shows for a plan: "lr" when
// explored, else the first learning-rate group by name; NaN when the plan
// explores none. The value is the base at the window's last step.
func BaseLR(p *Plan) float64 {
	var names []string
	for i := range p.Params {
		if hparam.IsLR(p.Params[i].Name) {
			names = append(names, p.Params[i].Name)
		}
	}
	if len(names) == 0 {
		return math.NaN()
	}
	slices.Sort(names) // "lr" sorts before every "lr/..."
	pp, _ := p.Param(names[0])
	return pp.Base[len(pp.Base)-1]
}
