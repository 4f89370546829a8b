package main

import (
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"

	"github.com/hdet-dev/hdet/internal/metrics"
)

// result is what a study needs from one finished run.
type result struct {
	Dir      string
	Command  string
	TestLoss float64 // final evaluation; NaN when the model diverged
	Accuracy float64
	// WallSeconds is the run's own wall time (end record: both passes and
	// the restart between them), without process start-up; NaN for a run
	// without metrics (a plain script).
	WallSeconds float64
	// TrainSeconds is the run's training time: for hdet runs the sum, over
	// every window record of both passes (a window redone after a rollback
	// counts twice: it was trained twice), of fanout + converge + plan, the
	// restart between the passes left out (passTimes.Restart); for a plain
	// script its training loop as the script printed it.
	TrainSeconds float64
	// ProcessSeconds is the launch's wall time, start-up included; NaN for
	// a run reused from before hdetbench recorded it.
	ProcessSeconds float64
	Steps          int         // the schedule's steps: the main pass's, or the one pass's
	Passes         []passTimes // [0] the search pass (or the only pass), [1] the main pass of a run that committed
	Committed      float64     // the committed max_lr (the commit record's lr value); NaN when the run did not commit
	// Multiplier marks Committed as a worker script's multiplier of its
	// own rate (protocol 3: the record has script_peak_lr), not a max_lr.
	Multiplier  bool
	CommitStep  int     // where the search pass ended
	Unhealthy   int     // windows in which some rank was left out of the average (a rolled-back window counts too)
	Stopped     bool    // the run stopped because every rank diverged (hdet's allUnhealthy)
	FinalBase   float64 // the lr base of the last window, NaN without an lr explorer
	FinalOffset float64 // the lr offset u after the last window, NaN when no window has one
	Cached      bool    // reused from an earlier hdetbench invocation, not run now
	Checksum    string  // of the final parameters (end record)
	Failed      string  // why the run failed, for a study that goes on without it
	// Chance is the loss of guessing uniformly (0: ln 10, among the MNIST
	// models' 10 classes; the GPT: 8 bits, among 256 bytes).
	Chance float64
	// LoopSeconds is a PyTorch script's training loop as it printed it
	// (NaN for the built-in workload): for a worker run, its last start's.
	LoopSeconds float64
}

// passTimes are one pass's window timings, in seconds per window record.
type passTimes struct {
	Steps                         int // the steps the pass trained (its last window's end)
	Fanout, Probe, Converge, Plan []float64
	Probed                        int     // windows that probed
	FirstTime, LastTime           float64 // unix seconds: the pass's start (see addWindow) and its last window's record
	// Restart is the main pass's first plan_seconds, which holds the
	// restart (the step-0 state restored; a worker's script started again)
	// besides the plan: kept out of Plan and of the training time, it is a
	// start-up cost, like a plain script's start-up outside its loop.
	Restart float64
}

// seconds is the pass's time in its windows: training (with the probe),
// converge and plan.
func (p passTimes) seconds() float64 {
	s := 0.0
	for i := range p.Fanout {
		s += p.Fanout[i] + p.Converge[i] + p.Plan[i]
	}
	return s
}

// perStep is seconds() per step, NaN for an empty pass.
func (p passTimes) perStep() float64 {
	if p.Steps == 0 {
		return math.NaN()
	}
	return p.seconds() / float64(p.Steps)
}

// wallPerStep is the pass's wall clock per step, from the records' times.
func (p passTimes) wallPerStep() float64 {
	if p.Steps == 0 || p.FirstTime == 0 {
		return math.NaN()
	}
	return (p.LastTime - p.FirstTime) / float64(p.Steps)
}

// chance is the loss of guessing uniformly: Chance, or ln 10 (among 10
// classes) when the run does not say.
func (r result) chance() float64 {
	if r.Chance > 0 {
		return r.Chance
	}
	return math.Log(10)
}

// diverged is true when training ended blown up: the run stopped with every
// rank diverged, or its final test loss is NaN or no better than chance
// less the rounding of a script's printed loss (4 decimals: 2.3025 is
// chance). A window that went NaN and was rolled back, or a rank left out
// of one window's average, is hdet's safety net at work, not the run's
// outcome: Unhealthy counts those.
func (r result) diverged() bool {
	return r.Stopped || math.IsNaN(r.TestLoss) || r.TestLoss >= r.chance()-1e-3
}

// rankSeconds is the compute the run held in training: N ranks for its
// training time.
func (r result) rankSeconds(np int) float64 { return float64(np) * r.TrainSeconds }

