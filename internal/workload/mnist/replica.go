package mnist

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/hdet-dev/hdet/internal/engine"
	"github.com/hdet-dev/hdet/internal/workload/internal/blas"
)

// ErrUnknownHyperparameter marks a name in engine.Values the workload does not accept.
var ErrUnknownHyperparameter = errors.New("hyperparameter not accepted by the mnist workload")

// ErrNoTestSet is returned by Evaluate when Config.Data has no test set.
var ErrNoTestSet = errors.New("mnist: no test set to evaluate on")

// evalBatch is how many test examples Evaluate pushes through at once.
const evalBatch = 1000

// Replica is one rank's MLP; it implements engine.Replica.
//
// Checkpoints and warm starts read and write SyncBuffer directly: the first
// ParamCount values are the parameters (layer by layer: weights in×out
// row-major, then biases), the rest the optimizer state (AdamW: m then v;
// SGD: the momentum buffer). No other state exists: the optimizer's step
// count is the global step, and every random draw is keyed by (seed, rank,
// step), so restoring SyncBuffer(true) and calling TrainWindow from the
// saved step continues the run bit for bit.
type Replica struct {
	cfg    Config
	layers []layer
	segs   []segment
	slab   []float32 // parameters, then optimizer state
	grad   []float32 // gradients, same layout as the parameters
	nParam int
	train  *workspace
	eval   *workspace  // allocated on first Evaluate or probe
	probe  *probeState // allocated on the first probing window

	shard, stepsPerEpoch int
	orderEpoch           int // epoch whose permutation order holds; -1 none
	order                []int32
}

var _ engine.Replica = (*Replica)(nil)

// New builds a replica from cfg, validated (a bad field is a *ConfigError,
// wrapping ErrInvalidConfig; a BLAS library that does not load is returned
// as its loader says), with parameters initialised from cfg.Seed alone, so
// identically on every rank.
func New(cfg Config) (*Replica, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := blas.Ready(gemm); err != nil {
		return nil, err
	}
	cfg.Hidden = append([]int(nil), cfg.Hidden...)
	train := cfg.Data.Train
	sizes := append(append([]int{train.Dim}, cfg.Hidden...), train.Classes)

	r := &Replica{cfg: cfg, orderEpoch: -1}
	for i := range len(sizes) - 1 {
		r.nParam += sizes[i]*sizes[i+1] + sizes[i+1]
	}
	states := 2 // AdamW: m, v
	if cfg.Optimizer == SGD {
		states = 1
	}
	r.slab = make([]float32, r.nParam*(1+states))
	r.grad = make([]float32, r.nParam)
	off := 0
	for i := range len(sizes) - 1 {
		in, out := sizes[i], sizes[i+1]
		l := layer{in: in, out: out}
		output := i == len(sizes)-2
		l.w, l.gw = r.slab[off:off+in*out], r.grad[off:off+in*out]
		r.segs = append(r.segs, segment{lo: off, hi: off + in*out, output: output, decay: true})
		off += in * out
		l.b, l.gb = r.slab[off:off+out], r.grad[off:off+out]
		r.segs = append(r.segs, segment{lo: off, hi: off + out, output: output})
		off += out
		r.layers = append(r.layers, l)
	}
	r.initParams()
	r.train = newWorkspace(r.layers, cfg.BatchSize)
	r.shard = train.N / cfg.WorldSize
	r.stepsPerEpoch = r.shard / cfg.BatchSize
	return r, nil
}

// Reset returns the replica to its state at step 0: the parameters drawn
// from the seed again and the optimizer state zero. Every other state is
// keyed by (seed, rank, step), so a run from step 0 after Reset trains
// exactly as a fresh replica would (the main pass).
func (r *Replica) Reset() {
	r.initParams()
	clear(r.slab[r.nParam:])
}

// initParams draws He-uniform weights (bound sqrt(6/fan_in), suited to ReLU)
// from a stream of (seed, layer); biases start at zero.
func (r *Replica) initParams() {
	for i, l := range r.layers {
		s := newStream(r.cfg.Seed, purposeInit, uint64(i))
		bound := float32(math.Sqrt(6 / float64(l.in)))
		for j := range l.w {
			l.w[j] = (2*s.float32() - 1) * bound
		}
		clear(l.b)
	}
}

