// Command hdetbench measures what HDET buys and what it costs on the
// built-in MNIST workload under real mpirun (issue 11): a learning-rate
// sweep against single HDET runs, stability at a high learning rate, the
// per-step overhead, the converge allreduce against C, the controller's cost
// and sigma's scale. It prints one table per study and writes them, with
// the commands and the machine, to docs/benchmarks.md, and the sweep plot
// to docs/sweep.png. Run it from the repository root after `make build
// data` (`make bench` / `make bench-quick` do all of it).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hdet-dev/hdet/internal/atomicfile"
)

// settings are the sizes of the studies: the full run or the quick one.
type settings struct {
	NP                  int
	Bin                 string
	Epochs              int     // per training run of studies 1, 2, 6
	SweepN              int     // sweep points
	SweepLo, SweepHi    float64 // first and last sweep max_lr
	OverheadSteps       int     // steps per run of study 3
	OverheadReps        int     // repetitions of every study-3 row
	Windows             []int   // study 3's T values
	AllreduceRounds     int
	AllreduceReps       int
	ControllerBenchtime string  // go test -benchtime of study 5
	RelativeSigma       float64 // study 6's sigma in relative mode
}

func defaults(quick bool) settings {
	s := settings{NP: 4, Bin: "bin", Epochs: 3, SweepN: 10, SweepLo: 3e-5, SweepHi: 3e-2,
		OverheadSteps: 2000, OverheadReps: 3, Windows: []int{10, 100, 1000},
		AllreduceRounds: 5, AllreduceReps: 15, ControllerBenchtime: "2s", RelativeSigma: 1}
	if quick {
		s.Epochs, s.SweepN = 1, 7
		s.OverheadSteps, s.OverheadReps = 1000, 2
		s.AllreduceRounds, s.AllreduceReps = 3, 5
		s.ControllerBenchtime = "100x"
	}
	return s
}

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "hdetbench:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("hdetbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "the quick variant (make bench-quick): 1 epoch, 7 sweep points, fewer repetitions")
	np := fs.Int("np", 4, "ranks per run")
	bin := fs.String("bin", "bin", "folder holding hdet, plugins/ and allreduce-c, allreduce-go")
	out := fs.String("out", "docs/benchmarks.md", "the markdown report")
	plotPath := fs.String("plot", "docs/sweep.png", "study 1's plot")
	runs := fs.String("runs", "runs/bench", "where the run directories go")
	only := fs.String("studies", "1,2,3,4,5,6", "comma-separated studies to run (2 and 6 need 1)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	p := defaults(*quick)
	p.NP, p.Bin = *np, *bin
	want := map[int]bool{}
	for _, f := range strings.Split(*only, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 6 {
			return fmt.Errorf("-studies: %q is not a study number 1..6", f)
		}
		want[n] = true
	}
	if *np < 1 {
		return fmt.Errorf("-np: want >= 1, got %d", *np)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Setenv("OMPI_ALLOW_RUN_AS_ROOT", "1")
	os.Setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) }
	b := &bench{p: p, best: -1, rn: &runner{np: p.NP, mpirun: mpirunArgs(p.NP),
		hdet: filepath.Join(p.Bin, "hdet"), root: *runs, log: logf}}

	machine := describeMachine(ctx)
	loadBefore := loadAvg()
	began := time.Now()
	studies := []struct {
		n  int
		fn func(context.Context) (*table, error)
	}{
		{1, b.studySweep}, {6, b.studySigma}, {2, b.studyStability},
		{3, b.studyOverhead}, {4, b.studyAllreduce}, {5, b.studyController},
	}
	tables := map[int]*table{}
	var errs []error
	for _, s := range studies {
		if !want[s.n] {
			continue
		}
		logf("study %d ...", s.n)
		t0 := time.Now()
		t, err := s.fn(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("study %d: %w", s.n, err))
			t.note("FAILED: %v", firstLine(err))
			if ctx.Err() != nil {
				tables[s.n] = t
				break
			}
		}
		t.note("Study time: %s.", time.Since(t0).Round(time.Second))
		tables[s.n] = t
		t.text(stdout)
	}
	total := time.Since(began).Round(time.Second)

	var plotted bool
	if t := tables[1]; t != nil && len(b.sweep) > 0 {
		if err := b.plot(*plotPath); err != nil {
			errs = append(errs, err)
		} else {
			plotted = true
			fmt.Fprintf(stdout, "\nplot: %s\n", *plotPath)
		}
	}
	doc := docHeader{Quick: *quick, Settings: p, Machine: machine, LoadBefore: loadBefore, LoadAfter: loadAvg(),
		Total: total, Args: args, Plot: plotted, PlotPath: *plotPath, OutPath: *out}
	if err := writeDoc(*out, doc, tables); err != nil {
		errs = append(errs, err)
	} else {
		fmt.Fprintf(stdout, "report: %s (%s in all)\n", *out, total)
	}
	return errors.Join(errs...)
}

