package device

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDiscoverH200(t *testing.T) {
	s := h200Server(t)
	inv, err := Discover(s)
	require.NoError(t, err)

	assert.Equal(t, "550.54.15", inv.DriverVersion)
	assert.Equal(t, "12.4", inv.CUDAVersion)
	require.Len(t, inv.GPUs, 8)
	for i, g := range inv.GPUs {
		assert.Equal(t, i, g.Index)
		assert.Equal(t, "NVIDIA H200 141GB HBM3e", g.Name)
		assert.Equal(t, s.Devices[i].(*server.Device).UUID, g.UUID)
		assert.True(t, strings.HasPrefix(g.UUID, "GPU-"), g.UUID)
		assert.Equal(t, uint64(144384)<<20, g.MemoryTotal)
		assert.Equal(t, g.MemoryTotal-1<<30, g.MemoryFree)
		assert.Equal(t, "00000000:0"+string(rune('0'+i))+":00.0", g.PCIBusID)
		assert.Equal(t, i/4, g.NUMANode)
		assert.Empty(t, g.MIG)
	}
	// NVML is reference counted: every Init needs its Shutdown.
	assert.Len(t, s.InitCalls(), 1)
	assert.Len(t, s.ShutdownCalls(), 1)
}

func TestDiscoverCPUMode(t *testing.T) {
	for _, ret := range []nvml.Return{nvml.ERROR_LIBRARY_NOT_FOUND, nvml.ERROR_DRIVER_NOT_LOADED} {
		lib := &mock.Interface{InitFunc: func() nvml.Return { return ret }}
		_, err := Discover(lib)
		require.ErrorIs(t, err, ErrNoDriver, ret.String())
		assert.True(t, CPUMode(err))
	}

	s := h200Server(t)
	s.Devices = nil
	_, err := Discover(s)
	require.ErrorIs(t, err, ErrNoDevices)
	assert.True(t, CPUMode(err))
}

func TestDiscoverFailureIsNotCPUMode(t *testing.T) {
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_NO_PERMISSION }}
	_, err := Discover(lib)
	require.Error(t, err)
	assert.False(t, CPUMode(err), "a driver that refuses us is a failure, not CPU mode: %v", err)
	assert.ErrorIs(t, err, nvml.ERROR_NO_PERMISSION)

	s := h200Server(t)
	s.Devices[5].(*server.Device).GetUUIDFunc = func() (string, nvml.Return) { return "", nvml.ERROR_GPU_IS_LOST }
	_, err = Discover(s)
	require.ErrorIs(t, err, nvml.ERROR_GPU_IS_LOST)
	assert.Contains(t, err.Error(), "device 5")
	assert.Len(t, s.ShutdownCalls(), 1, "NVML must be shut down on failure too")
}

func TestDiscoverNUMAFromSysfs(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "0000:03:00.0"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "0000:03:00.0", "numa_node"), []byte("1\n"), 0o644))
	old := sysfsRoot
	sysfsRoot = root
	t.Cleanup(func() { sysfsRoot = old })

	s := h200Server(t)
	for _, d := range s.Devices {
		d.(*server.Device).GetNumaNodeIdFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_FUNCTION_NOT_FOUND }
	}
	inv, err := Discover(s)
	require.NoError(t, err)
	assert.Equal(t, 1, inv.GPUs[3].NUMANode, "read from sysfs")
	assert.Equal(t, -1, inv.GPUs[2].NUMANode, "unknown without sysfs entry")
}

func TestDiscoverMIG(t *testing.T) {
	s := h200Server(t)
	d := s.Devices[0].(*server.Device)
	d.MigMode = nvml.DEVICE_MIG_ENABLE
	migs := map[int]string{0: "MIG-11111111-2222-3333-4444-555555555555", 2: "MIG-66666666-7777-8888-9999-000000000000"}
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, nvml.SUCCESS }
	d.GetMigDeviceHandleByIndexFunc = func(j int) (nvml.Device, nvml.Return) {
		uuid, ok := migs[j]
		if !ok {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return &mock.Device{GetUUIDFunc: func() (string, nvml.Return) { return uuid, nvml.SUCCESS }}, nvml.SUCCESS
	}
	inv, err := Discover(s)
	require.NoError(t, err)
	assert.Equal(t, []MIGDevice{{0, migs[0]}, {2, migs[2]}}, inv.GPUs[0].MIG)
	assert.Empty(t, inv.GPUs[1].MIG)
}

// On this machine's real NVML: no driver must read as CPU mode, never as an
// opaque failure; with a driver, every GPU has a UUID.
func TestDiscoverSystem(t *testing.T) {
	inv, err := Discover(SystemNVML())
	if err != nil {
		require.True(t, CPUMode(err), "no GPU must mean CPU mode: %v", err)
		return
	}
	require.NotEmpty(t, inv.GPUs)
	for _, g := range inv.GPUs {
		assert.True(t, strings.HasPrefix(g.UUID, "GPU-"), g.UUID)
	}
}

func TestBusIDForms(t *testing.T) {
	assert.Equal(t, "00000000:07:00.0", normalizeBusID("0000:07:00.0"))
	assert.Equal(t, "00000000:b7:00.0", normalizeBusID("00000000:B7:00.0"))
	assert.Equal(t, "0000:b7:00.0", sysfsBusID("00000000:B7:00.0"))
	assert.Equal(t, "not-a-bus-id", normalizeBusID("not-a-bus-id"))
}
