package hparam

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestAdmissibleRanges(t *testing.T) {
	lr := Admissible("lr/hidden")
	assert.False(t, lr.Contains(0), "lr > 0")
	assert.True(t, lr.Contains(1e-300))
	assert.False(t, lr.Contains(math.Inf(1)))
	assert.Equal(t, "(0, +Inf)", lr.String())
	assert.Greater(t, lr.Clamp(-1), 0.0)
	assert.True(t, lr.Closure().Contains(0), "a base may touch a finite end")
	assert.False(t, lr.Closure().Contains(math.Inf(1)), "an infinite end stays open")

	d := Admissible("dropout")
	assert.True(t, d.Contains(0))
	assert.False(t, d.Contains(1), "dropout < 1")
	assert.Equal(t, "[0, 1)", d.String())
	assert.Less(t, d.Clamp(1.5), 1.0)
	assert.Equal(t, 0.0, d.Clamp(-0.3))
	assert.True(t, Admissible("weight_decay").Contains(0))
	assert.False(t, Admissible("momentum").Contains(1))

	other := Admissible("temperature")
	assert.True(t, other.Contains(-1e300))
	assert.False(t, other.Contains(math.NaN()))
	assert.False(t, other.Contains(math.Inf(-1)))
}
