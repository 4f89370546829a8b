package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// workload is how a setup of study 1 launches its runs: plain training and
// HDET at a max_lr and a seed, and how each is read (test loss, commit
// record, timings). builtinMLP (hdet's built-in MNIST MLP) and torchScript
// (a PyTorch script: plain under torchrun's environment, HDET under `hdet
// run --worker`) implement it; the PyTorch GPT setups are torchScripts
// with their own scripts, arguments and reader, run by the same protocol.
type workload interface {
	// prepare makes what the cache keys carry besides the commands and
	// files; prog is the program's hash (programFingerprint).
	prepare(ctx context.Context, b *bench, s *setup, prog string) error
	// plain and hdet are one run at max_lr lr with the given seed (the
	// caller names it); f's Sets go on top of HDET's defaults.
	plain(seed int, lr float64) launch
	hdet(f form, seed int, lr float64) launch
	// about is one sentence for the notes: the model, data and run length.
	about() string
}

// setup is one workload of study 1 with its sweep's grid.
type setup struct {
	Name, Label string
	GridFrom    int // the full sweep's first point is gridLR(GridFrom)
	QuickFrom   int // the quick variant's shorter sweep's
	w           workload
	// Group names the doc blocks the setup's study 1 goes to ("": summary
	// and study1; "gpt": summary-gpt and study1-gpt); one invocation runs
	// one group's setups.
	Group string
	// PlainOf is the setup whose plain runs (the same commands) this one
	// shares, "" for its own.
	PlainOf string
	// DefaultOnly runs the default HDET form alone (the targets are about
	// it; the other forms would double the setup's runs).
	DefaultOnly bool
	Loss        string // what the loss is, for the plot: "" is test loss
}

// plainName is the setup whose run directories hold this one's plain runs.
func (s *setup) plainName() string {
	if s.PlainOf != "" {
		return s.PlainOf
	}
	return s.Name
}

// lossName is what the setup's loss is.
func (s *setup) lossName() string {
	if s.Loss != "" {
		return s.Loss
	}
	return "test loss"
}

func (s *setup) from(quick bool) int {
	if quick {
		return s.QuickFrom
	}
	return s.GridFrom
}

// convNetArgs are the ConvNet scripts' arguments before --max-lr and
// --seed: the full study's 3 epochs of the 60000 training images (702 steps
// per rank on 4 ranks), the quick variant's tiny run (12800 images, 4
// epochs: 200 steps, 2000 test images).
func convNetArgs(quick bool) []string {
	if quick {
		return []string{"--train-samples", "12800", "--test-samples", "2000", "--epochs", "4"}
	}
	return []string{"--epochs", "3"}
}

// gptArgs are the GPT scripts' arguments before --max-lr and --seed: the
// full study's 300 steps of a 2-layer, width-64 model (about a minute per
// run with 4 ranks on 2 busy cores; a worker's window is 50 steps, and the
// search pass ends at 150, the window after the warm-up's), the quick
// variant's 150 steps of a 1-layer, width-32 one (the search pass to 100:
// fewer steps would leave HDET no room to commit).
func gptArgs(quick bool) []string {
	if quick {
		return []string{"--steps", "150", "--layers", "1", "--width", "32", "--threads", "1"}
	}
	return []string{"--steps", "300", "--layers", "2", "--width", "64", "--threads", "1"}
}

// gptSchedules says in words what each of gpt.py's --schedule values is.
var gptSchedules = map[string]string{
	"onecycle": "torch's OneCycleLR pct_start 0.3",
	"cosine":   "10% linear warm-up then cosine decay to 10%, set by hand in the loop as nanoGPT does",
}

// newGPT is the GPT script pair with hdetScript on the HDET side, trained
// under gpt.py's --schedule schedule (onecycle, the script's default, is
// not written, so the commands stay those of the runs made before).
func (b *bench) newGPT(hdetScript, signal, schedule string) *torchScript {
	args := gptArgs(b.p.Quick)
	if schedule != "onecycle" {
		args = append(args, "--schedule", schedule)
	}
	return &torchScript{rn: b.rn, python: b.p.Python, plainScript: "examples/pytorch/gpt.py", hdetScript: hdetScript, args: args,
		outcome: gptOutcome, model: fmt.Sprintf("the byte-level PyTorch DDP GPT on the Python standard library's sources (examples/pytorch/gpt.py: AdamW betas 0.9/0.95, weight decay 0.1, grad clip 1, %s, batch 16 windows of 64 bytes per rank, gloo; `%s`), loss = validation bits per byte; HDET: %s, %s", gptSchedules[schedule], strings.Join(args, " "), hdetScript, signal)}
}

