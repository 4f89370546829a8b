package stats

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestMedian(t *testing.T) {
	assert.Equal(t, 2.0, Median([]float64{3, 1, 2}))
	assert.Equal(t, 2.5, Median([]float64{4, 1, 3, 2}))
	assert.True(t, math.IsNaN(Median(nil)))
	xs := []float64{3, 1, 2}
	Median(xs)
	assert.Equal(t, []float64{3, 1, 2}, xs, "the input keeps its order")
}
