package session

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/engine"
)

// Replicas that fill their hosts (block layout) or span whole hosts are
// fine; ranks dealt out round-robin over hosts are named.
func TestInterleavedPlacement(t *testing.T) {
	g2, err := engine.NewLayout(4, 2)
	require.NoError(t, err)
	assert.Empty(t, interleaved([]float64{1, 1, 2, 2}, g2), "a replica per host")
	assert.Empty(t, interleaved([]float64{1, 1, 1, 1}, g2), "one host")
	assert.Equal(t, []string{"replica 0 (ranks 0-1)", "replica 1 (ranks 2-3)"}, interleaved([]float64{1, 2, 1, 2}, g2), "--map-by node")
	g4, err := engine.NewLayout(8, 4)
	require.NoError(t, err)
	assert.Empty(t, interleaved([]float64{1, 1, 2, 2, 3, 3, 4, 4}, g4), "each replica over two whole hosts")
	g1, err := engine.NewLayout(10, 1)
	require.NoError(t, err)
	assert.Empty(t, interleaved([]float64{1, 2, 1, 2, 1, 2, 1, 2, 1, 2}, g1))
	g2x5, err := engine.NewLayout(12, 2)
	require.NoError(t, err)
	many := interleaved([]float64{1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2}, g2x5)
	assert.Equal(t, "and 2 more", many[len(many)-1])
	assert.Len(t, many, 5)
}