// Hyperparameters implements engine.Replica.
func (r *Replica) Hyperparameters() []string {
	return []string{HLR, HLRHidden, HLROutput, HDropout, HWeightDecay, HLabelSmoothing, HMomentum}
}

// SyncBuffer implements engine.Replica: a view of the slab, never a copy.
func (r *Replica) SyncBuffer(withOptimizer bool) []float32 {
	if withOptimizer {
		return r.slab
	}
	return r.slab[:r.nParam]
}

// ParamCount implements engine.Replica.
func (r *Replica) ParamCount() int { return r.nParam }

// StepsPerEpoch is how many steps one pass over this rank's shard takes
// (the shard's remainder after whole batches is skipped that epoch).
func (r *Replica) StepsPerEpoch() int { return r.stepsPerEpoch }

// resolve returns the hyperparameters of step i of a window: v's value where
// present, the configured default otherwise; a group's learning rate beats "lr".
func (r *Replica) resolve(v engine.Values, i int) hyper {
	get := func(name string, def float64) float64 {
		if xs, ok := v[name]; ok {
			return xs[i]
		}
		return def
	}
	lr := get(HLR, r.cfg.LR)
	return hyper{
		lrHidden:       get(HLRHidden, lr),
		lrOutput:       get(HLROutput, lr),
		dropout:        get(HDropout, r.cfg.Dropout),
		weightDecay:    get(HWeightDecay, r.cfg.WeightDecay),
		labelSmoothing: get(HLabelSmoothing, r.cfg.LabelSmoothing),
		momentum:       get(HMomentum, r.cfg.Momentum),
	}
}

// checkValues rejects unknown names, wrong lengths and out-of-range values
// before a window starts, so a bad plan never leaves a half-trained window.
func (r *Replica) checkValues(v engine.Values, steps int) error {
	accepted := r.Hyperparameters()
	for name, xs := range v {
		known := false
		for _, a := range accepted {
			known = known || a == name
		}
		if !known {
			return fmt.Errorf("%w: %q (accepted: %v)", ErrUnknownHyperparameter, name, accepted)
		}
		if len(xs) != steps {
			return fmt.Errorf("mnist: %d values of %q for a window of %d steps", len(xs), name, steps)
		}
		for i, x := range xs {
			if err := checkValue(name, x); err != nil {
				return fmt.Errorf("window step %d: %w", i, err)
			}
		}
	}
	return nil
}

// TrainWindow implements engine.Replica. Step t of rank r trains on batch
// t mod StepsPerEpoch of r's shard of epoch t / StepsPerEpoch. With grads
// non-nil the gradient slab is averaged across ranks between backward and the
// optimizer step.
func (r *Replica) TrainWindow(ctx context.Context, w engine.Window) (engine.WindowResult, error) {
	start, steps, v, grads := w.Start, w.Steps, w.V, w.Grads
	if start < 0 || steps < 0 {
		return engine.WindowResult{}, fmt.Errorf("mnist: window start %d, steps %d: both must be >= 0", start, steps)
	}
	if err := r.checkValues(v, steps); err != nil {
		return engine.WindowResult{}, err
	}
	res := engine.WindowResult{Losses: make([]float64, 0, steps), Probe: math.NaN()}
	tail := min(max(w.ProbeTail, 0), steps)
	var probing time.Duration // the tail average's and the probe's share of the window
	for i := range steps {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		loss, err := r.step(start+i, r.resolve(v, i), grads)
		if err != nil {
			return res, err
		}
		res.Losses = append(res.Losses, loss)
		if k := i - (steps - tail) + 1; k >= 1 {
			t := time.Now()
			r.accumulateTail(k)
			probing += time.Since(t)
		}
	}
	if tail > 0 {
		t := time.Now()
		p, err := r.probeLoss(ctx)
		if err != nil {
			return res, err
		}
		res.Probe, res.ProbeSeconds = p, (probing + time.Since(t)).Seconds()
	}
	return res, nil
}

// CanProbe implements engine.Replica: TrainWindow answers ProbeTail unless
// the run has no probe examples.
func (r *Replica) CanProbe() bool { return r.cfg.ProbeExamples > 0 }

