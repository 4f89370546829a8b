package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"text/tabwriter"

	"github.com/hdet-dev/hdet/device"
)

// discoverDevices is the node's NVML in production; tests swap in go-nvml's
// mock servers.
var discoverDevices = func() (device.Inventory, error) { return device.Discover(device.SystemNVML()) }

// devicesJSON is `hdet devices --json`; CPU mode is an answer, not an error.
type devicesJSON struct {
	CPUMode bool   `json:"cpu_mode"`
	Reason  string `json:"reason,omitempty"`
	device.Inventory
}

func runDevices(s Streams, args []string) error {
	fs := newFlagSet(s, "devices")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: hdet devices [--json]\n\nLists the NVIDIA GPUs NVML reports on this node (NVML ignores CUDA_VISIBLE_DEVICES).")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return Usagef("devices takes no arguments, got %q", fs.Args())
	}
	inv, err := discoverDevices()
	if err != nil && !device.CPUMode(err) {
		return err
	}
	if err != nil {
		// The sentinel's own words make the one clean line; the detail
		// (NVML's return code) goes to JSON readers.
		reason := device.ErrNoDriver
		if errors.Is(err, device.ErrNoDevices) {
			reason = device.ErrNoDevices
		}
		if *asJSON {
			return writeJSON(s, devicesJSON{CPUMode: true, Reason: err.Error(), Inventory: device.Inventory{GPUs: []device.GPU{}}})
		}
		fmt.Fprintf(s.Out, "%v: CPU mode\n", reason)
		return nil
	}
	if *asJSON {
		return writeJSON(s, devicesJSON{Inventory: inv})
	}
	fmt.Fprintf(s.Out, "NVIDIA driver %s, CUDA %s, %d GPU(s)\n", inv.DriverVersion, inv.CUDAVersion, len(inv.GPUs))
	tw := tabwriter.NewWriter(s.Out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "INDEX\tNAME\tUUID\tMEMORY FREE/TOTAL\tPCI BUS ID\tNUMA")
	for _, g := range inv.GPUs {
		numa := "-"
		if g.NUMANode >= 0 {
			numa = strconv.Itoa(g.NUMANode)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%.1f/%.1f GiB\t%s\t%s\n", g.Index, g.Name, g.UUID,
			gib(g.MemoryFree), gib(g.MemoryTotal), g.PCIBusID, numa)
		for _, m := range g.MIG {
			fmt.Fprintf(tw, "  MIG %d\t\t%s\t\t\t\n", m.Index, m.UUID)
		}
	}
	return tw.Flush()
}

func gib(b uint64) float64 { return float64(b) / (1 << 30) }

func writeJSON(s Streams, v any) error {
	enc := json.NewEncoder(s.Out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
