package engine

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/hdet-dev/hdet/internal/plan"
)

func TestAnnealLR(t *testing.T) {
	p := plan.Plan{Params: []plan.ParamPlan{{Name: "lr"}, {Name: "lr/head"}, {Name: "dropout"}}}
	v := Values{"lr": {2, 2, 2, 2, 2, 2}, "lr/head": {1, 1, 1}, "dropout": {0.1, 0.1, 0.1, 0.1, 0.1, 0.1}, "lr/one": {3}}
	p.Params = append(p.Params, plan.ParamPlan{Name: "lr/one"})
	annealLR(&p, v)
	assert.Equal(t, []float64{2, 2, 2, 2 * 2.0 / 3, 2 * 1.0 / 3, 0}, v["lr"], "the last half, linearly to zero")
	assert.Equal(t, []float64{1, 1, 0}, v["lr/head"], "every learning rate; a 3-step window anneals its last step")
	assert.Equal(t, []float64{0.1, 0.1, 0.1, 0.1, 0.1, 0.1}, v["dropout"], "nothing else")
	assert.Equal(t, []float64{3}, v["lr/one"], "a 1-step window trains, unannealed")
}

func TestAnnealedLoss(t *testing.T) {
	assert.Equal(t, 1.5, annealedLoss([]float64{9, 9, 9, 9, 9, 9, 1, 2}), "the last quarter's mean")
	assert.Equal(t, 4.0, annealedLoss([]float64{9, 4}), "at least the last step")
	assert.Equal(t, 3.0, annealedLoss([]float64{3}))
}
