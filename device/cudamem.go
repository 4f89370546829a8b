package device

import (
	"fmt"

	"github.com/hdet-dev/hdet/device/cuda"
)

var _ Memory = (*cuda.Context)(nil)

// OpenCUDA opens the CUDA context of a bound GPU. A whole GPU is found by its
// PCI bus id, which is exact even where CUDA numbers devices differently from
// NVML (CUDA_DEVICE_ORDER=FASTEST_FIRST, its default); a MIG instance has no
// bus id of its own, so Bind's ordinal is used for it. Without a driver the
// error wraps cuda.ErrNoDriver.
func OpenCUDA(b Binding) (*cuda.Context, error) {
	ordinal := b.CUDAOrdinal
	if b.MIG == "" {
		o, err := cuda.OrdinalByPCIBusID(b.PCIBusID)
		if err != nil {
			return nil, fmt.Errorf("device: CUDA device at %s: %w", b.PCIBusID, err)
		}
		ordinal = o
	}
	return cuda.Open(ordinal)
}
