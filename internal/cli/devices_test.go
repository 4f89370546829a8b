package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/hdet-dev/hdet/device"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// devicesWith runs `hdet devices args` against lib and returns the exit
// code, stdout and stderr.
func devicesWith(t *testing.T, lib device.NVML, args ...string) (int, string, string) {
	t.Helper()
	old := discoverDevices
	discoverDevices = func() (device.Inventory, error) { return device.Discover(lib) }
	t.Cleanup(func() { discoverDevices = old })
	var out, errb bytes.Buffer
	s := Streams{Out: &out, Err: &errb}
	return exitCode(s, "devices", runDevices(s, args)), out.String(), errb.String()
}

// h200 is go-nvml's 8×H200 mock with the NUMA answer its devices leave unset.
func h200() *server.Server {
	s := dgxh200.New()
	for _, d := range s.Devices {
		d.(*server.Device).GetNumaNodeIdFunc = func() (int, nvml.Return) { return 0, nvml.SUCCESS }
	}
	return s
}

func TestDevicesCPUMode(t *testing.T) {
	noLib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
	code, out, errOut := devicesWith(t, noLib)
	assert.Equal(t, ExitOK, code)
	assert.Equal(t, "no NVIDIA driver found: CPU mode\n", out)
	assert.Empty(t, errOut)

	code, out, _ = devicesWith(t, noLib, "--json")
	assert.Equal(t, ExitOK, code)
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	assert.Equal(t, true, got["cpu_mode"])
	assert.Contains(t, got["reason"], "ERROR_LIBRARY_NOT_FOUND")
	assert.Equal(t, []any{}, got["gpus"])

	noGPUs := h200()
	noGPUs.Devices = nil
	code, out, _ = devicesWith(t, noGPUs)
	assert.Equal(t, ExitOK, code)
	assert.Equal(t, "NVIDIA driver found, but it reports no GPUs: CPU mode\n", out)
}

func TestDevicesTableAndJSON(t *testing.T) {
	s := h200()
	code, out, _ := devicesWith(t, s)
	require.Equal(t, ExitOK, code)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 10, out) // summary, header, 8 GPUs
	assert.Equal(t, "NVIDIA driver 550.54.15, CUDA 12.4, 8 GPU(s)", lines[0])
	assert.Contains(t, lines[1], "PCI BUS ID")
	for i, d := range s.Devices {
		assert.Contains(t, lines[2+i], d.(*server.Device).UUID)
		assert.Contains(t, lines[2+i], "NVIDIA H200 141GB HBM3e")
		assert.Contains(t, lines[2+i], "0.0/141.0 GiB") // the mock reports no free memory
	}

	code, out, _ = devicesWith(t, s, "--json")
	require.Equal(t, ExitOK, code)
	var got devicesJSON
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	assert.False(t, got.CPUMode)
	require.Len(t, got.GPUs, 8)
	assert.Equal(t, s.Devices[7].(*server.Device).UUID, got.GPUs[7].UUID)
	assert.Equal(t, uint64(144384)<<20, got.GPUs[7].MemoryTotal)
}

func TestDevicesErrors(t *testing.T) {
	refused := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_NO_PERMISSION }}
	code, out, errOut := devicesWith(t, refused)
	assert.Equal(t, ExitFailure, code, "a driver that refuses us is a failure")
	assert.Empty(t, out)
	assert.Contains(t, errOut, "ERROR_NO_PERMISSION")

	code, _, errOut = devicesWith(t, h200(), "extra")
	assert.Equal(t, ExitUsage, code)
	assert.Contains(t, errOut, "devices takes no arguments")

	code, _, _ = devicesWith(t, h200(), "--bogus")
	assert.Equal(t, ExitUsage, code)
}
