package hparam

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The table is consistent: one row per name, an explorer's defaults inside
// what the hyperparameter admits, and lookups by group.
func TestBuiltinsTable(t *testing.T) {
	seen := map[string]bool{}
	for _, b := range Builtins {
		require.False(t, seen[b.Name], "%s has two rows", b.Name)
		seen[b.Name] = true
		if b.Explorer == "" {
			assert.Zero(t, b.Bounds, "%s: bounds without an explorer", b.Name)
			continue
		}
		assert.NoError(t, AdmitBounds(b.Name, b.Bounds), b.Name)
		assert.NoError(t, b.Spread.Validate(), b.Name)
		assert.Contains(t, []Scale{Log, Linear}, b.Scale, b.Name)
		got, ok := BuiltinExplored(b.Explorer)
		require.True(t, ok)
		assert.Equal(t, b.Name, got.Name)
	}
	lr, ok := BuiltinOf("lr/hidden")
	require.True(t, ok)
	assert.Equal(t, "lr", lr.Name)
	_, ok = BuiltinOf("temperature")
	assert.False(t, ok)
	_, ok = BuiltinExplored("")
	assert.False(t, ok, "a row without an explorer is no explorer's")
	assert.Equal(t, []string{"lr", "dropout", "weight_decay"}, Explored())
}

// Describe gives the words config errors have always used.
func TestRangeDescribe(t *testing.T) {
	for name, want := range map[string]string{
		"lr": "a finite number > 0", "weight_decay": "a finite number >= 0", "dropout": "a number in [0, 1)",
		"temperature": "a finite number",
	} {
		assert.Equal(t, want, Admissible(name).Describe(), name)
	}
	assert.Equal(t, "a number in (0, 1]", Range{Lower: 0, Upper: 1, LowerOpen: true}.Describe())
	assert.Equal(t, "a finite number <= 2", Range{Lower: math.Inf(-1), Upper: 2, LowerOpen: true}.Describe())
}