// plot draws study 1 (and study 6's relative runs, when there are any).
func (b *bench) plot(path string) error {
	sweep := series{Label: "plain DP sweep (one run per point)"}
	for i, r := range b.sweep {
		sweep.LR = append(sweep.LR, b.sweepLRs[i])
		sweep.Loss = append(sweep.Loss, r.TestLoss)
	}
	hd := series{Label: "HDET (decay floor), one run from this start"}
	nd := series{Label: "HDET (decay none), one run from this start"}
	for i, r := range b.hdetAbs {
		hd.LR = append(hd.LR, b.starts[i])
		hd.Loss = append(hd.Loss, r.TestLoss)
	}
	for i, r := range b.hdetNoDecay {
		nd.LR = append(nd.LR, b.starts[i])
		nd.Loss = append(nd.Loss, r.TestLoss)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return plotSweep(path, sweep, hd, nd)
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// machine is the description the doc starts with.
type machine struct {
	CPUs   int
	Model  string
	Go     string
	MPIRun string
	Kernel string
}

func describeMachine(ctx context.Context) machine {
	m := machine{CPUs: runtime.NumCPU(), Go: runtime.Version(), Model: "unknown", MPIRun: "unknown", Kernel: "unknown"}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.Model = strings.TrimSpace(v)
				break
			}
		}
	}
	if out, err := exec.CommandContext(ctx, "nproc").Output(); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(out))); err == nil {
			m.CPUs = n
		}
	}
	if out, err := exec.CommandContext(ctx, "mpirun", "--version").Output(); err == nil {
		m.MPIRun, _, _ = strings.Cut(strings.TrimSpace(string(out)), "\n")
	}
	if out, err := exec.CommandContext(ctx, "uname", "-sr").Output(); err == nil {
		m.Kernel = strings.TrimSpace(string(out))
	}
	if out, err := exec.CommandContext(ctx, "go", "version").Output(); err == nil {
		m.Go = strings.TrimSpace(string(out))
	}
	return m
}

// loadAvg is the first three fields of /proc/loadavg: the machine is
// shared, and the load says how much the timings can be trusted.
func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	return strings.Join(f[:min(3, len(f))], " ")
}

type docHeader struct {
	Quick                 bool
	Settings              settings
	Machine               machine
	LoadBefore, LoadAfter string
	Total                 time.Duration
	Args                  []string
	Plot                  bool
	PlotPath, OutPath     string
}

// writeDoc writes the markdown report: how it was made, then the tables in
// study order.
func writeDoc(path string, h docHeader, tables map[int]*table) error {
	var sb strings.Builder
	variant := "`make bench` (the full variant)"
	if h.Quick {
		variant = "`make bench-quick` (the quick variant: fewer and shorter runs, 1 repetition; run `make bench` for the full one)"
	}
	p := h.Settings
	fmt.Fprintf(&sb, "# hdet benchmarks\n\nWhat HDET buys and what it costs on the built-in MNIST workload (784-256-256-10 MLP, AdamW, batch 64 per rank), N = %d ranks under real `mpirun`. Generated by `bench/hdetbench` on %s UTC by %s, in %s.\n\n",
		p.NP, time.Now().UTC().Format("2006-01-02 15:04"), variant, h.Total)
	fmt.Fprintf(&sb, "## Machine\n\n- %d CPUs (`nproc`), %s\n- %s\n- %s\n- %s\n- load average (1, 5, 15 min) before: %s, after: %s. The machine was shared with other work while this ran, so timings are noisy: every timing comparison interleaves its sides and uses medians.\n\n",
		h.Machine.CPUs, h.Machine.Model, h.Machine.Kernel, h.Machine.Go, h.Machine.MPIRun, h.LoadBefore, h.LoadAfter)
	fmt.Fprintf(&sb, "## Reproduce\n\n```sh\nmake bench        # or: make bench-quick\n# which is: make build data; the allreduce programs; then\ngo run ./bench/hdetbench %s\n```\n\n",
		strings.Join(h.Args, " "))
	fmt.Fprintf(&sb, "Every run is launched as `OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 %s ...` (the environment only matters as root); each study lists its exact commands. Configs: `bench/configs/`. Settings: epochs %d, sweep %d points from %g to %g, overhead %d steps x %d repetitions, T = %v, allreduce %d rounds x %d reps, controller -benchtime %s.\n\n",
		strings.Join(mpirunArgs(p.NP), " "), p.Epochs, p.SweepN, p.SweepLo, p.SweepHi, p.OverheadSteps, p.OverheadReps, p.Windows,
		p.AllreduceRounds, p.AllreduceReps, p.ControllerBenchtime)
	keys := make([]int, 0, len(tables))
	for k := range tables {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		tables[k].markdown(&sb)
		if k == 1 && h.Plot {
			rel, err := filepath.Rel(filepath.Dir(h.OutPath), h.PlotPath)
			if err != nil {
				rel = h.PlotPath
			}
			fmt.Fprintf(&sb, "![final test loss against the starting learning rate](%s)\n\n", filepath.ToSlash(rel))
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(path, []byte(sb.String()))
}
