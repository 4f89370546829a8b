package device_test

import (
	"fmt"
	"unsafe"

	"github.com/hdet-dev/hdet/device"
	"github.com/hdet-dev/hdet/mpi"
)

// A rank's GPU and converge path. The inventory is written out here so the
// example runs without a GPU; on a node it is Discover(SystemNVML()).
func Example() {
	inv := device.Inventory{DriverVersion: "550.54.15", CUDAVersion: "12.4", GPUs: []device.GPU{
		{Index: 0, UUID: "GPU-8c2f", Name: "NVIDIA H200", PCIBusID: "00000000:07:00.0", NUMANode: 0},
		{Index: 1, UUID: "GPU-51d0", Name: "NVIDIA H200", PCIBusID: "00000000:0F:00.0", NUMANode: 1},
	}}
	env := map[string]string{"CUDA_VISIBLE_DEVICES": "1"} // the scheduler left this task GPU 1
	vis := device.VisibleFromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	b, err := device.Bind(inv, vis, device.BindRequest{Rank: 3, LocalRank: 0, LocalSize: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(b)
	// Parameters in device memory and an MPI that is not CUDA-aware.
	c, err := device.ResolvePath(device.PathAuto, true, false)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(c)
	// Output:
	// rank 3 (local 0): GPU 1 GPU-51d0 (NVIDIA H200, 00000000:0F:00.0, NUMA node 1), CUDA device 0, from CUDA_VISIBLE_DEVICES=1
	// allreduce path staged: auto: MPI is not CUDA-aware, staging through pinned host memory
}

// oneRank stands in for *mpi.Comm as a world of one rank, where a sum
// leaves the data as it is.
type oneRank struct{}

func (oneRank) AllreduceFloat32([]float32, mpi.Op) error                     { return nil }
func (oneRank) AllreducePtr(unsafe.Pointer, int, mpi.Datatype, mpi.Op) error { return nil }

// The converge on host memory: the allreduce works on the slice itself.
func ExampleNewAllreducer() {
	ar, err := device.NewAllreducer(device.PathHost, oneRank{}, nil) // mpi.World() in a program
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ar.Close()
	params := device.HostBuffer{0.5, -2}
	if err := ar.Allreduce(params, mpi.Sum); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(ar.Path(), params)
	// Output: host [0.5 -2]
}
