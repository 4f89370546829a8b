package device

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

var (
	// ErrNoVisibleGPU means the scheduler or the user hid every GPU from
	// this process (for example CUDA_VISIBLE_DEVICES="" or "-1").
	ErrNoVisibleGPU = errors.New("no GPU is visible to this process")
	// ErrTooManyRanks means more ranks run on this node than it has
	// visible GPUs and sharing was not asked for.
	ErrTooManyRanks = errors.New("more ranks on this node than visible GPUs")
	// ErrUnknownGPU means a visible-device id matches no GPU NVML reports.
	ErrUnknownGPU = errors.New("visible-device id matches no GPU")
)

// Visible is what the scheduler (or the user) made visible to this process.
type Visible struct {
	CUDA     []string // CUDA_VISIBLE_DEVICES entries, in CUDA ordinal order
	CUDASet  bool     // CUDA_VISIBLE_DEVICES is set; set and empty hides every GPU
	Slurm    []string // SLURM_STEP_GPUS, else SLURM_JOB_GPUS: node-global GPU ids
	SlurmVar string   // which of the two Slurm set
}

// VisibleFromEnv reads CUDA_VISIBLE_DEVICES, SLURM_STEP_GPUS and
// SLURM_JOB_GPUS through lookup (os.LookupEnv in production).
func VisibleFromEnv(lookup func(string) (string, bool)) Visible {
	var v Visible
	if s, ok := lookup("CUDA_VISIBLE_DEVICES"); ok {
		v.CUDASet = true
		// CUDA stops at the first negative index ("-1" hides everything);
		// Slurm writes NoDevFiles when a step got no GPUs.
		for _, id := range splitIDs(s) {
			if n, err := strconv.Atoi(id); (err == nil && n < 0) || id == "NoDevFiles" {
				break
			}
			v.CUDA = append(v.CUDA, id)
		}
	}
	for _, name := range []string{"SLURM_STEP_GPUS", "SLURM_JOB_GPUS"} {
		if s, ok := lookup(name); ok && len(splitIDs(s)) > 0 {
			v.Slurm, v.SlurmVar = splitIDs(s), name
			break
		}
	}
	return v
}

func splitIDs(s string) []string {
	var ids []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			ids = append(ids, f)
		}
	}
	return ids
}

// BindRequest is the rank's place in the job.
type BindRequest struct {
	Rank       int
	LocalRank  int  // rank among the ranks on this node
	LocalSize  int  // ranks on this node
	AllowShare bool // let several ranks use one GPU when there are too few
}

// Binding is the GPU a rank uses; the engine logs it once per rank.
type Binding struct {
	Rank        int    `json:"rank"`
	LocalRank   int    `json:"local_rank"`
	GPUIndex    int    `json:"gpu_index"` // NVML index of the physical GPU
	UUID        string `json:"gpu_uuid"`
	MIG         string `json:"mig_uuid,omitempty"` // set when bound to a MIG instance
	Name        string `json:"name"`
	PCIBusID    string `json:"pci_bus_id"`
	NUMANode    int    `json:"numa_node"`
	CUDAOrdinal int    `json:"cuda_ordinal"` // the device number to give CUDA in this process
	Shared      bool   `json:"shared"`       // other local ranks use this GPU too
	Source      string `json:"source"`       // the variable that decided what is visible
}

func (b Binding) String() string {
	id := b.UUID
	if b.MIG != "" {
		id = b.MIG + " on " + b.UUID
	}
	s := fmt.Sprintf("rank %d (local %d): GPU %d %s (%s, %s, NUMA node %d), CUDA device %d, from %s",
		b.Rank, b.LocalRank, b.GPUIndex, id, b.Name, b.PCIBusID, b.NUMANode, b.CUDAOrdinal, b.Source)
	if b.Shared {
		s += ", shared with other ranks"
	}
	return s
}

// candidate is one GPU this process may use, at its CUDA ordinal.
type candidate struct {
	gpu     GPU
	mig     string
	ordinal int
}

