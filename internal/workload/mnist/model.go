package mnist

import (
	"math"

	"github.com/hdet-dev/hdet/internal/workload/internal/blas"
)

// gemm is the matrix product every layer uses; blas.Default picks the backend.
var gemm blas.Gemm = blas.Default

// layer is a fully connected layer y = x·W + b, W stored in×out row-major.
// Its slices are views into the replica's parameter and gradient slabs.
type layer struct {
	in, out int
	w, b    []float32
	gw, gb  []float32
}

// workspace holds the activations of one batch size.
type workspace struct {
	batch int
	x     []float32   // batch×Dim inputs
	y     []uint8     // batch labels
	act   [][]float32 // per layer, batch×out: hidden = ReLU+dropout output; last = logits
	mask  [][]float32 // per hidden layer, dropout scale 0 or 1/(1-p); unused when p = 0
	delta [][]float32 // per layer, dLoss/d(pre-activation)
}

func newWorkspace(layers []layer, batch int) *workspace {
	ws := &workspace{batch: batch, x: make([]float32, batch*layers[0].in), y: make([]uint8, batch)}
	for i, l := range layers {
		ws.act = append(ws.act, make([]float32, batch*l.out))
		ws.delta = append(ws.delta, make([]float32, batch*l.out))
		if i < len(layers)-1 {
			ws.mask = append(ws.mask, make([]float32, batch*l.out))
		}
	}
	return ws
}

// pixel maps a byte to the standardised input (MNIST's mean 0.1307 and
// standard deviation 0.3081 of pixel/255), so the first layer sees inputs
// of unit scale.
var pixel = func() (t [256]float32) {
	for i := range t {
		t[i] = float32((float64(i)/255 - 0.1307) / 0.3081)
	}
	return t
}()

// load fills ws with n examples of d, the k-th being d's example idx(k).
func (ws *workspace) load(d *Dataset, n int, idx func(k int) int) {
	for k := range n {
		j := idx(k)
		row := ws.x[k*d.Dim : (k+1)*d.Dim]
		for p, v := range d.Images[j*d.Dim : (j+1)*d.Dim] {
			row[p] = pixel[v]
		}
		ws.y[k] = d.Labels[j]
	}
}

// forward computes the activations of the first n rows of ws. With
// dropout > 0 it zeroes hidden units with the masks drawn from drop (one
// stream per layer); then it returns the mean loss (cross-entropy against
// targets smoothed by labelSmoothing), fills the last delta with the loss's
// gradient w.r.t. the logits when grad is set, and counts correct argmaxes.
func forward(layers []layer, ws *workspace, n int, dropout, labelSmoothing float64, drop func(layer int) *stream, grad bool) (loss float64, correct int) {
	in := ws.x
	for li, l := range layers {
		z := ws.act[li][:n*l.out]
		for r := range n {
			copy(z[r*l.out:(r+1)*l.out], l.b)
		}
		gemm.Sgemm(false, false, n, l.out, l.in, 1, in, l.in, l.w, l.out, 1, z, l.out)
		if li == len(layers)-1 {
			break
		}
		var state uint64
		var mask []float32
		if dropout > 0 {
			state, mask = drop(li).s, ws.mask[li][:n*l.out]
		}
		kern.ReluDropout(z, mask, state, float32(dropout), float32(1/(1-dropout)))
		in = z
	}
	out := layers[len(layers)-1].out
	logits := ws.act[len(layers)-1]
	delta := ws.delta[len(layers)-1]
	eps := labelSmoothing
	var total float64
	for r := range n {
		row := logits[r*out : (r+1)*out]
		y := int(ws.y[r])
		best, m := 0, float64(row[0])
		for k, v := range row {
			if float64(v) > m {
				best, m = k, float64(v)
			}
		}
		if best == y {
			correct++
		}
		var sum float64
		for _, v := range row {
			sum += math.Exp(float64(v) - m)
		}
		lse := m + math.Log(sum) // log Σ exp(z)
		// loss = -Σ_k q_k log p_k, q = (1-eps)·onehot(y) + eps/K
		var sumLogP float64
		for _, v := range row {
			sumLogP += float64(v) - lse
		}
		total += -(1-eps)*(float64(row[y])-lse) - eps/float64(out)*sumLogP
		if grad {
			d := delta[r*out : (r+1)*out]
			for k, v := range row {
				q := eps / float64(out)
				if k == y {
					q += 1 - eps
				}
				d[k] = float32((math.Exp(float64(v)-lse) - q) / float64(n))
			}
		}
	}
	return total / float64(n), correct
}

// backward turns the logits' delta into the gradients of every layer's
// weights and biases (overwriting gw and gb), for the first n rows of ws.
func backward(layers []layer, ws *workspace, n int, dropout float64) {
	for li := len(layers) - 1; li >= 0; li-- {
		l := layers[li]
		delta := ws.delta[li][:n*l.out]
		in := ws.x
		if li > 0 {
			in = ws.act[li-1]
		}
		gemm.Sgemm(true, false, l.in, l.out, n, 1, in, l.in, delta, l.out, 0, l.gw, l.out)
		kern.BiasGrad(l.gb, delta)
		if li == 0 {
			break // no gradient w.r.t. the inputs needed
		}
		// Back through the previous layer's dropout and ReLU: a unit passed
		// exactly when its output is positive (ReLU output > 0 and kept).
		prev := ws.delta[li-1][:n*l.in]
		gemm.Sgemm(false, true, n, l.in, l.out, 1, delta, l.out, l.w, l.out, 0, prev, l.in)
		var mask []float32
		if dropout > 0 {
			mask = ws.mask[li-1][:n*l.in]
		}
		kern.BackMask(prev, ws.act[li-1][:n*l.in], mask)
	}
}
