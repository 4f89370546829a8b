package cli

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hdet-dev/hdet/device"
	"github.com/hdet-dev/hdet/internal/engine"
	"github.com/hdet-dev/hdet/internal/session"
	"github.com/hdet-dev/hdet/internal/stats"
	"github.com/hdet-dev/hdet/mpi"
)

func runBench(s Streams, args []string) error {
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
		fmt.Fprintln(s.Err, "usage: hdet bench allreduce|plan [flags]   (run 'hdet bench NAME -h' for its flags)")
		return flag.ErrHelp
	}
	if len(args) > 0 && args[0] == "plan" {
		return runBenchPlan(s, args[1:])
	}
	if len(args) == 0 || args[0] != "allreduce" {
		return Usagef("bench wants a benchmark name: allreduce or plan")
	}
	return runBenchAllreduce(s, args[1:])
}

// Default sizes: 1 MiB to 256 MiB on host memory, to 1 GiB on a GPU, in
// steps of four (nccl-tests' -f 4).
var (
	benchHostSizes   = []int{1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20}
	benchDeviceSizes = append(slices.Clone(benchHostSizes), 1<<30)
)

// allreduceResult is one size's line of `hdet bench allreduce`.
type allreduceResult struct {
	Bytes       int     `json:"bytes"`
	Count       int     `json:"count"`        // float32 elements
	Ranks       int     `json:"ranks"`        // the ranks the allreduce spans (N replicas under --replica-size)
	ReplicaSize int     `json:"replica_size"` // G
	Path        string  `json:"path"`
	Iterations  int     `json:"iterations"`
	MedianUS    float64 `json:"median_us"`
	AlgBW       float64 `json:"algbw_gbps"`
	BusBW       float64 `json:"busbw_gbps"`
}