// Bind chooses this rank's GPU: the LocalRank-th of the GPUs visible to the
// process. NVML ignores CUDA_VISIBLE_DEVICES and numbers the GPUs it can see
// in PCI bus order, so the visible ids are matched against NVML by UUID
// ("GPU-...", a unique prefix, or a MIG instance's "MIG-..."), by PCI bus id,
// or by index. Integer CUDA ids are taken as NVML indices (CUDA's order with
// CUDA_DEVICE_ORDER=PCI_BUS_ID); when Slurm's global ids come with them and
// NVML sees more GPUs than Slurm allocated, CUDA's ids are relative to
// Slurm's list, as Slurm writes them when it constrains devices.
func Bind(inv Inventory, vis Visible, req BindRequest) (Binding, error) {
	if req.LocalSize < 1 || req.LocalRank < 0 || req.LocalRank >= req.LocalSize {
		return Binding{}, fmt.Errorf("device: local rank %d of %d is not a valid place", req.LocalRank, req.LocalSize)
	}
	cands, source, err := visibleGPUs(inv, vis)
	if err != nil {
		return Binding{}, err
	}
	if len(cands) == 0 {
		return Binding{}, fmt.Errorf("%w (%s)", ErrNoVisibleGPU, source)
	}
	// With --gpus-per-task=1 Slurm hands each task its own single GPU; the
	// step's list is longer than what this task sees, and nothing is shared.
	perTask := len(cands) == 1 && len(vis.Slurm) > 1
	shared := req.LocalSize > len(cands) && !perTask
	if shared && !req.AllowShare {
		return Binding{}, fmt.Errorf("%w: %d ranks on this node, %d GPU(s) visible (%s); allow sharing to run several ranks per GPU",
			ErrTooManyRanks, req.LocalSize, len(cands), source)
	}
	c := cands[req.LocalRank%len(cands)]
	return Binding{
		Rank: req.Rank, LocalRank: req.LocalRank,
		GPUIndex: c.gpu.Index, UUID: c.gpu.UUID, MIG: c.mig, Name: c.gpu.Name,
		PCIBusID: c.gpu.PCIBusID, NUMANode: c.gpu.NUMANode,
		CUDAOrdinal: c.ordinal, Shared: shared, Source: source,
	}, nil
}

// GroupVisible is the CUDA_VISIBLE_DEVICES of the ranks of one node that
// form one torch world, whose node-local ranks are locals in LOCAL_RANK
// order: their GPUs by UUID in that order, so that each finds its own at
// cuda:LOCAL_RANK, as a torchrun worker does. It is "" where they cannot
// all be listed: ranks that share a GPU, MIG instances (CUDA enumerates one
// a process), or a Slurm task that sees only its own GPU.
func GroupVisible(inv Inventory, vis Visible, req BindRequest, locals []int) (string, error) {
	ids := make([]string, len(locals))
	for p, l := range locals {
		r := req
		r.LocalRank = l
		b, err := Bind(inv, vis, r)
		if err != nil {
			return "", err
		}
		if b.Shared || b.MIG != "" || slices.Contains(ids[:p], b.UUID) {
			return "", nil
		}
		ids[p] = b.UUID
	}
	return strings.Join(ids, ","), nil
}

// visibleGPUs lists the GPUs this process may use, in CUDA ordinal order.
func visibleGPUs(inv Inventory, vis Visible) ([]candidate, string, error) {
	var cands []candidate
	switch {
	case vis.CUDASet:
		ids := vis.CUDA
		if cudaRelativeToSlurm(inv, vis) {
			ids = make([]string, len(vis.CUDA))
			for i, id := range vis.CUDA {
				k, _ := strconv.Atoi(id) // cudaRelativeToSlurm checked every id
				ids[i] = vis.Slurm[k]
			}
		}
		// Without CUDA_VISIBLE_DEVICES' help, CUDA would number the GPUs
		// as NVML does; with it, the ordinal is the position in the list.
		for i, id := range ids {
			g, mig, err := match(inv, id)
			if err != nil {
				return nil, "", fmt.Errorf("CUDA_VISIBLE_DEVICES entry %d: %w", i, err)
			}
			cands = append(cands, candidate{gpu: g, mig: mig, ordinal: i})
		}
		return cands, "CUDA_VISIBLE_DEVICES=" + strings.Join(vis.CUDA, ","), nil
	case len(vis.Slurm) > 0:
		source := vis.SlurmVar + "=" + strings.Join(vis.Slurm, ",")
		if slurmBeyondNVML(inv, vis.Slurm) {
			// Device cgroups already narrowed NVML's view to the
			// allocation: its GPUs are exactly Slurm's.
			return allGPUs(inv), source, nil
		}
		for i, id := range vis.Slurm {
			g, mig, err := match(inv, id)
			if err != nil {
				return nil, "", fmt.Errorf("%s entry %d: %w", vis.SlurmVar, i, err)
			}
			cands = append(cands, candidate{gpu: g, mig: mig, ordinal: g.Index})
		}
		return cands, source, nil
	default:
		return allGPUs(inv), "all GPUs NVML reports", nil
	}
}

