package bridge

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The script's torch world against the replica groups: with G > 1 it must
// be the replica; sharded parameters need replica groups; what the script
// found it cannot hand over is refused as a setting (exit 2), with its words.
func TestCheckReplicaWorld(t *testing.T) {
	for _, c := range []struct {
		name    string
		g       int
		h       Hello
		is      error
		message string
	}{
		{"DDP in a replica", 2, Hello{DistWorldSize: 2}, nil, ""},
		{"FSDP2 in a replica", 2, Hello{DistWorldSize: 2, Sharded: true}, nil, ""},
		{"no replica world", 2, Hello{}, ErrConflict, "train.replica_size is 2, so each replica's 2 ranks must train as one data-parallel model"},
		{"FSDP2 over the run", 1, Hello{DistWorldSize: 4, Sharded: true}, ErrConflict, "sharded over its torch world of 4 ranks (FSDP2 fully_shard), which is the whole run"},
		{"unsupported sharding", 2, Hello{DistWorldSize: 2, Sharded: true, Unsupported: "a 2-D device mesh (HSDP)"}, ErrSetting, "a 2-D device mesh (HSDP)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := &Worker{opts: Options{ReplicaSize: c.g}}
			err := w.checkReplicaWorld(c.h)
			if c.is == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, c.is)
			assert.Contains(t, err.Error(), c.message)
		})
	}
}
