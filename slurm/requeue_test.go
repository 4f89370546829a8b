package slurm

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRequeueRejectsBadJobID(t *testing.T) {
	for _, id := range []string{"", "12 13"} {
		err := Requeue(context.Background(), id)
		assert.ErrorIs(t, err, ErrRequeue, "%q", id)
	}
}

func TestRequeueWithoutScontrol(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	err := Requeue(context.Background(), "42")
	require.ErrorIs(t, err, ErrRequeue)
	assert.Contains(t, err.Error(), "scontrol requeue 42")
	assert.Contains(t, err.Error(), "executable file not found")
}