// newSetups are study 1's setups, those named in only (when empty: the
// ungrouped ones): the MLP with AdamW, with SGD and momentum 0.9 (far more
// sensitive to the learning rate), the PyTorch DDP ConvNet, and the GPT
// whose HDET runs compare the replicas by training loss (gpt) or by a
// probe on fixed validation windows (gpt-probe, sharing gpt's sweep).
func (b *bench) newSetups(only []string) []*setup {
	mlp := func(sets ...string) *builtinMLP { return &builtinMLP{rn: b.rn, epochs: b.p.Epochs, sets: sets} }
	args := convNetArgs(b.p.Quick)
	all := []*setup{
		{Name: "adamw", Label: "MLP AdamW", GridFrom: -14, QuickFrom: -10, w: mlp("workload.optimizer=adamw")},
		{Name: "sgd", Label: "MLP SGD m=0.9", GridFrom: -10, QuickFrom: -6, w: mlp("workload.optimizer=sgd", "workload.momentum=0.9")},
		{Name: "convnet", Label: "ConvNet DDP", GridFrom: -13, QuickFrom: -9, w: &torchScript{rn: b.rn, python: b.p.Python,
			plainScript: "examples/pytorch/convnet_ddp.py", hdetScript: "examples/pytorch/convnet_ddp_hdet.py", args: args, outcome: scriptOutcome,
			model: fmt.Sprintf("the PyTorch DDP ConvNet (2 conv + 2 linear layers, AdamW, torch's OneCycleLR pct_start 0.3, batch 64 per rank, gloo; `%s`)", strings.Join(args, " "))}},
		{Name: "gpt", Label: "GPT DDP", GridFrom: gptGridFrom, QuickFrom: gptQuickFrom, Group: "gpt", DefaultOnly: true, Loss: "validation bits per byte",
			w: b.newGPT("examples/pytorch/gpt_hdet.py", gptNoProbe, "onecycle")},
		{Name: "gpt-probe", Label: "GPT DDP probe", GridFrom: gptGridFrom, QuickFrom: gptQuickFrom, Group: "gpt", PlainOf: "gpt", DefaultOnly: true, Loss: "validation bits per byte",
			w: b.newGPT("examples/pytorch/gpt_hdet_probe.py", gptProbe, "onecycle")},
		{Name: "gpt-cosine", Label: "GPT cosine", GridFrom: gptGridFrom, QuickFrom: gptQuickFrom, Group: "gpt-cosine", DefaultOnly: true, Loss: "validation bits per byte",
			w: b.newGPT("examples/pytorch/gpt_hdet.py", gptNoProbe, "cosine")},
		{Name: "gpt-cosine-probe", Label: "GPT cosine probe", GridFrom: gptGridFrom, QuickFrom: gptQuickFrom, Group: "gpt-cosine", PlainOf: "gpt-cosine", DefaultOnly: true, Loss: "validation bits per byte",
			w: b.newGPT("examples/pytorch/gpt_hdet_probe.py", gptProbe, "cosine")},
	}
	if len(only) == 0 {
		return slices.DeleteFunc(all, func(s *setup) bool { return s.Group != "" })
	}
	return slices.DeleteFunc(all, func(s *setup) bool { return !slices.Contains(only, s.Name) })
}

// What the GPT's HDET runs compare the replicas by, without and with the
// probe line.
const (
	gptNoProbe = "no probe, so hdet compares the replicas by their training loss"
	gptProbe   = "the same plus one line, hdet.probe on 64 fixed validation windows none of the reported ones"
)

// gptGridFrom is the GPT sweep's first point: 12 points from 1e-4 to 0.46
// bracket its best max_lr (0.022 in the full study) and the rates where it
// stops learning. The quick variant's smaller model wants more: its 7
// points run from 0.0046 to 0.46 (at 1e-3..0.1 the loss still fell at 0.1).
const (
	gptGridFrom  = -12
	gptQuickFrom = -7
)

// setupNames are the names -setups accepts.
var setupNames = []string{"adamw", "sgd", "convnet", "gpt", "gpt-probe", "gpt-cosine", "gpt-cosine-probe"}

// setupGroup is the doc group of the named setups, an error when they mix
// groups.
func setupGroup(names []string) (string, error) {
	groups := map[string]bool{}
	for _, s := range (&bench{rn: &runner{}}).newSetups(names) {
		groups[s.Group] = true
	}
	if len(groups) > 1 {
		return "", fmt.Errorf("-setups: the GPT setups have their own doc blocks, one pair per schedule (gpt,gpt-probe and gpt-cosine,gpt-cosine-probe); run each pair apart from the others and from %s", strings.Join(setupNames[:3], ", "))
	}
	for g := range groups {
		return g, nil
	}
	return "", nil
}

// builtinMLP is the built-in MNIST MLP: plain = bench/configs/sweep.yaml,
// HDET = bench/configs/hdet.yaml, both with the setup's --set values; the
// test loss and the commit record come from metrics.jsonl.
type builtinMLP struct {
	rn      *runner
	epochs  int
	sets    []string
	plainFP string
	formFP  map[string]string // per form; a form whose canary failed is made afresh
}

