package mnist

import (
	"math"
	"testing"

	"github.com/hdet-dev/hdet/internal/workload/internal/blas"
	"github.com/stretchr/testify/require"
)

// synthetic returns a separable data set: each class has a random prototype
// image drawn from protoSeed, and an example is its class's prototype plus
// noise drawn from seed, in bytes.
func synthetic(n, dim, classes int, protoSeed, seed uint64) *Dataset {
	s := newStream(protoSeed, 99)
	protos := make([][]float64, classes)
	for c := range protos {
		protos[c] = make([]float64, dim)
		for i := range protos[c] {
			protos[c][i] = 255 * float64(s.float32())
		}
	}
	s = newStream(seed, 98)
	d := &Dataset{Images: make([]uint8, n*dim), Labels: make([]uint8, n), N: n, Dim: dim, Classes: classes}
	for k := range n {
		c := s.intn(classes)
		d.Labels[k] = uint8(c)
		for i := range dim {
			v := protos[c][i] + 120*(float64(s.float32())-0.5)
			d.Images[k*dim+i] = uint8(math.Max(0, math.Min(255, v)))
		}
	}
	return d
}

// smallConfig is a quick configuration on a synthetic set.
func smallConfig(opt string) Config {
	cfg := DefaultConfig()
	cfg.Hidden = []int{32, 16}
	cfg.BatchSize = 16
	cfg.Optimizer = opt
	if opt == SGD {
		cfg.LR = 0.05
	}
	cfg.Data = &Data{Train: synthetic(800, 20, 4, 1, 1), Test: synthetic(300, 20, 4, 1, 2)}
	return cfg
}

func newReplica(t testing.TB, cfg Config) *Replica {
	t.Helper()
	r, err := New(cfg)
	require.NoError(t, err)
	return r
}

// backends runs f under each BLAS backend.
func backends(t *testing.T, f func(t *testing.T)) {
	for name, g := range map[string]blas.Gemm{"gonum": blas.Gonum{}, "default": blas.Default} {
		t.Run(name, func(t *testing.T) {
			old := gemm
			gemm = g
			defer func() { gemm = old }()
			f(t)
		})
	}
}

// constant is a window's worth of one value.
func constant(x float64, steps int) []float64 {
	xs := make([]float64, steps)
	for i := range xs {
		xs[i] = x
	}
	return xs
}
