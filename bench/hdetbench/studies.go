package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Configs of the studies, relative to the repository root.
const (
	sweepConfig = "bench/configs/sweep.yaml" // plain DP: lr explorer, alpha 0, auto off
	hdetConfig  = "bench/configs/hdet.yaml"  // HDET on the learning rate only
	plainConfig = "bench/configs/plain.yaml" // plain DP without explorers
	trioConfig  = "examples/mnist.yaml"      // the default: lr, dropout, weight decay
)

// modelFloats is the parameter count of the 784-256-256-10 MLP; the local
// mode's sync buffer adds AdamW's two moments (3x).
const modelFloats = 784*256 + 256 + 256*256 + 256 + 256*10 + 10

// bench holds what the studies share: the settings, the runner and the
// results later studies build on.
type bench struct {
	p      settings
	rn     *runner
	setups []*setup // study 1's

	study1     []*setupRuns
	sweepLRs   []float64 // study 1's first setup's sweep (MLP AdamW), first seed, for studies 2 and 5
	sweep      []result
	best       int      // index into sweep of the best point
	hdetAbs    []result // study 1's first setup's HDET runs (default form, first held-out seed), one per start
	overheadTs map[int][]result
	doc, plots string // -out and -plots, for study 7's plot
}

func (b *bench) epochSets() []string {
	return []string{fmt.Sprintf("train.epochs=%d", b.p.Epochs)}
}

func maxLRSet(lr float64) string {
	return "explorers.lr.config.schedule.max_lr=" + strconv.FormatFloat(lr, 'g', 4, 64)
}

// relGap is how much worse loss is than best, relative to best.
func relGap(loss, best float64) float64 { return (loss - best) / best }

// studyStability is study 2: plain DP at 9x the best learning rate against
// HDET at the same mean learning rate, with and without the auto phase.
func (b *bench) studyStability(ctx context.Context) (*table, error) {
	t := &table{Title: "Study 2: stability at 9x the best learning rate",
		Header: []string{"run", "max_lr", "diverged", "NaN windows", "test loss", "accuracy", "final lr base"}}
	if b.best < 0 || len(b.sweep) == 0 {
		return t, errors.New("study 2 needs study 1's best learning rate of the MLP AdamW setup")
	}
	lr := 9 * b.sweepLRs[b.best]
	runs := []struct {
		label, name, config string
		sets                []string
	}{
		{"plain DP", "s2-plain", sweepConfig, nil},
		{"HDET, auto on", "s2-hdet-auto", hdetConfig, nil},
		{"HDET, auto off (spread only)", "s2-hdet-noauto", hdetConfig, []string{"explorers.lr.config.auto.enabled=false"}},
	}
	for _, c := range runs {
		r, err := b.rn.run(ctx, c.name, c.config, "", append(append(b.epochSets(), maxLRSet(lr)), c.sets...)...)
		if err != nil {
			return t, err
		}
		t.Commands = append(t.Commands, r.Command)
		t.add(c.label, lrText(lr), yesNo(r.diverged()), fmt.Sprint(r.Unhealthy), num(r.TestLoss, 4), num(r.Accuracy, 4), lrText(r.FinalBase))
	}
	t.note("9 x the best sweep max_lr (%s); the HDET spread is symmetric, so the replicas' mean learning rate is the base's.", lrText(b.sweepLRs[b.best]))
	t.note("diverged: the run stopped with every rank diverged, or its final test loss is NaN or >= ln 10 (no better than chance). NaN windows: windows in which some replica was left out of the average, or that went NaN everywhere and rolled back.")
	return t, nil
}

