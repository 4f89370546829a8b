package controller

import (
	"testing"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPermuter(t *testing.T) {
	draw := func(p *Permuter, n, k int) [][]uint32 {
		var out [][]uint32
		for range k {
			s := make([]uint32, n)
			p.Perm(s)
			out = append(out, s)
		}
		return out
	}
	a, b := NewPermuter(42), NewPermuter(42)
	seqA := draw(a, 17, 20)
	assert.Equal(t, seqA, draw(b, 17, 20), "same seed, same sequence")
	assert.NotEqual(t, seqA, draw(NewPermuter(43), 17, 20))
	for _, s := range seqA {
		seen := make([]bool, 17)
		for _, v := range s {
			require.False(t, seen[v])
			seen[v] = true
		}
	}

	// The state round-trips: a restored generator continues the sequence.
	st, err := a.MarshalBinary()
	require.NoError(t, err)
	var c Permuter
	require.NoError(t, c.UnmarshalBinary(st))
	assert.Equal(t, draw(a, 9, 5), draw(&c, 9, 5))
	assert.ErrorIs(t, c.UnmarshalBinary([]byte("junk")), hparam.ErrDecode)

	// Uniform: each of the 6 permutations of 3 about 1/6 of the time.
	counts := map[[3]uint32]int{}
	p := NewPermuter(7)
	const draws = 60000
	for range draws {
		var s [3]uint32
		p.Perm(s[:])
		counts[s]++
	}
	require.Len(t, counts, 6)
	for perm, n := range counts {
		assert.InDelta(t, draws/6, n, 500, "%v", perm) // > 5 standard deviations
	}
}
