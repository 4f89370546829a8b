package mnist

import "context"

// The probe signal (docs/design.md §1.1): at the end of a window that asks
// for it, each rank evaluates the average of its parameter iterates over the
// window's last ProbeTail steps, in eval mode (no dropout, no label
// smoothing), on the same probe examples on every rank.
//
// Nothing here needs checkpointing: the probe set is a pure function of
// (Seed, training data), and the tail average lives only inside one window
// (it is rebuilt from the window's own iterates, and checkpoints are taken at
// window ends), so a resumed run probes exactly what an uninterrupted one does.

// probeState is the probe's scratch, allocated on the first probing window
// and reused by every later one.
type probeState struct {
	idx    []int32   // the probe examples, indices into the training set
	avg    []float32 // running average of the tail's parameter iterates
	layers []layer   // views of avg with the shapes of Replica.layers
}

// probeScratch returns the probe's scratch. The probe examples are the
// first min(ProbeExamples, N) of a permutation of the training set drawn
// from (Seed, purposeProbe) alone, so the same on every rank.
func (r *Replica) probeScratch() *probeState {
	if r.probe != nil {
		return r.probe
	}
	train := r.cfg.Data.Train
	n := min(r.cfg.ProbeExamples, train.N)
	p := &probeState{
		idx: newStream(r.cfg.Seed, purposeProbe).permutation(train.N)[:n:n],
		avg: make([]float32, r.nParam),
	}
	off := 0
	for _, l := range r.layers {
		p.layers = append(p.layers, layer{in: l.in, out: l.out, w: p.avg[off : off+l.in*l.out], b: p.avg[off+l.in*l.out : off+l.in*l.out+l.out]})
		off += l.in*l.out + l.out
	}
	r.probe = p
	return p
}

// accumulateTail folds the current parameters into the tail average as its
// k-th iterate (k >= 1): avg += (θ - avg)/k, exactly θ when k = 1 (in a
// kernel: the scalar division per parameter cost as much as the probe's
// evaluation).
func (r *Replica) accumulateTail(k int) {
	avg, p := r.probeScratch().avg, r.slab[:r.nParam]
	if k == 1 {
		copy(avg, p)
		return
	}
	kern.Average(avg, p, float32(k))
}

// probeLoss is the eval-mode mean cross-entropy of the tail average on the
// probe set.
func (r *Replica) probeLoss(ctx context.Context) (float64, error) {
	p := r.probeScratch()
	sum, _, err := r.evalOn(ctx, p.layers, r.cfg.Data.Train, len(p.idx), func(k int) int { return int(p.idx[k]) })
	return sum / float64(len(p.idx)), err
}