func allGPUs(inv Inventory) []candidate {
	cands := make([]candidate, len(inv.GPUs))
	for i, g := range inv.GPUs {
		cands[i] = candidate{gpu: g, ordinal: g.Index}
	}
	return cands
}

// cudaRelativeToSlurm reports whether integer CUDA ids index Slurm's global
// list rather than NVML: NVML sees the whole node (more GPUs than Slurm
// allocated), the lists differ, and every CUDA id fits Slurm's list.
func cudaRelativeToSlurm(inv Inventory, vis Visible) bool {
	if len(vis.Slurm) == 0 || len(inv.GPUs) <= len(vis.Slurm) || slices.Equal(vis.CUDA, vis.Slurm) {
		return false
	}
	for _, id := range vis.CUDA {
		k, err := strconv.Atoi(id)
		if err != nil || k >= len(vis.Slurm) {
			return false
		}
	}
	return true
}

// slurmBeyondNVML reports whether Slurm's integer ids cannot be NVML indices
// because NVML sees only as many GPUs as Slurm allocated.
func slurmBeyondNVML(inv Inventory, ids []string) bool {
	if len(inv.GPUs) != len(ids) {
		return false
	}
	for _, id := range ids {
		if k, err := strconv.Atoi(id); err == nil && k >= len(inv.GPUs) {
			return true
		}
	}
	return false
}

// match finds the GPU (and MIG instance) an id names.
func match(inv Inventory, id string) (GPU, string, error) {
	if k, err := strconv.Atoi(id); err == nil {
		if k < 0 || k >= len(inv.GPUs) {
			return GPU{}, "", fmt.Errorf("%w: index %d, NVML reports %d GPU(s)", ErrUnknownGPU, k, len(inv.GPUs))
		}
		return inv.GPUs[k], "", nil
	}
	if strings.HasPrefix(id, "MIG-") {
		for _, g := range inv.GPUs {
			for _, m := range g.MIG {
				if m.UUID == id {
					return g, id, nil
				}
			}
		}
		// The pre-R470 form names the parent: MIG-GPU-<uuid>/<gi>/<ci>.
		if parent, _, ok := strings.Cut(strings.TrimPrefix(id, "MIG-"), "/"); ok {
			for _, g := range inv.GPUs {
				if g.UUID == parent {
					return g, id, nil
				}
			}
		}
		return GPU{}, "", fmt.Errorf("%w: MIG instance %q", ErrUnknownGPU, id)
	}
	if strings.Count(id, ":") == 2 {
		for _, g := range inv.GPUs {
			if normalizeBusID(g.PCIBusID) == normalizeBusID(id) {
				return g, "", nil
			}
		}
		return GPU{}, "", fmt.Errorf("%w: PCI bus id %q", ErrUnknownGPU, id)
	}
	// CUDA accepts a UUID with or without "GPU-", or any unique prefix.
	want := strings.ToLower(id)
	if !strings.HasPrefix(want, "gpu-") {
		want = "gpu-" + want
	}
	var found []GPU
	for _, g := range inv.GPUs {
		if strings.HasPrefix(strings.ToLower(g.UUID), want) {
			found = append(found, g)
		}
	}
	switch len(found) {
	case 1:
		return found[0], "", nil
	case 0:
		return GPU{}, "", fmt.Errorf("%w: UUID %q", ErrUnknownGPU, id)
	}
	return GPU{}, "", fmt.Errorf("%w: UUID prefix %q is ambiguous (%d GPUs)", ErrUnknownGPU, id, len(found))
}
