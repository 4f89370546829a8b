package engine

import (
	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/internal/plan"
)

// A window whose plan anneals (plan.Plan.Anneal: the explorers asked for
// probe losses the workload cannot give) compares the replicas without
// a probe (docs/design.md §1.1). A replica's training losses at a high
// rate carry its iterates' noise, which the run's own decay later removes,
// so comparing them as they are favours small rates. Annealing every
// replica's rate linearly to zero over the window's last half removes that
// noise as a schedule's end does, and the mean loss of its last quarter,
// where every replica has slowed down, is what the replicas are compared by.
const (
	annealPart  = 2 // the last steps/annealPart steps anneal
	comparePart = 4 // the last steps/comparePart steps are compared
)

// annealLR scales this rank's learning rates over the window's last half:
// at its k-th step from the end (k = 0 last), by k/n of the rank's planned
// rate, n the annealed steps, so the last step trains at zero.
func annealLR(p *plan.Plan, v Values) {
	for i := range p.Params {
		name := p.Params[i].Name
		if !hparam.IsLR(name) {
			continue
		}
		vals := v[name]
		n := len(vals) / annealPart // a 1-step window trains as planned
		for k := 0; k < n; k++ {
			vals[len(vals)-1-k] *= float64(k) / float64(n)
		}
	}
}

// annealedLoss is the window's loss under an annealing plan: the mean of
// its last quarter's losses.
func annealedLoss(losses []float64) float64 {
	n := max(1, len(losses)/comparePart)
	return mean(losses[max(0, len(losses)-n):])
}
