package mnist

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// refLoss is an independent float64 forward pass over params (the slab's
// layout) with the inputs, labels and dropout masks of ws.
func refLoss(r *Replica, params []float64, ws *workspace, n int, dropout, eps float64) float64 {
	in := make([]float64, n*r.layers[0].in)
	for i := range in {
		in[i] = float64(ws.x[i])
	}
	off := 0
	var logits []float64
	for li, l := range r.layers {
		w := params[off : off+l.in*l.out]
		b := params[off+l.in*l.out : off+l.in*l.out+l.out]
		off += l.in*l.out + l.out
		out := make([]float64, n*l.out)
		for row := range n {
			for j := range l.out {
				s := b[j]
				for k := range l.in {
					s += in[row*l.in+k] * w[k*l.out+j]
				}
				out[row*l.out+j] = s
			}
		}
		if li == len(r.layers)-1 {
			logits = out
			break
		}
		for i, v := range out {
			out[i] = math.Max(v, 0)
			if dropout > 0 {
				out[i] *= float64(ws.mask[li][i])
			}
		}
		in = out
	}
	K := r.layers[len(r.layers)-1].out
	var total float64
	for row := range n {
		z := logits[row*K : (row+1)*K]
		var sum float64
		for _, v := range z {
			sum += math.Exp(v)
		}
		for k, v := range z {
			q := eps / float64(K)
			if k == int(ws.y[row]) {
				q += 1 - eps
			}
			total -= q * (v - math.Log(sum))
		}
	}
	return total / float64(n)
}

func TestGradientMatchesFiniteDifferences(t *testing.T) {
	backends(t, func(t *testing.T) {
		cfg := smallConfig(AdamW)
		cfg.Hidden = []int{7, 5}
		cfg.BatchSize = 6
		cfg.Data.Train = synthetic(60, 9, 3, 5, 5)
		cfg.Data.Test = nil
		const dropout, eps = 0.3, 0.1
		r := newReplica(t, cfg)
		ws := r.train
		idx := r.batchIndices(3)
		ws.load(cfg.Data.Train, cfg.BatchSize, func(k int) int { return int(idx[k]) })
		drop := func(l int) *stream { return newStream(1, purposeDropout, 0, 3, uint64(l)) }
		loss, _ := forward(r.layers, ws, cfg.BatchSize, dropout, eps, drop, true)
		backward(r.layers, ws, cfg.BatchSize, dropout)

		params := make([]float64, r.nParam)
		for i, p := range r.SyncBuffer(false) {
			params[i] = float64(p)
		}
		require.InDelta(t, refLoss(r, params, ws, cfg.BatchSize, dropout, eps), loss, 1e-5)
		dropped := 0
		for _, m := range ws.mask[0] {
			if m == 0 {
				dropped++
			}
		}
		require.Positive(t, dropped, "the check must cover dropped units")

		const h = 1e-6
		for i := range params {
			orig := params[i]
			params[i] = orig + h
			up := refLoss(r, params, ws, cfg.BatchSize, dropout, eps)
			params[i] = orig - h
			down := refLoss(r, params, ws, cfg.BatchSize, dropout, eps)
			params[i] = orig
			num := (up - down) / (2 * h)
			require.InDelta(t, num, float64(r.grad[i]), 1e-4+1e-3*math.Abs(num), "parameter %d", i)
		}
	})
}
