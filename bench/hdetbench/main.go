// Command hdetbench measures what HDET buys and what it costs on the
// built-in MNIST workload under real mpirun (issues 11 and 14): learning-rate
// sweeps against HDET runs from three starts on two setups, stability at a
// high learning rate, the per-step overhead, the converge allreduce against
// C and the controller's cost. It prints one table per study and writes
// them, with the commands and the machine, into docs/benchmarks.md's
// generated blocks (the rest of the file is left as it is), and study 1's
// plots to docs/sweep-<setup>.png. Run it from the repository root after
// `make build data` (`make bench` / `make bench-quick` do all of it).
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
)

// settings are the sizes of the studies: the full run or the quick one.
type settings struct {
	NP                  int
	Bin                 string
	Quick               bool
	Python              string   // the interpreter of study 1's PyTorch setups
	Setups              []string // study 1's setups by name; empty: all but the GPT's
	Group               string   // their doc group (setup.Group)
	Epochs              int      // per training run of the MLP in studies 1 and 2
	Seeds               []int    // study 1's sweep seeds: they pick the best point
	HeldOut             []int    // study 1's held-out seeds: the reference and the HDET runs
	SweepN              int      // study 1's sweep points per setup
	FullSweeps          int      // how many of Seeds sweep every point (the others: the points next to the best)
	FormSeeds           int      // how many of HeldOut run the forms other than the default
	OverheadSteps       int      // scheduled steps per run of study 3
	OverheadReps        int      // repetitions (pairs) of study 3
	Windows             []int    // study 3's T values
	AllreduceRounds     int
	AllreduceReps       int
	ControllerBenchtime string // go test -benchtime of study 5
	ControllerCount     int    // and its -count: study 5 reports the median
	GPTPairs            int    // interleaved pairs of study 8
}

func defaults(quick bool) settings {
	s := settings{NP: 4, Bin: "bin", Quick: quick, Python: ".venv/bin/python", Epochs: 3, Seeds: []int{1, 2, 3},
		HeldOut: []int{4, 5, 6, 7, 8}, SweepN: 12, FullSweeps: 1, FormSeeds: 3,
		OverheadSteps: 2000, OverheadReps: 4, Windows: []int{10, 50, 100},
		AllreduceRounds: 5, AllreduceReps: 15, ControllerBenchtime: "2s", ControllerCount: 5, GPTPairs: 6}
	if quick {
		s.Seeds, s.HeldOut, s.SweepN, s.FormSeeds = []int{1}, []int{2}, 7, 1
		s.OverheadSteps, s.OverheadReps = 1000, 2
		s.AllreduceRounds, s.AllreduceReps = 3, 5
		s.ControllerBenchtime, s.ControllerCount = "100x", 3
		s.GPTPairs = 2
	}
	return s
}

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "hdetbench:", err)
		os.Exit(1)
	}
}

// options are hdetbench's flags.
type options struct {
	p                  settings
	out, plotDir, runs string
	want               map[int]bool
	args               []string
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("hdetbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "the quick variant (make bench-quick): 1 sweep seed and 1 held-out seed, 7 sweep points, a tiny ConvNet, a 150-step 1-layer GPT, fewer repetitions")
	np := fs.Int("np", 4, "ranks per run")
	bin := fs.String("bin", "bin", "folder holding hdet, plugins/ and allreduce-c, allreduce-go")
	out := fs.String("out", "docs/benchmarks.md", "the markdown report; only its generated blocks are replaced")
	plotDir := fs.String("plots", "docs", "where study 1's plots go (sweep-<setup>.png)")
	runs := fs.String("runs", "runs/bench", "where the run directories go")
	only := fs.String("studies", "1,2,3,4,5,7", "comma-separated studies to run (2 needs 1; 7 needs root and the test bed, else it is skipped; 8, the GPT's overhead against torchrun, needs PyTorch); the doc keeps the others' blocks")
	seeds := fs.String("seeds", "", "study 1's sweep seeds, comma-separated (default 1,2,3; the quick variant 1)")
	heldOut := fs.String("heldout", "", "study 1's held-out seeds, comma-separated (default 4,5,6,7,8; the quick variant 2)")
	setupList := fs.String("setups", "", "study 1's setups, comma-separated, of "+strings.Join(setupNames, ",")+" (default: all but the GPT's; gpt,gpt-probe and gpt-cosine,gpt-cosine-probe write their own doc blocks, summary-GROUP and study1-GROUP, and run apart from the others)")
	python := fs.String("python", ".venv/bin/python", "the Python that runs the PyTorch setups (the project venv, made by `make venv`)")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	o := options{p: defaults(*quick), out: *out, plotDir: *plotDir, runs: *runs, want: map[int]bool{}, args: args}
	o.p.NP, o.p.Bin, o.p.Python = *np, *bin, *python
	for _, f := range strings.Split(*only, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 8 || n == 6 {
			return o, fmt.Errorf("-studies: %q is not a study number 1..5, 7 or 8", f)
		}
		o.want[n] = true
	}
	if *np < 1 {
		return o, fmt.Errorf("-np: want >= 1, got %d", *np)
	}
	var err error
	if o.p.Seeds, err = seedFlag("-seeds", *seeds, o.p.Seeds, nil); err != nil {
		return o, err
	}
	if o.p.HeldOut, err = seedFlag("-heldout", *heldOut, o.p.HeldOut, o.p.Seeds); err != nil {
		return o, err
	}
	if *setupList != "" {
		for _, f := range strings.Split(*setupList, ",") {
			if f = strings.TrimSpace(f); !slices.Contains(setupNames, f) || slices.Contains(o.p.Setups, f) {
				return o, fmt.Errorf("-setups: %q is not one of %s, or is named twice", f, strings.Join(setupNames, ", "))
			}
			o.p.Setups = append(o.p.Setups, f)
		}
	}
	o.p.Group, err = setupGroup(o.p.Setups)
	return o, err
}

// seedFlag parses a comma-separated list of new seeds (none of taken);
// the default when the flag is empty.
func seedFlag(name, v string, def, taken []int) ([]int, error) {
	if v == "" {
		return def, nil
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 || slices.Contains(out, n) || slices.Contains(taken, n) {
			return nil, fmt.Errorf("%s: %q is not a new seed (a whole number >= 0, not a sweep seed)", name, f)
		}
		out = append(out, n)
	}
	return out, nil
}

func run(args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Setenv("OMPI_ALLOW_RUN_AS_ROOT", "1")
	os.Setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) }
	b := &bench{p: o.p, best: -1, rn: &runner{np: o.p.NP, mpirun: mpirunArgs(o.p.NP),
		hdet: filepath.Join(o.p.Bin, "hdet"), root: o.runs, log: logf}}
	b.setups = b.newSetups(o.p.Setups)
	if o.p.Quick {
		fmt.Fprintf(stdout, "make bench-quick: the short variant: study 1 with sweep seed %s, held-out seed %s, %d sweep points per setup and a tiny ConvNet (the full study: sweep seeds 1-3, held-out seeds 4-8, 12 points), studies 3-5 with fewer steps and repetitions\n",
			seedList(o.p.Seeds), seedList(o.p.HeldOut), o.p.SweepN)
	}
	h := docHeader{Quick: o.p.Quick, Settings: o.p, Machine: describeMachine(ctx), LoadBefore: loadAvg(), Args: o.args, OutPath: o.out}
	began := time.Now()
	b.doc, b.plots = o.out, o.plotDir
	tables, errs := b.runStudies(ctx, o.want, stdout, logf)
	h.Total, h.LoadAfter = time.Since(began).Round(time.Second), loadAvg()
	if len(b.study1) > 0 {
		paths, err := b.plot(o.plotDir)
		if err != nil {
			errs = append(errs, err)
		}
		h.Plots = paths
		for _, p := range paths {
			fmt.Fprintf(stdout, "plot: %s\n", p)
		}
		h.Summary = b.summaryText()
		fmt.Fprintf(stdout, "\n%s", h.Summary)
	}
	if err := writeDoc(o.out, h, tables); err != nil {
		errs = append(errs, err)
	} else {
		fmt.Fprintf(stdout, "report: %s (%s in all)\n", o.out, h.Total)
	}
	return errors.Join(errs...)
}

