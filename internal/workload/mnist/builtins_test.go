package mnist

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/hdet-dev/hdet/hparam"
)

// The workload applies exactly the rows of hparam.Builtins that say where
// it does (their MNIST field), and checks values against what they admit.
func TestAppliesTheBuiltinsThatSaySo(t *testing.T) {
	applied := map[string]bool{}
	for _, name := range (&Replica{}).Hyperparameters() {
		b, ok := hparam.BuiltinOf(name)
		if assert.True(t, ok, "%s is not in hparam.Builtins", name) {
			assert.NotEmpty(t, b.MNIST, "%s: the row does not say where the workload applies it", name)
			applied[b.Name] = true
		}
	}
	for _, b := range hparam.Builtins {
		assert.Equal(t, b.MNIST != "", applied[b.Name], "%s: its row's MNIST field and the workload disagree", b.Name)
	}
	for _, name := range []string{HLR, HDropout, HWeightDecay} {
		err := checkValue(name, math.Inf(1))
		assert.True(t, errors.Is(err, ErrInvalidValue), name)
		assert.True(t, strings.HasSuffix(err.Error(), hparam.Admissible(name).Closure().Describe()) ||
			strings.HasSuffix(err.Error(), hparam.Admissible(name).Describe()), err.Error())
	}
	assert.NoError(t, checkValue(HLROutput, 0), "a schedule's rate may end at 0")
	assert.Error(t, checkValue(HDropout, 1))
}
