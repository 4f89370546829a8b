package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/internal/controller"
	"github.com/hdet-dev/hdet/internal/plan"
	"github.com/hdet-dev/hdet/internal/stats"
	"github.com/hdet-dev/hdet/mpi"
)

// planParams are the hyperparameters of the benchmark's plan: those with a
// built-in explorer (lr, dropout, weight_decay).
var planParams = hparam.Explored()

func runBenchPlan(s Streams, args []string) error {
	fs := newFlagSet(s, "bench plan")
	iters := fs.Int("iters", 50, "timed windows; the median is reported")
	steps := fs.Int("steps", 100, "steps per window (each parameter's plan holds one base value per step)")
	ranks := fs.String("plan-ranks", "", "also time plans made for these rank counts, comma-separated (e.g. 1024,16384): a plan's size grows with N")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: mpirun -np N hdet bench plan [flags]

Measures the window's plan broadcast: rank 0 encodes a plan of three
hyperparameters (a base value per step, a slot per rank), every rank receives
and decodes it. The time is the slowest rank's, the median over windows.`)
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return Usagef("bench plan takes no arguments, got %q", fs.Args())
	}
	if *iters < 1 || *steps < 1 {
		return Usagef("--iters and --steps must be at least 1, got %d and %d", *iters, *steps)
	}
	extra, err := parseCounts(*ranks)
	if err != nil {
		return Usagef("--plan-ranks: %v", err)
	}
	if err := mpi.Init(); err != nil {
		return err
	}
	w := mpi.World()
	err = benchPlans(s, w, append([]int{w.Size()}, extra...), *iters, *steps)
	if err != nil && w.Size() > 1 {
		fmt.Fprintf(s.Err, "hdet bench plan: rank %d: %v\n", w.Rank(), err)
		mpi.Abort(ExitFailure)
	}
	if ferr := mpi.Finalize(); err == nil {
		err = ferr
	}
	return err
}

// parseCounts parses "1024,16384"; empty gives none.
func parseCounts(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	var counts []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 1<<24 {
			return nil, fmt.Errorf("%q: want a rank count from 1 to %d", f, 1<<24)
		}
		counts = append(counts, n)
	}
	return counts, nil
}

func benchPlans(s Streams, w *mpi.Comm, counts []int, iters, steps int) error {
	host, err := mpi.ProcessorName()
	if err != nil {
		return err
	}
	names := []float64{float64(w.LocalRank())}
	if err := w.AllreduceFloat64(names, mpi.Max); err != nil {
		return err
	}
	if w.Rank() == 0 {
		fmt.Fprintf(s.Out, "# hdet bench plan: %d ranks (rank 0 on %s, up to %.0f ranks per host), median of %d windows, slowest rank\n",
			w.Size(), host, names[0]+1, iters)
		fmt.Fprintln(s.Out, "plan_ranks\tbytes\tmedian_us")
	}
	for _, n := range counts {
		size, med, err := benchPlan(w, n, iters, steps)
		if err != nil {
			return err
		}
		if w.Rank() == 0 {
			fmt.Fprintf(s.Out, "%d\t%d\t%.0f\n", n, size, med*1e6)
		}
	}
	return nil
}

// benchPlan times iters broadcasts of a plan for n ranks.
func benchPlan(w *mpi.Comm, n, iters, steps int) (int, float64, error) {
	pl := plan.Plan{Window: 1, Start: steps, Steps: steps}
	perm := controller.NewPermuter(1)
	for _, name := range planParams {
		p := plan.ParamPlan{Name: name, Base: make([]float64, steps), Spread: hparam.Spread{Kind: hparam.Multiplicative, Alpha: 0.5}, Slots: make([]uint32, n)}
		for i := range p.Base {
			p.Base[i] = 1e-3 * float64(i+1)
		}
		perm.Perm(p.Slots)
		pl.Params = append(pl.Params, p)
	}
	times := make([]float64, 0, iters)
	size := 0
	for it := range iters + 2 { // two warm-up windows
		if err := w.Barrier(); err != nil {
			return 0, 0, err
		}
		start := time.Now()
		var msg []byte
		var err error
		if w.Rank() == 0 {
			if msg, err = pl.MarshalBinary(); err != nil {
				return 0, 0, err
			}
		}
		if msg, err = w.BcastMessage(msg, 0); err != nil {
			return 0, 0, err
		}
		var got plan.Plan
		if err := got.UnmarshalBinary(msg); err != nil {
			return 0, 0, err
		}
		t := []float64{time.Since(start).Seconds()}
		if err := w.AllreduceFloat64(t, mpi.Max); err != nil {
			return 0, 0, err
		}
		if it >= 2 {
			times = append(times, t[0])
		}
		size = len(msg)
	}
	return size, stats.Median(times), nil
}