// step trains global step t and returns its loss.
func (r *Replica) step(t int, h hyper, grads engine.GradReducer) (float64, error) {
	ws, b := r.train, r.cfg.BatchSize
	idx := r.batchIndices(t)
	ws.load(r.cfg.Data.Train, b, func(k int) int { return int(idx[k]) })
	drop := func(layer int) *stream {
		return newStream(r.cfg.Seed, purposeDropout, uint64(r.cfg.Rank), uint64(t), uint64(layer))
	}
	loss, _ := forward(r.layers, ws, b, h.dropout, h.labelSmoothing, drop, true)
	backward(r.layers, ws, b, h.dropout)
	if grads != nil {
		if err := grads.AllreduceMean(r.grad); err != nil {
			return loss, fmt.Errorf("mnist: step %d: gradient allreduce: %w", t, err)
		}
	}
	p := r.slab[:r.nParam]
	if r.cfg.Optimizer == SGD {
		sgdStep(p, r.grad, r.slab[r.nParam:], r.segs, h)
	} else {
		adamWStep(p, r.grad, r.slab[r.nParam:2*r.nParam], r.slab[2*r.nParam:], r.segs, h, r.cfg.Beta2, r.cfg.Eps, t+1)
	}
	return loss, nil
}

// batchIndices returns the training examples of step t: this rank's shard is
// the Rank-th of WorldSize equal slices of the epoch's order, so ranks never
// share an example within an epoch.
func (r *Replica) batchIndices(t int) []int32 {
	order := r.epochOrder(t / r.stepsPerEpoch)
	first := r.cfg.Rank*r.shard + (t%r.stepsPerEpoch)*r.cfg.BatchSize
	return order[first : first+r.cfg.BatchSize]
}

// epochOrder is the permutation of the training set for epoch e, the same on
// every rank; it is a pure function of (seed, e), cached for the epoch.
func (r *Replica) epochOrder(e int) []int32 {
	if e != r.orderEpoch {
		r.order = newStream(r.cfg.Seed, purposeOrder, uint64(e)).permutation(r.cfg.Data.Train.N)
		r.orderEpoch = e
	}
	return r.order
}

// Evaluate implements engine.Replica: mean cross-entropy (no label smoothing,
// no dropout) and accuracy over the whole test set.
func (r *Replica) Evaluate(ctx context.Context) (loss, accuracy float64, err error) {
	sum, correct, n, err := r.EvaluateShard(ctx, 0, 1)
	if err != nil {
		return 0, 0, err
	}
	return sum / n, correct / n, nil
}

// EvaluateShard evaluates the shard-th of shards contiguous parts of the
// test set (engine.ShardEvaluator): the summed loss, the correct
// predictions and the examples it holds.
func (r *Replica) EvaluateShard(ctx context.Context, shard, shards int) (lossSum, correct, n float64, err error) {
	test := r.cfg.Data.Test
	if test == nil {
		return 0, 0, 0, ErrNoTestSet
	}
	lo, hi := shard*test.N/shards, (shard+1)*test.N/shards
	sum, c, err := r.evalOn(ctx, r.layers, test, hi-lo, func(k int) int { return lo + k })
	if err != nil {
		return 0, 0, 0, err
	}
	return sum, float64(c), float64(hi - lo), nil
}

// evalOn runs layers in eval mode over n examples of d (the k-th being
// idx(k)) in chunks of min(evalBatch, n), and returns the summed
// cross-entropy and the count of correct argmaxes.
func (r *Replica) evalOn(ctx context.Context, layers []layer, d *Dataset, n int, idx func(k int) int) (lossSum float64, correct int, err error) {
	chunk := max(1, min(evalBatch, n))
	if r.eval == nil || r.eval.batch < chunk {
		r.eval = newWorkspace(r.layers, chunk)
	}
	for lo := 0; lo < n; lo += chunk {
		if err := ctx.Err(); err != nil {
			return 0, 0, err
		}
		m := min(chunk, n-lo)
		r.eval.load(d, m, func(k int) int { return idx(lo + k) })
		l, c := forward(layers, r.eval, m, 0, 0, nil, false)
		lossSum += l * float64(m)
		correct += c
	}
	return lossSum, correct, nil
}