// processRankSeconds is N ranks for the launch's wall time.
func (r result) processRankSeconds(np int) float64 { return float64(np) * r.ProcessSeconds }

// planSeconds is every window's plan + broadcast, both passes.
func (r result) planSeconds() []float64 {
	var out []float64
	for _, p := range r.Passes {
		for _, s := range p.Plan {
			if s > 0 {
				out = append(out, s)
			}
		}
	}
	return out
}

// pass is the i-th pass's timings, empty when the run has none.
func (r result) pass(i int) passTimes {
	if i < len(r.Passes) {
		return r.Passes[i]
	}
	return passTimes{}
}

// readResult summarises a finished run directory's metrics.jsonl.
func readResult(dir string) (result, error) { return readRun(dir, false) }

// readRun summarises a run directory's metrics.jsonl, pass by pass; a
// diverged run, which stopped without an end record, has a NaN test loss
// and the wall time up to its last window.
func readRun(dir string, diverged bool) (result, error) {
	recs, _, err := metrics.ReadFile(filepath.Join(dir, "metrics.jsonl"))
	if err != nil {
		return result{}, err
	}
	res := result{Dir: dir, TestLoss: nan, Accuracy: nan, Stopped: diverged, FinalBase: nan, FinalOffset: nan,
		Committed: nan, ProcessSeconds: nan, LoopSeconds: nan}
	var first, last float64
	var end *metrics.EndRecord
	for i, rec := range recs {
		if i == 0 {
			first = rec.UnixTime()
		}
		last = max(last, rec.UnixTime())
		switch rec := rec.(type) {
		case metrics.WindowRecord:
			res.addWindow(rec, recs[i-1].UnixTime())
		case metrics.CommitRecord:
			res.CommitStep = rec.Step
			if c, ok := rec.Committed["lr"]; ok {
				res.Committed, res.Multiplier = float64(c.Value), c.ScriptPeakLR > 0
			}
		case metrics.EndRecord:
			end = &rec
		}
	}
	if end == nil && !diverged {
		return result{}, fmt.Errorf("%s: the run has no end record", dir)
	}
	res.WallSeconds = last - first
	if end != nil {
		res.Checksum, res.Steps = end.Checksum, end.Step
		if end.WallSeconds > 0 {
			res.WallSeconds = end.WallSeconds
		}
		if end.Eval != nil {
			res.TestLoss, res.Accuracy = float64(end.Eval.Loss), float64(end.Eval.Accuracy)
		}
	} else if n := len(res.Passes); n > 0 {
		res.Steps = res.Passes[n-1].Steps
	}
	for _, p := range res.Passes {
		res.TrainSeconds += p.seconds()
	}
	return res, nil
}

// addWindow takes one window record into its pass; before is the time of
// the record before it.
func (r *result) addWindow(w metrics.WindowRecord, before float64) {
	for len(r.Passes) <= w.Pass {
		r.Passes = append(r.Passes, passTimes{})
	}
	p := &r.Passes[w.Pass]
	plan := w.PlanSeconds
	if len(p.Fanout) == 0 {
		p.FirstTime = before
		if w.Pass > 0 { // the restart: the pass starts after it
			p.Restart, plan = plan, 0
			p.FirstTime += p.Restart
		}
	}
	p.Steps, p.LastTime = max(p.Steps, w.Step), w.Time
	p.Fanout, p.Probe = append(p.Fanout, w.FanoutSeconds), append(p.Probe, w.ProbeSeconds)
	p.Converge, p.Plan = append(p.Converge, w.ConvergeSeconds), append(p.Plan, plan)
	if len(w.Probe) > 0 {
		p.Probed++
	}
	if slices.Contains(w.Healthy, false) {
		r.Unhealthy++
	}
	if b, ok := w.Base["lr"]; ok {
		r.FinalBase = float64(b)
	}
	if u, ok := w.Offset["lr"]; ok {
		r.FinalOffset = float64(u)
	}
}

// scriptEnd is what a script's closing lines say.
type scriptEnd struct {
	Steps           int
	Loop, Loss, Acc float64 // the training loop's seconds, the final loss and accuracy (NaN: none)
	Chance          float64 // the loss of guessing uniformly; 0: ln 10
}

// scriptLine is the last line the MNIST example scripts print on rank 0:
// "N steps in S s, test loss L, test accuracy A" (a worker's lines under
// hdet carry a "[rank 0] " prefix).
var scriptLine = regexp.MustCompile(`(\d+) steps in ([0-9.]+) s, test loss (\S+), test accuracy (\S+)`)

