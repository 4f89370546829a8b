package main

import (
	"context"
	"fmt"
	"math"
	"strings"
)

// gptPlainDP is the HDET side of study 8: the lr explorer with spread
// alpha 0 and the auto phase off, plain data parallel under hdet (as
// bench/configs/sweep.yaml for the MLP), set on bench/configs/worker-lr.yaml.
var gptPlainDP = form{Name: "plaindp", Label: "hdet run --worker, alpha 0, auto off",
	Sets: []string{"explorers.lr.config.spread.alpha=0", "explorers.lr.config.auto.enabled=false"}}

// gptOverheadLR is study 8's max_lr: the GPT script's own default.
const gptOverheadLR = 3e-3

// studyGPTOverhead is study 8: hdet against torchrun on the GPT, per step,
// over interleaved pairs: plain gpt.py with torchrun's environment, then
// gpt_hdet.py (the one-line change) under `hdet run --worker` as plain DP
// (gptPlainDP), same seed and arguments, made afresh every time. A step's
// time is the script's training loop as it prints it over its steps, so
// start-up (Python, the corpus, hdet's launch) is out on both sides.
func (b *bench) studyGPTOverhead(ctx context.Context) (*table, error) {
	t := &table{Title: "Study 8: hdet against torchrun on the GPT, plain DP on both sides (interleaved pairs)",
		Header: []string{"run", "ms/step (median)", "min..max", "vs torchrun: median of pairs (range)",
			"hdet's windows ms/step", "process s (median)", "process vs torchrun", "val_bpb (median)"}}
	gpt := b.newGPT("examples/pytorch/gpt_hdet.py", "")
	var pairs []overheadPair
	for rep := range b.p.GPTPairs {
		plain := gpt.plain(1, gptOverheadLR)
		plain.Name, plain.Key = fmt.Sprintf("s8/torchrun-%d", rep), nil
		hdet := gpt.hdet(gptPlainDP, 1, gptOverheadLR)
		hdet.Name, hdet.Key = fmt.Sprintf("s8/hdet-%d", rep), nil
		p := overheadPair{hdet: map[int]result{}}
		var err error
		if p.plain, err = b.rn.launch(ctx, plain); err != nil {
			return t, err
		}
		if p.hdet[1], err = b.rn.launch(ctx, hdet); err != nil {
			return t, err
		}
		t.Commands = append(t.Commands, p.plain.Command, p.hdet[1].Command)
		pairs = append(pairs, p)
	}
	b.gptOverheadRows(t, pairs)
	b.gptOverheadNotes(t, pairs, gpt)
	return t, nil
}

// loopPerStep is a script's training loop per step.
func loopPerStep(r result) float64 { return r.LoopSeconds / float64(r.Steps) }

// gptOverheadRows adds the torchrun row and the hdet row (perPair's T 1).
func (b *bench) gptOverheadRows(t *table, pairs []overheadPair) {
	for _, w := range []int{0, 1} {
		label, vs, windows, procVs := "torchrun (gpt.py)", "-", "-", "-"
		p, h := perPair(pairs, w, loopPerStep)
		pp, hp := perPair(pairs, w, func(r result) float64 { return r.ProcessSeconds })
		_, loss := perPair(pairs, w, func(r result) float64 { return r.TestLoss })
		if w > 0 {
			over := ratios(p, h)
			label, vs = gptPlainDP.Label+" (gpt_hdet.py)", fmt.Sprintf("%s (%s)", pct(median(over)), rangeText(over, pct))
			_, win := perPair(pairs, w, func(r result) float64 { return r.TrainSeconds / float64(r.Steps) })
			windows, procVs = ms(median(win)), pct(median(ratios(pp, hp)))
		}
		t.add(label, ms(median(h)), rangeText(h, ms), vs, windows, num(median(hp), 1), procVs, num(median(loss), 4))
	}
}

// gptOverheadNotes says how study 8 measured and judges the target.
func (b *bench) gptOverheadNotes(t *table, pairs []overheadPair, gpt *torchScript) {
	p, h := perPair(pairs, 1, loopPerStep)
	over := median(ratios(p, h))
	t.note("The GPT (examples/pytorch/gpt.py, `%s --max-lr %g --seed 1`), %d ranks, %d pair(s), interleaved (torchrun, hdet, torchrun, ...), every run made afresh. torchrun: the plain script with torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; DDP over gloo). hdet: gpt_hdet.py (the scheduler's import changed) under `mpirun hdet run %s --set %s --set %s --worker`: the same OneCycleLR on every rank, no spread, no search, so plain DP under hdet; DDP still all-reduces the gradients and hdet adds its window converge (every 50 steps), plan and gather.",
		strings.Join(gpt.args, " "), gptOverheadLR, b.p.NP, len(pairs), workerConfig, gptPlainDP.Sets[0], gptPlainDP.Sets[1])
	t.note("ms/step: the script's training loop as it prints it (the JSON line's \"seconds\" over its \"steps\"), so start-up is out on both sides; vs torchrun: hdet's over torchrun's, pair by pair. hdet's windows ms/step: the same run's window records (fanout + converge + plan) over its steps. process s: each launch's wall time, start-up included (Python, the corpus, mpirun and hdet). val_bpb: plain DP either way, so the two should agree to the last digits.")
	ok := !math.IsNaN(over) && over <= 0.03
	t.note("%s: hdet against torchrun on the GPT is %s per step (median of %d pairs; target: at most +3%%). The machine is shared; the range shows the spread between pairs.", verdict(ok), pct(over), len(pairs))
}