func (m *builtinMLP) runSets(seed int, lr float64) []string {
	return slices.Concat([]string{fmt.Sprintf("train.epochs=%d", m.epochs), fmt.Sprintf("train.seed=%d", seed)}, m.sets, []string{maxLRSet(lr)})
}

func (m *builtinMLP) plain(seed int, lr float64) launch {
	return m.rn.builtinLaunch("", sweepConfig, m.plainFP, m.runSets(seed, lr)...)
}

func (m *builtinMLP) hdet(f form, seed int, lr float64) launch {
	return m.rn.builtinLaunch("", hdetConfig, m.formFP[f.Name], append(m.runSets(seed, lr), f.Sets...)...)
}

// prepare runs the canaries: the plain one, and per HDET form one whose
// fingerprint also carries prog.
func (m *builtinMLP) prepare(ctx context.Context, b *bench, s *setup, prog string) error {
	lr := maxLRSet(gridLR(s.GridFrom + 6))
	var err error
	if m.plainFP, err = b.canaryFingerprint(ctx, s.Name+"-plain", sweepConfig, 60, append(slices.Clone(m.sets), lr)...); err != nil {
		return err
	}
	m.formFP = map[string]string{}
	for _, f := range forms {
		fp, err := b.canaryFingerprint(ctx, s.Name+"-"+f.Name, hdetConfig, 200, slices.Concat(m.sets, []string{lr}, f.Sets)...)
		if err != nil {
			b.rn.log("  %v: the %s runs are made afresh", firstLine(err), f.Label)
			continue
		}
		m.formFP[f.Name] = fp + "\n" + prog
	}
	return nil
}

func (m *builtinMLP) about() string {
	return fmt.Sprintf("hdet's built-in 784-256-256-10 MLP on MNIST, batch 64 per rank, %d epochs, `%s` (plain: bench/configs/sweep.yaml, the lr explorer with spread alpha 0 and the auto phase off, OneCycle pct_start 0.25; HDET: bench/configs/hdet.yaml)",
		m.epochs, strings.Join(m.sets, " "))
}

// torchScript is a PyTorch script pair: plain is plainScript on N
// processes started with torchrun's environment (Debian's torch 1.13
// torchrun fails under Python 3.11, so hdetbench sets the variables itself,
// as tests/pytorch_test.go does); HDET is hdetScript under `mpirun hdet run
// --worker` with no config file (a form that changes a setting adds
// bench/configs/worker-lr.yaml, the lr entry alone, for its --set to reach).
// Both get args, then --max-lr and --seed; the loss is read from the
// script's closing lines by outcome, the commit record from hdet's
// metrics.jsonl.
type torchScript struct {
	rn                      *runner
	python                  string
	plainScript, hdetScript string
	args                    []string
	outcome                 func(string) (scriptEnd, error) // reads the closing lines
	model                   string
	prog                    string
}

// workerConfig is the config of a worker run whose form sets something.
const workerConfig = "bench/configs/worker-lr.yaml"

func (t *torchScript) script(path string, seed int, lr float64) []string {
	return slices.Concat([]string{t.python, path}, t.args, []string{"--max-lr", strconv.FormatFloat(lr, 'g', 4, 64), "--seed", strconv.Itoa(seed)})
}

func (t *torchScript) plain(seed int, lr float64) launch {
	cmd := t.script(t.plainScript, seed, lr)
	return launch{Procs: t.rn.np, Cmd: func(string) []string { return cmd }, Key: cmd, Files: []string{t.plainScript},
		Fingerprint: "plain script", Read: plainScriptReader(t.outcome)}
}

func (t *torchScript) hdet(f form, seed int, lr float64) launch {
	var config, sets []string
	files := []string{t.hdetScript}
	if len(f.Sets) > 0 {
		config, files = []string{workerConfig}, append(files, workerConfig)
	}
	for _, s := range f.Sets {
		sets = append(sets, "--set", s)
	}
	script := t.script(t.hdetScript, seed, lr)
	return launch{
		Cmd: func(dir string) []string {
			return slices.Concat(t.rn.mpirun, []string{t.rn.hdet, "run"}, config,
				[]string{"--run-dir", dir, "--progress", "none"}, sets, []string{"--worker", "--"}, script)
		},
		Key:   slices.Concat([]string{"run"}, config, []string{"--progress", "none"}, sets, []string{"--worker", "--"}, script),
		Files: files, Fingerprint: t.prog, Read: workerRunReader(t.outcome, lr),
	}
}

func (t *torchScript) prepare(_ context.Context, _ *bench, _ *setup, prog string) error {
	t.prog = prog
	return nil
}

func (t *torchScript) about() string { return t.model }

// runName is where a run of study 1 goes: s1/SETUP/seedS/KIND-LR, a plain
// run under the setup it shares its plain runs with (plainName).
func runName(s *setup, seed int, kind string, lr float64) string {
	name := s.Name
	if kind == "plain" {
		name = s.plainName()
	}
	return filepath.Join("s1", name, fmt.Sprintf("seed%d", seed), kind+"-"+lrText(lr))
}
