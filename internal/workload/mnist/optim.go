package mnist

import "math"

// segment is a contiguous run of parameters sharing a learning-rate group
// and a weight-decay rule.
type segment struct {
	lo, hi int
	output bool // in the output layer's group ("lr/output"), else "lr/hidden"
	decay  bool // weights decay, biases do not
}

// hyper is the resolved hyperparameters of one step.
type hyper struct {
	lrHidden, lrOutput                             float64
	dropout, weightDecay, labelSmoothing, momentum float64
}

func (h hyper) lr(s segment) float64 {
	if s.output {
		return h.lrOutput
	}
	return h.lrHidden
}

// adamWStep is PyTorch's AdamW (amsgrad off) at step t >= 1, with beta1 =
// h.momentum. The bias corrections use the current beta1, as PyTorch does when
// a scheduler cycles it.
func adamWStep(p, g, m, v []float32, segs []segment, h hyper, beta2, eps float64, t int) {
	b1, b2 := float32(h.momentum), float32(beta2)
	bc1 := 1 - math.Pow(h.momentum, float64(t))
	invSqrtBc2 := float32(1 / math.Sqrt(1-math.Pow(beta2, float64(t))))
	e := float32(eps)
	for _, s := range segs {
		lr := h.lr(s)
		keep := float32(1)
		if s.decay {
			keep = float32(1 - lr*h.weightDecay)
		}
		kern.AdamW(p[s.lo:s.hi], g[s.lo:s.hi], m[s.lo:s.hi], v[s.lo:s.hi],
			adamWConsts{B1: b1, B2: b2, Keep: keep, Step: float32(lr / bc1), InvSqrtBc2: invSqrtBc2, Eps: e})
	}
}

// sgdStep is PyTorch's SGD with momentum (dampening 0, no nesterov): weight
// decay is L2, added to the gradient, and buf starts at zero so that the
// first step's buf equals the gradient, as in PyTorch.
func sgdStep(p, g, buf []float32, segs []segment, h hyper) {
	mu := float32(h.momentum)
	for _, s := range segs {
		lr := float32(h.lr(s))
		wd := float32(0)
		if s.decay {
			wd = float32(h.weightDecay)
		}
		kern.SGD(p[s.lo:s.hi], g[s.lo:s.hi], buf[s.lo:s.hi], mu, lr, wd)
	}
}
