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
// run --worker`) implement it; a PyTorch GPT setup is one more torchScript
// with its own scripts and arguments, run by the same protocol.
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

// newSetups are study 1's setups, those named in only (all when empty):
// the MLP with AdamW, with SGD and momentum 0.9 (far more sensitive to the
// learning rate), and the PyTorch DDP ConvNet.
func (b *bench) newSetups(only []string) []*setup {
	mlp := func(sets ...string) *builtinMLP { return &builtinMLP{rn: b.rn, epochs: b.p.Epochs, sets: sets} }
	args := convNetArgs(b.p.Quick)
	all := []*setup{
		{Name: "adamw", Label: "MLP AdamW", GridFrom: -14, QuickFrom: -10, w: mlp("workload.optimizer=adamw")},
		{Name: "sgd", Label: "MLP SGD m=0.9", GridFrom: -10, QuickFrom: -6, w: mlp("workload.optimizer=sgd", "workload.momentum=0.9")},
		{Name: "convnet", Label: "ConvNet DDP", GridFrom: -13, QuickFrom: -9, w: &torchScript{rn: b.rn, python: b.p.Python,
			plainScript: "examples/pytorch/convnet_ddp.py", hdetScript: "examples/pytorch/convnet_ddp_hdet.py", args: args,
			model: fmt.Sprintf("the PyTorch DDP ConvNet (2 conv + 2 linear layers, AdamW, torch's OneCycleLR pct_start 0.3, batch 64 per rank, gloo; `%s`)", strings.Join(args, " "))}},
	}
	if len(only) == 0 {
		return all
	}
	return slices.DeleteFunc(all, func(s *setup) bool { return !slices.Contains(only, s.Name) })
}

// setupNames are the names -setups accepts.
var setupNames = []string{"adamw", "sgd", "convnet"}

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
// Both get args, then --max-lr and --seed; the test loss is the script's
// last line, the commit record hdet's metrics.jsonl.
type torchScript struct {
	rn                      *runner
	python                  string
	plainScript, hdetScript string
	args                    []string
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
		Fingerprint: "plain script", Read: readPlainScript}
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
		Files: files, Fingerprint: t.prog, Read: readWorkerRun,
	}
}

func (t *torchScript) prepare(_ context.Context, _ *bench, _ *setup, prog string) error {
	t.prog = prog
	return nil
}

func (t *torchScript) about() string { return t.model }

// runName is where a run of study 1 goes: s1/SETUP/seedS/KIND-LR.
func runName(s *setup, seed int, kind string, lr float64) string {
	return filepath.Join("s1", s.Name, fmt.Sprintf("seed%d", seed), kind+"-"+lrText(lr))
}
