package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hdet-dev/hdet/internal/atomicfile"
	"github.com/hdet-dev/hdet/internal/metrics"
	"github.com/hdet-dev/hdet/internal/report"
)

// ErrRun is wrapped by every failed benchmark run.
var ErrRun = errors.New("benchmark run failed")

// runner launches `hdet run` under mpirun, one run at a time, and remembers
// the command lines for the doc.
type runner struct {
	np     int
	mpirun []string // the launcher and its flags, before the program
	hdet   string   // path of the hdet binary
	root   string   // where run directories go
	log    func(format string, a ...any)
}

// mpirunArgs is the launcher prefix every study uses; as root Open MPI also
// needs OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM), set by main.
func mpirunArgs(np int) []string {
	return []string{"mpirun", "-np", fmt.Sprint(np), "--oversubscribe", "--bind-to", "none"}
}

// result is what a study needs from one finished run.
type result struct {
	Dir           string
	Command       string
	TestLoss      float64 // final evaluation; NaN when the model diverged
	Accuracy      float64
	WallSeconds   float64 // the run's own wall time (end record), without process start-up
	Steps         int
	Unhealthy     int // windows in which some rank was left out of the average
	NonFinite     bool
	PlanSeconds   []float64 // per window: rank 0's controller plan + broadcast
	ConvergeSecs  []float64
	FinalBase     float64 // the lr base of the last window, NaN without an lr explorer
	FinalOffset   float64 // the lr offset u after the last window, NaN when no window has one
	Cached        bool    // reused from an earlier hdetbench invocation, not run now
	Checksum      string  // of the final parameters (end record)
	Failed        string  // why the run failed, for a study that goes on without it
	Pace          float64 // seconds per step at the run's calmest: the first quartile over its windows
	ProcessSecond float64 // mpirun's wall time, start-up included
}

// diverged is true when training blew up: a NaN anywhere in the run, or a
// final test loss no better than guessing among 10 classes (ln 10).
func (r result) diverged() bool {
	return r.NonFinite || math.IsNaN(r.TestLoss) || r.TestLoss >= math.Log(10)
}

// rankSeconds is the compute the run held: N ranks for its wall time.
func (r result) rankSeconds(np int) float64 { return float64(np) * r.WallSeconds }

// calmRankSeconds is the compute the run would hold at its calmest pace:
// on a machine shared with other work one run's wall time can be 10x
// another's for the same steps, depending on the load while it ran; the
// first quartile of the per-step time over a run's windows is close to
// what its steps cost at the lowest load it saw.
func (r result) calmRankSeconds(np int) float64 { return float64(np) * r.Pace * float64(r.Steps) }