// studyController is study 5: the plan + broadcast per window measured in
// the N = 4 runs, and the controller's compute for simulated large N from
// internal/controller's BenchmarkControllerWindow (in-process built-in explorers).
func (b *bench) studyController(ctx context.Context) (*table, error) {
	t := &table{Title: "Study 5: controller cost per window",
		Header: []string{"N", "measured in", "us/window (median)", "p90", "CPU us/window"}}
	var hdetPlan []float64
	for _, r := range b.hdetAbs {
		hdetPlan = append(hdetPlan, r.planSeconds()...)
	}
	if len(hdetPlan) > 0 {
		t.add(fmt.Sprint(b.p.NP), "study 1 HDET runs: 1 explorer plugin, plan + MPI broadcast, both passes", num(1e6*median(hdetPlan), 0), num(1e6*quantile(hdetPlan, 0.9), 0), "-")
	}
	for _, w := range b.p.Windows {
		var ps []float64
		for _, r := range b.overheadTs[w] {
			ps = append(ps, r.planSeconds()...)
		}
		if len(ps) > 0 {
			t.add(fmt.Sprint(b.p.NP), fmt.Sprintf("study 3 T = %d: 3 explorer plugins, plan + MPI broadcast, both passes", w), num(1e6*median(ps), 0), num(1e6*quantile(ps, 0.9), 0), "-")
		}
	}
	args := []string{"test", "-run", "^$", "-bench", "^BenchmarkControllerWindow$", "-benchtime", b.p.ControllerBenchtime, "-count", fmt.Sprint(b.p.ControllerCount), "./internal/controller/"}
	cmdline := "go " + strings.Join(args, " ")
	b.rn.log("  %s", cmdline)
	t.Commands = append(t.Commands, cmdline)
	out, err := exec.CommandContext(ctx, "go", args...).CombinedOutput()
	if err != nil {
		return t, fmt.Errorf("%w: %s: %w\n%s", ErrRun, cmdline, err, tail(string(out), 2000))
	}
	rows, err := parseControllerBench(string(out))
	if err != nil {
		return t, fmt.Errorf("%s: %w", cmdline, err)
	}
	var at16k float64 = math.NaN()
	for _, r := range summarizeController(rows) {
		t.add(fmt.Sprint(r.N), "simulated, in process: 3 built-in explorers, Plan + encode + Observe",
			fmt.Sprintf("%s (%s..%s)", num(r.Median/1e3, 0), num(r.Min/1e3, 0), num(r.Max/1e3, 0)), "-", num(r.CPU/1e3, 0))
		if r.N == 16384 {
			at16k = r.Median
		}
	}
	t.note("N = %d rows: plan_seconds of every window in metrics.jsonl (rank 0's controller, gRPC calls to the explorer plugins, and the plan broadcast). Simulated rows: `%s` (internal/controller/bench_test.go), wall time per window, median (min..max) over the %d repetitions, and the median CPU time.", b.p.NP, cmdline, b.p.ControllerCount)
	if !math.IsNaN(at16k) {
		t.note("%s: %s ms per window at N = 16384 (target: under 1 ms).", verdict(at16k < 1e6), num(at16k/1e6, 3))
	}
	return t, nil
}

type controllerRow struct {
	N                   int
	NsPerOp, CPUNsPerOp float64
}

// controllerSummary is one N's repetitions: wall ns per window (median,
// min, max) and the median CPU ns.
type controllerSummary struct {
	N                     int
	Median, Min, Max, CPU float64
}

// summarizeController groups the repetitions of each N, in the order the
// Ns first appear.
func summarizeController(rows []controllerRow) []controllerSummary {
	var order []int
	wall, cpu := map[int][]float64{}, map[int][]float64{}
	for _, r := range rows {
		if _, ok := wall[r.N]; !ok {
			order = append(order, r.N)
		}
		wall[r.N], cpu[r.N] = append(wall[r.N], r.NsPerOp), append(cpu[r.N], r.CPUNsPerOp)
	}
	out := make([]controllerSummary, len(order))
	for i, n := range order {
		out[i] = controllerSummary{N: n, Median: median(wall[n]), Min: slices.Min(wall[n]), Max: slices.Max(wall[n]), CPU: median(cpu[n])}
	}
	return out
}

var benchLine = regexp.MustCompile(`^BenchmarkControllerWindow/N=(\d+)(?:-\d+)?\s+\d+\s+([0-9.e+]+) ns/op(?:.*?\s([0-9.e+]+) cpu-ns/op)?`)

// parseControllerBench reads `go test -bench` lines of BenchmarkControllerWindow.
func parseControllerBench(out string) ([]controllerRow, error) {
	var rows []controllerRow
	for _, line := range strings.Split(out, "\n") {
		m := benchLine.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		ns, _ := strconv.ParseFloat(m[2], 64)
		cpu := math.NaN()
		if m[3] != "" {
			cpu, _ = strconv.ParseFloat(m[3], 64)
		}
		rows = append(rows, controllerRow{N: n, NsPerOp: ns, CPUNsPerOp: cpu})
	}
	if len(rows) == 0 {
		return nil, errors.New("no BenchmarkControllerWindow lines in the output")
	}
	return rows, nil
}
