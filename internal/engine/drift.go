package engine

import "math"

// relDrift is how far the healthy replicas' parameters drifted apart in a
// window, measured at its converge: the root mean square distance of each
// healthy replica's parameters θ_r to their mean θ̄, relative to ||θ̄||.
// It needs no parameters, only each replica's squared norm sq[r] =
// ||θ_r||² and the squared norm sumSq = ||Σ_r θ_r||² of the healthy
// replicas' sum: mean_r ||θ_r − θ̄||² = mean_r ||θ_r||² − ||θ̄||². Rounding
// can take the difference below 0; it counts as 0. NaN without a healthy
// replica.
func relDrift(sq []float64, healthy []bool, sumSq float64) float64 {
	n, s := 0, 0.0
	for r, v := range sq {
		if healthy[r] {
			n, s = n+1, s+v
		}
	}
	if n == 0 {
		return math.NaN()
	}
	avg := sumSq / float64(n) / float64(n)
	d := max(0, s/float64(n)-avg)
	if d == 0 {
		return 0
	}
	return math.Sqrt(d / avg)
}

// sqNorm is Σ x², added up in float64.
func sqNorm(x []float32) float64 {
	s := 0.0
	for _, v := range x {
		s += float64(v) * float64(v)
	}
	return s
}

// owned is the part of this rank's parameters in buf that it alone
// measures in its replica, so that the parts of a replica's ranks add up to
// the replica's parameters: all of them with one rank per replica, its own
// shards (FSDP2), or else (DDP: every rank holds the replica's copy) its
// position's slice of the sync buffer, as far as it holds parameters.
func (l *loop) owned(buf []float32) []float32 {
	p := buf[:l.o.Replica.ParamCount()]
	if l.lay.Size <= 1 || l.o.Groups.Sharded {
		return p
	}
	lo, hi := l.lay.Slice(len(buf), l.lay.Position(l.rank))
	return p[min(lo, len(p)):min(hi, len(p))]
}