// run starts `hdet run config --run-dir root/name --set ...` and reads the
// run's metrics. The run directory is wiped first so that a stale metrics
// file can never be read as this run's. With a non-empty fingerprint (what
// the trainer's numbers depend on besides the command and the config, see
// cacheKey) a finished run whose key file matches is reused instead.
func (rn *runner) run(ctx context.Context, name, config, fingerprint string, sets ...string) (result, error) {
	dir := filepath.Join(rn.root, name)
	hdetArgs := []string{"run", config, "--run-dir", dir, "--progress", "none"}
	for _, s := range sets {
		hdetArgs = append(hdetArgs, "--set", s)
	}
	args := append(append(append([]string{}, rn.mpirun...), rn.hdet), hdetArgs...)
	cmdline := strings.Join(args, " ")
	var key string
	if fingerprint != "" {
		var err error
		keyArgs := slices.Concat(hdetArgs[:2], hdetArgs[4:]) // the run directory is where the key lives, not part of it
		if key, err = cacheKey(rn.np, config, fingerprint, keyArgs); err != nil {
			return result{}, fmt.Errorf("%w: %s: %w", ErrRun, name, err)
		}
		if res, ok := reuse(dir, key); ok {
			rn.log("  reused %s", dir)
			res.Command, res.Cached = cmdline, true
			return res, nil
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return result{}, fmt.Errorf("%w: %s: %w", ErrRun, name, err)
	}
	rn.log("  %s", cmdline)
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = &out, &out
	t0 := time.Now()
	err := cmd.Run()
	elapsed := time.Since(t0).Seconds()
	if mkErr := os.MkdirAll(dir, 0o755); mkErr == nil {
		_ = atomicfile.Write(filepath.Join(dir, "hdetbench.log"), out.Bytes())
	}
	diverged := err != nil && strings.Contains(out.String(), allUnhealthy)
	if err != nil && !diverged {
		return result{}, fmt.Errorf("%w: %s: %w\n%s", ErrRun, cmdline, err, tail(out.String(), 2000))
	}
	res, err := readRun(dir, diverged)
	if err != nil {
		return result{}, fmt.Errorf("%w: %s: %w", ErrRun, cmdline, err)
	}
	if key != "" {
		if err := saveKey(dir, key, diverged); err != nil {
			return result{}, fmt.Errorf("%w: %s: %w", ErrRun, name, err)
		}
	}
	res.Command, res.ProcessSecond = cmdline, elapsed
	return res, nil
}

// allUnhealthy is how hdet run fails when training diverged on every rank
// with no checkpoint to roll back to (engine.ErrAllUnhealthy): at a
// learning rate far too high that is a result, not a broken benchmark.
const allUnhealthy = "every rank is unhealthy"

// readResult summarises a finished run directory's metrics.jsonl.
func readResult(dir string) (result, error) { return readRun(dir, false) }

// readRun summarises a run directory's metrics.jsonl; a diverged run, which
// stopped without an end record, has a NaN test loss and the wall time up
// to its last window.
func readRun(dir string, diverged bool) (result, error) {
	r, err := report.Load(dir)
	if err != nil {
		return result{}, err
	}
	if r.End == nil && !diverged {
		return result{}, fmt.Errorf("%s: the run has no end record", dir)
	}
	s := report.Summarize(r)
	res := result{
		Dir: dir, TestLoss: s.FinalTestLoss, Accuracy: s.FinalAccuracy, NonFinite: diverged,
		WallSeconds: r.WallSeconds(), Steps: s.Steps, FinalBase: math.NaN(), FinalOffset: math.NaN(),
	}
	if r.End != nil {
		res.Checksum = r.End.Checksum
	} else {
		res.TestLoss, res.Accuracy = math.NaN(), math.NaN()
	}
	res.Pace = pace(r.Windows)
	for _, w := range r.Windows {
		if !finiteRecord(w) {
			res.NonFinite = true
		}
		for _, h := range w.Healthy {
			if !h {
				res.Unhealthy++
				break
			}
		}
		if w.PlanSeconds > 0 {
			res.PlanSeconds = append(res.PlanSeconds, w.PlanSeconds)
		}
		res.ConvergeSecs = append(res.ConvergeSecs, w.ConvergeSeconds)
		if b, ok := w.Base["lr"]; ok {
			res.FinalBase = float64(b)
		}
		if u, ok := w.Offset["lr"]; ok {
			res.FinalOffset = float64(u)
		}
	}
	return res, nil
}

// pace is the first quartile over windows of the seconds per step a window
// took (training, probe, converge and plan).
func pace(ws []metrics.Record) float64 {
	var per []float64
	prev := 0
	for _, w := range ws {
		if n := w.Step - prev; n > 0 {
			per = append(per, (w.FanoutSeconds+w.ConvergeSeconds+w.PlanSeconds)/float64(n))
		}
		prev = w.Step
	}
	return quantile(per, 0.25)
}

// finiteRecord is false when a window saw a NaN/Inf loss.
func finiteRecord(w metrics.Record) bool {
	for _, l := range w.Losses {
		if math.IsNaN(float64(l)) || math.IsInf(float64(l), 0) {
			return false
		}
	}
	return true
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