// scriptOutcome reads the last such line of out ("nan" parses as NaN).
func scriptOutcome(out string) (scriptEnd, error) {
	m := lastMatch(scriptLine, out)
	if m == nil {
		return scriptEnd{}, fmt.Errorf("no \"N steps in S s, test loss L, test accuracy A\" line in the output:\n%s", tail(out, 1000))
	}
	e := scriptEnd{}
	e.Steps, _ = strconv.Atoi(m[1])
	e.Loop, _ = strconv.ParseFloat(m[2], 64)
	var err1, err2 error
	e.Loss, err1 = strconv.ParseFloat(m[3], 64)
	e.Acc, err2 = strconv.ParseFloat(m[4], 64)
	if err1 != nil || err2 != nil {
		return scriptEnd{}, fmt.Errorf("unreadable test loss or accuracy in %q", m[0])
	}
	return e, nil
}

// The GPT's closing lines (examples/pytorch/gpt.py, rank 0): a JSON line
// with "steps" and "seconds" (the training loop), then "final val_bpb X".
var (
	gptLoop  = regexp.MustCompile(`"steps": (\d+), "seconds": ([0-9.]+)`)
	gptFinal = regexp.MustCompile(`final val_bpb (\S+)`)
)

// gptChance is the GPT's chance: log2 256, the bits per byte of guessing
// among the 256 bytes uniformly (as ln 10 is guessing among 10 classes;
// the script's unigram model, 4.47 bits, already learned something).
const gptChance = 8.0

// lastMatch is the last submatch of re in out, nil when none.
func lastMatch(re *regexp.Regexp, out string) []string {
	all := re.FindAllStringSubmatch(out, -1)
	if len(all) == 0 {
		return nil
	}
	return all[len(all)-1]
}

// gptOutcome reads the GPT's last start: the validation bits per byte as
// the loss (relative gaps are the same as in nats), no accuracy, and
// gptChance, which it returns with the error when the closing lines are
// missing (a run that blew up).
func gptOutcome(out string) (scriptEnd, error) {
	l, f := lastMatch(gptLoop, out), lastMatch(gptFinal, out)
	e := scriptEnd{Acc: nan, Chance: gptChance}
	if l == nil || f == nil {
		return e, fmt.Errorf("no \"steps\"/\"seconds\" or \"final val_bpb\" line in the output:\n%s", tail(out, 1000))
	}
	e.Steps, _ = strconv.Atoi(l[1])
	e.Loop, _ = strconv.ParseFloat(l[2], 64)
	var err error
	if e.Loss, err = strconv.ParseFloat(f[1], 64); err != nil {
		return scriptEnd{}, fmt.Errorf("unreadable val_bpb in %q", f[0])
	}
	return e, nil
}

// plainScriptReader reads a plain script run from its output with outcome.
func plainScriptReader(outcome func(string) (scriptEnd, error)) func(dir, out string, _ bool) (result, error) {
	return func(dir, out string, _ bool) (result, error) {
		e, err := outcome(out)
		if err != nil {
			return result{}, err
		}
		return result{Dir: dir, TestLoss: e.Loss, Accuracy: e.Acc, Chance: e.Chance, Steps: e.Steps, TrainSeconds: e.Loop,
			LoopSeconds: e.Loop, WallSeconds: nan, ProcessSeconds: nan, Committed: nan, FinalBase: nan, FinalOffset: nan}, nil
	}
}

// workerRunReader reads an hdet --worker run: the metrics from its
// directory, the loss from the script's closing lines (hdet's end record
// has none for a worker); a diverged run has neither.
func workerRunReader(outcome func(string) (scriptEnd, error), maxLR float64) func(dir, out string, diverged bool) (result, error) {
	return func(dir, out string, diverged bool) (result, error) {
		res, err := readRun(dir, diverged)
		if res.Multiplier { // the script's max_lr times the committed multiplier
			res.Committed, res.Multiplier = maxLR*res.Committed, false
		}
		if err != nil || diverged {
			e, _ := outcome(out)
			res.Chance = e.Chance
			return res, err
		}
		e, err := outcome(out)
		if err != nil {
			return result{}, err
		}
		res.TestLoss, res.Accuracy, res.Chance, res.LoopSeconds = e.Loss, e.Acc, e.Chance, e.Loop
		return res, nil
	}
}
