// Package device finds this node's NVIDIA GPUs with NVML (go-nvml, loaded at
// run time with dlopen), binds each rank to one of them, and provides the
// buffer abstraction (host or device memory) that the converge step
// all-reduces, with the allreducers that move it through MPI.
//
// It promises:
//   - nothing here needs a GPU, a driver or CUDA to build or run: without a
//     driver Discover returns an error for which CPUMode is true (CPU mode,
//     not a failure), and host buffers are used;
//   - Bind is a pure function of the inventory, what the environment makes
//     visible (CUDA_VISIBLE_DEVICES, SLURM_STEP_GPUS, SLURM_JOB_GPUS) and the
//     rank's place on its node: the same answer every time, and testable
//     with a written-out Inventory or go-nvml's mock servers (NVML);
//   - a forced allreduce path that cannot serve the buffer or the MPI is an
//     error (ErrPathMismatch, ErrNotCUDAAware), never a silent fallback.
//
// It does not: change the environment or pick the framework's device (it
// reports the CUDA ordinal for the caller to use); use NCCL (the allreduce
// is MPI's, on the device pointer only where MPI is CUDA-aware); hold other
// than float32 buffers; or bind a rank to more than one GPU.
package device

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// ErrNoDriver means NVML could not be loaded or the kernel driver is absent:
// the node runs in CPU mode. It is not a failure.
var ErrNoDriver = errors.New("no NVIDIA driver found")

// ErrNoDevices means the driver is present but reports no GPUs: CPU mode too.
var ErrNoDevices = errors.New("NVIDIA driver found, but it reports no GPUs")

// CPUMode reports whether err from Discover means "no GPUs here, use the
// CPU" rather than a failure.
func CPUMode(err error) bool {
	return errors.Is(err, ErrNoDriver) || errors.Is(err, ErrNoDevices)
}

// NVML is the part of go-nvml's nvml.Interface that discovery uses. Both the
// real library (nvml.New()) and go-nvml's mock servers satisfy it, which is
// how the tests drive discovery and binding without a GPU.
type NVML interface {
	Init() nvml.Return
	Shutdown() nvml.Return
	SystemGetDriverVersion() (string, nvml.Return)
	SystemGetCudaDriverVersion() (int, nvml.Return)
	DeviceGetCount() (int, nvml.Return)
	DeviceGetHandleByIndex(int) (nvml.Device, nvml.Return)
}

// SystemNVML is the node's NVML, loaded with dlopen on Init.
func SystemNVML() NVML { return nvml.New() }

// Inventory is what NVML reports about this node.
type Inventory struct {
	DriverVersion string `json:"driver_version"`
	CUDAVersion   string `json:"cuda_version"` // the newest CUDA the driver supports, e.g. "12.4"
	GPUs          []GPU  `json:"gpus"`
}

// GPU is one physical GPU as NVML enumerates it (PCI bus order). NVML
// ignores CUDA_VISIBLE_DEVICES, so this is every GPU the process can open.
type GPU struct {
	Index       int         `json:"index"` // NVML index
	UUID        string      `json:"uuid"`  // "GPU-..."
	Name        string      `json:"name"`
	MemoryTotal uint64      `json:"memory_total_bytes"`
	MemoryFree  uint64      `json:"memory_free_bytes"`
	PCIBusID    string      `json:"pci_bus_id"` // NVML's form, e.g. "00000000:07:00.0"
	NUMANode    int         `json:"numa_node"`  // -1 when unknown
	MIG         []MIGDevice `json:"mig,omitempty"`
}

// MIGDevice is one MIG instance of a GPU in MIG mode.
type MIGDevice struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"` // "MIG-..."
}

// Discover initialises NVML, reads every GPU and shuts NVML down again, so
// the result is plain data. A missing library or driver, or a driver with no
// GPUs, returns an error for which CPUMode is true.
func Discover(lib NVML) (Inventory, error) {
	switch ret := lib.Init(); ret {
	case nvml.SUCCESS:
	case nvml.ERROR_LIBRARY_NOT_FOUND, nvml.ERROR_DRIVER_NOT_LOADED:
		return Inventory{}, fmt.Errorf("%w (NVML: %v)", ErrNoDriver, ret)
	default:
		return Inventory{}, fmt.Errorf("NVML init: %w", ret)
	}
	defer lib.Shutdown()

	var inv Inventory
	var err error
	if inv.DriverVersion, err = nvmlValue(lib.SystemGetDriverVersion()); err != nil {
		return Inventory{}, fmt.Errorf("NVML driver version: %w", err)
	}
	cuda, err := nvmlValue(lib.SystemGetCudaDriverVersion())
	if err != nil {
		return Inventory{}, fmt.Errorf("NVML CUDA version: %w", err)
	}
	// NVML encodes 12.4 as 12040.
	inv.CUDAVersion = fmt.Sprintf("%d.%d", cuda/1000, cuda%1000/10)
	n, err := nvmlValue(lib.DeviceGetCount())
	if err != nil {
		return Inventory{}, fmt.Errorf("NVML device count: %w", err)
	}
	if n == 0 {
		return Inventory{}, ErrNoDevices
	}
	for i := range n {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return Inventory{}, fmt.Errorf("NVML device %d: %w", i, ret)
		}
		g, err := readGPU(i, d)
		if err != nil {
			return Inventory{}, fmt.Errorf("NVML device %d: %w", i, err)
		}
		inv.GPUs = append(inv.GPUs, g)
	}
	return inv, nil
}

