package session

import (
	"errors"
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

// member is a rank of a communicator that a split made: its rank and size.
type member [2]int

func (m member) Rank() int { return m[0] }
func (m member) Size() int { return m[1] }

// SplitGroups splits by replica (ordered by position), then by position
// (ordered by CrossKey), and refuses a split that does not come out so.
func TestSplitGroups(t *testing.T) {
	lay, err := engine.NewLayout(6, 2)
	require.NoError(t, err)
	var asked []member
	honest := func(color, key int) (member, error) {
		asked = append(asked, member{color, key})
		if len(asked) == 1 {
			return member{key, 2}, nil // inside the replica
		}
		return member{key, 3}, nil // across the replicas
	}
	inside, cross, err := SplitGroups(lay, 3, honest) // replica 1, position 1
	require.NoError(t, err)
	assert.Equal(t, []member{{1, 1}, {1, lay.CrossKey(3)}}, asked, "(color, key) of each split")
	assert.Equal(t, []member{{1, 2}, {lay.CrossKey(3), 3}}, []member{inside, cross})

	_, _, err = SplitGroups(lay, 3, func(_, key int) (member, error) { return member{key, 6}, nil })
	assert.ErrorContains(t, err, "replica groups: rank 3 got replica rank 1 of 6")
	_, _, err = SplitGroups(lay, 3, func(int, int) (member, error) { return member{}, errors.New("refused") })
	assert.ErrorContains(t, err, "the communicator of replica 1: refused")
}

// A script's LOCAL_RANK and GPUs under replica groups come from the node-local
// ranks of its replica's ranks on its host, as a torchrun there would start
// them: the whole replica on one host, half of it on each of two hosts, or
// a cyclic placement that interleaves replicas.
func TestOnHost(t *testing.T) {
	g2, err := engine.NewLayout(4, 2)
	require.NoError(t, err)
	assert.Equal(t, []int{2, 3}, onHost([]float64{1, 1, 1, 1}, []int{0, 1, 2, 3}, g2, 3), "two replicas on one host")
	assert.Equal(t, []int{0}, onHost([]float64{1, 2, 1, 2}, []int{0, 0, 1, 1}, g2, 1), "--map-by node: one rank of the replica a host")
	g4, err := engine.NewLayout(8, 4)
	require.NoError(t, err)
	hosts, locals := []float64{1, 1, 2, 2, 3, 3, 4, 4}, []int{0, 1, 0, 1, 0, 1, 0, 1}
	assert.Equal(t, []int{0, 1}, onHost(hosts, locals, g4, 6), "a replica over two hosts of 2 ranks")
}