func runBenchAllreduce(s Streams, args []string) error {
	fs := newFlagSet(s, "bench allreduce")
	sizesFlag := fs.String("sizes", "", "comma-separated buffer sizes (B, KiB, MiB, GiB; K/M/G mean the same); default 1MiB..256MiB by 4x, to 1GiB on a GPU")
	iters := fs.Int("iters", 10, "timed iterations per size; the median is reported")
	warmup := fs.Int("warmup", 2, "untimed iterations per size before timing")
	pathFlag := fs.String("path", "auto", "allreduce path: auto, device, staged or host")
	share := fs.Bool("share-gpus", false, "let several ranks share a GPU when a node has more ranks than GPUs")
	asJSON := fs.Bool("json", false, "print the results as JSON (rank 0)")
	replica := fs.Int("replica-size", 1, "G: time the converge of replica groups, an allreduce over the N = W/G ranks that hold one position in every replica (consecutive ranks form a replica)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: mpirun -np N hdet bench allreduce [flags]

Measures the converge step's in-place float32 sum allreduce. Bus bandwidth
follows nccl-tests: algbw = bytes / time, busbw = algbw * 2(N-1)/N. Each
iteration's time is the slowest rank's; the median over iterations is shown.
Every size is first checked for a correct sum on every rank.`)
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return Usagef("bench allreduce takes no arguments, got %q", fs.Args())
	}
	path, err := device.ParsePath(*pathFlag)
	if err != nil {
		return Usagef("--path: %v", err)
	}
	var sizes []int
	if *sizesFlag != "" {
		if sizes, err = parseSizes(*sizesFlag); err != nil {
			return Usagef("--sizes: %v", err)
		}
	}
	if *iters < 1 {
		return Usagef("--iters must be at least 1, got %d", *iters)
	}
	if *warmup < 0 {
		return Usagef("--warmup must be 0 or more, got %d", *warmup)
	}
	if *replica < 1 {
		return Usagef("--replica-size must be at least 1, got %d", *replica)
	}

	if err := mpi.Init(); err != nil {
		return err
	}
	w := mpi.World()
	o := benchOptions{path: path, sizes: sizes, iters: *iters, warmup: *warmup, share: *share, json: *asJSON}
	if o.over, o.inside, err = replicaComms(w, *replica); errors.Is(err, errReplicaSize) {
		_ = mpi.Finalize() // every rank knows: none waits in a collective
		return &UsageError{Err: err}
	}
	if err == nil {
		err = benchAllreduce(s, w, o)
	}
	if err != nil && w.Size() > 1 {
		// The other ranks may be waiting in a collective this rank will
		// never join: end the job rather than leave it hanging.
		fmt.Fprintf(s.Err, "hdet bench allreduce: rank %d: %v\n", w.Rank(), err)
		mpi.Abort(ExitFailure)
	}
	if ferr := mpi.Finalize(); err == nil {
		err = ferr
	}
	return err
}

type benchOptions struct {
	over          *mpi.Comm // the communicator the allreduce spans: the world, or the cross-replica one
	inside        *mpi.Comm // replica groups: this rank's replica; nil without
	path          device.Path
	sizes         []int
	iters, warmup int
	share, json   bool
}

func benchAllreduce(s Streams, w *mpi.Comm, o benchOptions) error {
	onDevice := o.path == device.PathDevice || o.path == device.PathStaged
	var inv device.Inventory
	if o.path != device.PathHost {
		var err error
		inv, err = device.Discover(device.SystemNVML())
		switch {
		case err == nil:
			onDevice = true
		case !device.CPUMode(err) || onDevice:
			return fmt.Errorf("--path %s: %w", o.path, err)
		}
	}
	choice, err := device.ResolvePath(o.path, onDevice, mpi.CUDAAware())
	if err != nil {
		return err
	}
	var mem device.Memory
	if onDevice {
		b, err := device.Bind(inv, device.VisibleFromEnv(os.LookupEnv), device.BindRequest{
			Rank: w.Rank(), LocalRank: w.LocalRank(), LocalSize: w.LocalSize(), AllowShare: o.share})
		if errors.Is(err, device.ErrTooManyRanks) {
			return fmt.Errorf("%w (--share-gpus)", err)
		}
		if err != nil {
			return err
		}
		fmt.Fprintln(s.Err, b)
		ctx, err := device.OpenCUDA(b)
		if err != nil {
			return err
		}
		defer ctx.Close()
		mem = ctx
	}
	ar, err := device.NewAllreducer(choice.Path, o.over, mem)
	if err != nil {
		return err
	}
	if ar, err = o.grouped(ar, w, onDevice); err != nil {
		return err
	}
	defer ar.Close()

	sizes := o.sizes
	if sizes == nil {
		sizes = benchHostSizes
		if onDevice {
			sizes = benchDeviceSizes
		}
	}
	var results []allreduceResult
	for _, size := range sizes {
		r, err := benchSize(w, ar, mem, size, o)
		if err != nil {
			return fmt.Errorf("%s: %w", formatBytes(size), err)
		}
		results = append(results, r)
	}
	if w.Rank() != 0 {
		return nil
	}
	if o.json {
		return writeJSON(s, results)
	}
	fmt.Fprintf(s.Out, "# hdet bench allreduce: %d ranks, float32 sum, %s; MPI CUDA-aware: %v\n", w.Size(), choice, mpi.CUDAAware())
	if o.over.Size() != w.Size() {
		fmt.Fprintf(s.Out, "# replica groups: %d replicas of %d ranks; the converge: each position's 1/%d slice summed across the %d replicas, then assembled inside each replica\n",
			o.over.Size(), w.Size()/o.over.Size(), w.Size()/o.over.Size(), o.over.Size())
	}
	fmt.Fprintf(s.Out, "# time: median of %d iterations (after %d warm-up), slowest rank; busbw = algbw * 2(N-1)/N\n", o.iters, o.warmup)
	tw := tabwriter.NewWriter(s.Out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "size\tcount\ttime (us)\talgbw (GB/s)\tbusbw (GB/s)\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.2f\t%.2f\t\n", formatBytes(r.Bytes), r.Count, r.MedianUS, r.AlgBW, r.BusBW)
	}
	return tw.Flush()
}

// benchSize checks and times one size. The buffer first holds rank+1 on
// every rank (its rank in o.over) and must come back as N(N+1)/2
// everywhere; the timed iterations then reduce zeros, which stay finite
// however many there are. Every world rank times each iteration together.
func benchSize(w *mpi.Comm, ar device.Allreducer, mem device.Memory, size int, o benchOptions) (allreduceResult, error) {
	n, c := size/4, o.over
	host := make([]float32, n)
	for i := range host {
		host[i] = float32(c.Rank() + 1)
	}
	var buf device.Buffer = device.HostBuffer(host)
	if mem != nil {
		d, err := device.NewDeviceBuffer(mem, n)
		if err != nil {
			return allreduceResult{}, err
		}
		defer d.Free()
		if err := d.Upload(host); err != nil {
			return allreduceResult{}, err
		}
		buf = d
	}
	if err := ar.Allreduce(buf, mpi.Sum); err != nil {
		return allreduceResult{}, err
	}
	if d, ok := buf.(*device.DeviceBuffer); ok {
		if err := d.Download(host); err != nil {
			return allreduceResult{}, err
		}
	}
	want := float32(c.Size() * (c.Size() + 1) / 2)
	if i := slices.IndexFunc(host, func(v float32) bool { return v != want }); i >= 0 {
		return allreduceResult{}, fmt.Errorf("rank %d: element %d is %v after the allreduce, want %v", w.Rank(), i, host[i], want)
	}
	clear(host)
	if d, ok := buf.(*device.DeviceBuffer); ok {
		if err := d.Upload(host); err != nil {
			return allreduceResult{}, err
		}
	}

	times := make([]float64, 0, o.iters)
	for it := range o.warmup + o.iters {
		if err := w.Barrier(); err != nil {
			return allreduceResult{}, err
		}
		start := time.Now()
		if err := ar.Allreduce(buf, mpi.Sum); err != nil {
			return allreduceResult{}, err
		}
		t := []float64{time.Since(start).Seconds()}
		if err := w.AllreduceFloat64(t, mpi.Max); err != nil {
			return allreduceResult{}, err
		}
		if it >= o.warmup {
			times = append(times, t[0])
		}
	}
	med := stats.Median(times)
	algbw := float64(size) / med / 1e9
	return allreduceResult{
		Bytes: size, Count: n, Ranks: c.Size(), ReplicaSize: w.Size() / c.Size(), Path: string(ar.Path()), Iterations: o.iters,
		MedianUS: med * 1e6, AlgBW: algbw, BusBW: busBandwidth(algbw, c.Size()),
	}, nil
}

var errReplicaSize = errors.New("replica groups")

// replicaComms splits w as hdet run does for replica groups of g
// consecutive ranks (session.SplitGroups): the ranks that hold this rank's
// position in every replica (w itself when g is 1), and this rank's replica
// (nil when g is 1).
func replicaComms(w *mpi.Comm, g int) (cross, inside *mpi.Comm, err error) {
	if g <= 1 {
		return w, nil, nil
	}
	if w.Size()%g != 0 {
		return nil, nil, fmt.Errorf("%w: --replica-size %d does not divide the %d ranks (W=%d, G=%d)", errReplicaSize, g, w.Size(), w.Size(), g)
	}
	inside, cross, err = session.SplitGroups(engine.Layout{World: w.Size(), Size: g}, w.Rank(), w.Split)
	return cross, inside, err
}

// grouped wraps ar in the converge of replica groups when o asks for them.
func (o benchOptions) grouped(ar device.Allreducer, w *mpi.Comm, onDevice bool) (device.Allreducer, error) {
	if o.inside == nil {
		return ar, nil
	}
	if onDevice {
		return nil, errors.New("--replica-size: the converge of replica groups is timed on host buffers (--path host)")
	}
	return groupedAllreducer{Allreducer: ar, inside: o.inside, lay: engine.Layout{World: w.Size(), Size: o.inside.Size()}, rank: w.Rank()}, nil
}

// groupedAllreducer is the converge of replica groups on host buffers, the
// engine's own (engine.SumGrouped): this position's slice summed across
// replicas by the embedded allreducer, then assembled inside the replica.
type groupedAllreducer struct {
	device.Allreducer // across replicas
	inside            *mpi.Comm
	lay               engine.Layout
	rank              int
}

func (g groupedAllreducer) Allreduce(b device.Buffer, op mpi.Op) error {
	host := b.Host()
	if host == nil || op != mpi.Sum {
		return errors.New("the grouped converge sums host buffers only")
	}
	return engine.SumGrouped(host, g.lay, g.rank, acrossReplicas{g.Allreducer}, g.inside)
}

// acrossReplicas is the sum across replicas (engine.Converger) through an
// allreducer on host memory.
type acrossReplicas struct{ device.Allreducer }

func (a acrossReplicas) AllreduceSum(buf []float32) error {
	return a.Allreduce(device.HostBuffer(buf), mpi.Sum)
}

// busBandwidth is nccl-tests' bus bandwidth for allreduce: the algorithm
// bandwidth scaled by 2(N-1)/N, the share of the data each rank's link
// carries in a ring allreduce, so figures compare across rank counts.
func busBandwidth(algbw float64, ranks int) float64 {
	return algbw * 2 * float64(ranks-1) / float64(ranks)
}

var errSize = errors.New("want a positive multiple of 4 bytes, at most 8 GiB, such as 4096, 256KiB, 1MiB or 1GiB")

var sizeUnits = map[string]int{"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gib": 1 << 30}

// parseSizes reads "1MiB,4MiB,1GiB": binary units, with K/M/G taken as
// KiB/MiB/GiB the way nccl-tests takes them.
func parseSizes(s string) ([]int, error) {
	var sizes []int
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		num := strings.TrimRightFunc(f, func(r rune) bool { return r < '0' || r > '9' })
		mult, ok := sizeUnits[strings.ToLower(f[len(num):])]
		v, err := strconv.Atoi(num)
		// MPI counts elements in an int: at most MaxInt32 floats (8 GiB).
		if !ok || err != nil || v < 1 || v > 4*math.MaxInt32/mult || v*mult%4 != 0 {
			return nil, fmt.Errorf("size %q: %w", f, errSize)
		}
		sizes = append(sizes, v*mult)
	}
	return sizes, nil
}

// formatBytes prints a size in the largest binary unit that divides it.
func formatBytes(b int) string {
	for _, u := range []struct {
		shift int
		name  string
	}{{30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if b >= 1<<u.shift && b%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d %s", b>>u.shift, u.name)
		}
	}
	return fmt.Sprintf("%d B", b)
}