func nvmlValue[T any](v T, ret nvml.Return) (T, error) {
	if ret != nvml.SUCCESS {
		return v, ret
	}
	return v, nil
}

func readGPU(i int, d nvml.Device) (GPU, error) {
	g := GPU{Index: i, NUMANode: -1}
	var err error
	if g.UUID, err = nvmlValue(d.GetUUID()); err != nil {
		return g, fmt.Errorf("UUID: %w", err)
	}
	if g.Name, err = nvmlValue(d.GetName()); err != nil {
		return g, fmt.Errorf("name: %w", err)
	}
	mem, err := nvmlValue(d.GetMemoryInfo())
	if err != nil {
		return g, fmt.Errorf("memory: %w", err)
	}
	g.MemoryTotal, g.MemoryFree = mem.Total, mem.Free
	pci, err := nvmlValue(d.GetPciInfo())
	if err != nil {
		return g, fmt.Errorf("PCI info: %w", err)
	}
	g.PCIBusID = cString(pci.BusId[:])
	// nvmlDeviceGetNumaNodeId is recent (driver 535+); older drivers answer
	// NOT_SUPPORTED or FUNCTION_NOT_FOUND, and then sysfs knows.
	if node, ret := d.GetNumaNodeId(); ret == nvml.SUCCESS {
		g.NUMANode = node
	} else {
		g.NUMANode = sysfsNUMANode(g.PCIBusID)
	}
	if g.MIG, err = readMIG(d); err != nil {
		return g, fmt.Errorf("MIG: %w", err)
	}
	return g, nil
}

func readMIG(d nvml.Device) ([]MIGDevice, error) {
	current, _, ret := d.GetMigMode()
	if ret == nvml.ERROR_NOT_SUPPORTED {
		return nil, nil // pre-Ampere GPUs have no MIG at all
	}
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	if current != nvml.DEVICE_MIG_ENABLE {
		return nil, nil
	}
	slots, err := nvmlValue(d.GetMaxMigDeviceCount())
	if err != nil {
		return nil, err
	}
	var migs []MIGDevice
	for j := range slots {
		m, ret := d.GetMigDeviceHandleByIndex(j)
		if ret == nvml.ERROR_NOT_FOUND {
			continue // an unpopulated slot
		}
		if ret != nvml.SUCCESS {
			return nil, ret
		}
		uuid, err := nvmlValue(m.GetUUID())
		if err != nil {
			return nil, err
		}
		migs = append(migs, MIGDevice{Index: j, UUID: uuid})
	}
	return migs, nil
}

// cString converts NVML's NUL-terminated char array.
func cString(b []int8) string {
	s := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		s = append(s, byte(c))
	}
	return string(s)
}

// sysfsRoot is where sysfsNUMANode looks; tests point it elsewhere.
var sysfsRoot = "/sys/bus/pci/devices"

// sysfsNUMANode reads the kernel's NUMA node for a PCI device, -1 if unknown.
func sysfsNUMANode(busID string) int {
	b, err := os.ReadFile(filepath.Join(sysfsRoot, sysfsBusID(busID), "numa_node"))
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return -1
	}
	return n
}

// sysfsBusID turns NVML's "00000000:07:00.0" into the kernel's "0000:07:00.0".
func sysfsBusID(busID string) string {
	b := normalizeBusID(busID)
	if dom, rest, ok := strings.Cut(b, ":"); ok && len(dom) > 4 {
		return dom[len(dom)-4:] + ":" + rest
	}
	return b
}

// normalizeBusID lowercases a PCI bus id and widens its domain to NVML's
// eight digits, so "0000:07:00.0" and "00000000:07:00.0" compare equal.
func normalizeBusID(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	dom, rest, ok := strings.Cut(s, ":")
	if !ok || strings.Count(rest, ":") != 1 {
		return s
	}
	for len(dom) < 8 {
		dom = "0" + dom
	}
	return dom + ":" + rest
}