// runStudies runs the wanted studies in dependency order (2 and 5 use
// study 1's runs), printing each table as it is done.
func (b *bench) runStudies(ctx context.Context, want map[int]bool, stdout io.Writer, logf func(string, ...any)) (map[int]*table, []error) {
	studies := []struct {
		n  int
		fn func(context.Context) (*table, error)
	}{
		{1, b.studySweep}, {2, b.studyStability},
		{3, b.studyOverhead}, {4, b.studyAllreduce}, {5, b.studyController},
		{7, b.studyNet}, {8, b.studyGPTOverhead},
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
		if errors.Is(err, errSkipped) { // its doc block stays as it was
			fmt.Fprintf(stdout, "\n== study %d %v\n", s.n, err)
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("study %d: %w", s.n, err))
			t.note("FAILED: %v", firstLine(err))
		}
		t.note("Study time: %s.", time.Since(t0).Round(time.Second))
		tables[s.n] = t
		t.text(stdout)
		if ctx.Err() != nil {
			break
		}
	}
	return tables, errs
}

// plot draws study 1 per setup: the sweep's median test loss per max_lr,
// the reference, and every held-out seed's HDET run of each form at its
// start; a diverged run is drawn at chance (ln 10, the loss of guessing;
// the GPT's 8 bits per byte), so that it shows.
func (b *bench) plot(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var paths []string
	for _, sr := range b.study1 {
		sweep := series{Label: "plain sweep (median over the sweep seeds that ran the point; diverged runs at chance)"}
		for i, k := range sr.ks {
			var ls []float64
			for _, r := range column(sr.sweep, i) {
				if r.Dir != "" {
					ls = append(ls, chanceLoss(r))
				}
			}
			sweep.LR, sweep.Loss = append(sweep.LR, gridLR(k)), append(sweep.Loss, median(ls))
		}
		ref := series{Label: "reference: plain at the best point, every held-out seed"}
		for _, row := range sr.plain {
			ref.LR, ref.Loss = append(ref.LR, sr.bestLR()), append(ref.Loss, chanceLoss(row[1]))
		}
		others := []series{ref}
		for fi, f := range forms {
			s := series{Label: f.Label + ", every seed, at its start"}
			for _, runs := range sr.hdet[fi] {
				for si, r := range runs {
					if r.Failed == "" {
						s.LR, s.Loss = append(s.LR, gridLR(sr.starts[si])), append(s.Loss, chanceLoss(r))
					}
				}
			}
			others = append(others, s)
		}
		path := filepath.Join(dir, "sweep-"+sr.s.Name+".png")
		title := fmt.Sprintf("Final %s vs starting max_lr (%s, %d ranks)", sr.s.lossName(), sr.s.Label, b.p.NP)
		if err := plotSweep(path, title, sweep, others...); err != nil {
			return paths, err
		}
		paths = append(paths, path)
	}
	return paths, nil
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
