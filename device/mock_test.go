package device

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// h200Server is go-nvml's 8×H200 DGX mock with the answers its devices leave
// unset filled in the way a real DGX H200 gives them: PCI bus ids in NVML's
// eight-digit form, GPUs 0-3 on NUMA node 0 and 4-7 on node 1, and some
// memory in use.
func h200Server(t *testing.T) *server.Server {
	t.Helper()
	s := dgxh200.New()
	for i, d := range s.Devices {
		dev := d.(*server.Device)
		node := i / 4
		bus := "0000" + dev.PciBusID // the mock's "0000:0i:00.0" → "00000000:0i:00.0"
		dev.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
			p := nvml.PciInfo{PciDeviceId: dev.Config.PciDeviceId}
			for j := range len(bus) {
				p.BusId[j] = int8(bus[j])
			}
			return p, nvml.SUCCESS
		}
		dev.GetNumaNodeIdFunc = func() (int, nvml.Return) { return node, nvml.SUCCESS }
		dev.MemoryInfo.Used = 1 << 30
		dev.MemoryInfo.Free = dev.MemoryInfo.Total - dev.MemoryInfo.Used
	}
	return s
}

// h200Inventory is what Discover makes of h200Server.
func h200Inventory(t *testing.T) Inventory {
	t.Helper()
	inv, err := Discover(h200Server(t))
	if err != nil {
		t.Fatalf("Discover on the H200 mock: %v", err)
	}
	return inv
}
