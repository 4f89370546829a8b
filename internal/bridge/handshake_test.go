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

// Parameters on another rank's GPU are refused (exit 2), with the device to
// use: cuda:LOCAL_RANK where the script sees its torch world's GPUs, cuda:0
// where it sees its own only.
func TestCheckDevice(t *testing.T) {
	for _, c := range []struct {
		name    string
		o       Options
		dev     string
		message string
	}{
		{"its own GPU", Options{GPU: "a,b,c", GPUIndex: 2, LocalRank: 2}, "cuda:2", ""},
		{"on the CPU", Options{GPU: "a,b,c", GPUIndex: 2, LocalRank: 2}, "cpu", ""},
		{"CPU mode", Options{GPUIndex: -1}, "cuda:3", ""},
		{"cuda:0 on local rank 2", Options{GPU: "a,b,c", GPUIndex: 2, LocalRank: 2}, "cuda:0",
			`the script's parameters are on cuda:0, but this rank's GPU is cuda:2; it sees its torch world's GPUs on this node, as under torchrun: put the model on torch.device("cuda", int(os.environ["LOCAL_RANK"])) (LOCAL_RANK=2)`},
		{"position 1 of a replica", Options{GPU: "a,b", GPUIndex: 1, LocalRank: 5, ReplicaSize: 2, ReplicaRank: 1, ReplicaLocalRank: 1, ReplicaLocalSize: 2}, "cuda:0", "(LOCAL_RANK=1)"},
		{"its own GPU only", Options{GPU: "a", GPUIndex: 0, LocalRank: 3}, "cuda:3", `it sees its own GPU only (shared GPUs, a MIG instance or one GPU a Slurm task): put the model on torch.device("cuda", 0)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := (&Worker{opts: c.o}).checkDevice(c.dev)
			if c.message == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrSetting)
			assert.Contains(t, err.Error(), c.message)
		})
	}
}
