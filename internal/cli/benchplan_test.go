package cli

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseCounts(t *testing.T) {
	got, err := parseCounts("64, 1024,16384")
	require.NoError(t, err)
	assert.Equal(t, []int{64, 1024, 16384}, got)
	got, err = parseCounts("")
	require.NoError(t, err)
	assert.Empty(t, got)
	for _, bad := range []string{"0", "-4", "1k", "1,,2", "99999999"} {
		_, err := parseCounts(bad)
		assert.Error(t, err, "%q", bad)
	}
}
