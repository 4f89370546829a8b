package mnist

import "math/bits"

// Every random draw of the workload comes from a stream keyed by what it is
// for and by (seed, rank, step or epoch), never from a generator carried from
// one window to the next: a run resumed at step s then draws exactly what an
// uninterrupted run draws, and nothing but the slab needs checkpointing.

// Stream purposes, the first key word, so that streams never coincide.
const (
	purposeInit uint64 = iota + 1
	purposeOrder
	purposeDropout
	purposeProbe
)

// stream is splitmix64: a counter run through a strong mixer. It is tiny,
// fast and fully specified here, so its output cannot change with the Go
// release (math/rand/v2 does not promise that for its helpers).
type stream struct{ s uint64 }

// newStream derives a stream from key words by folding them through the mixer.
func newStream(keys ...uint64) *stream {
	h := uint64(0x6a09e667f3bcc909)
	for _, k := range keys {
		h = mix(h ^ mix(k+0x9e3779b97f4a7c15))
	}
	return &stream{s: h}
}

func mix(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

func (r *stream) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	return mix(r.s)
}

// float32 is uniform in [0, 1) on a 2^-24 grid, exactly representable.
func (r *stream) float32() float32 {
	return float32(r.next()>>40) * (1.0 / (1 << 24))
}

// intn is uniform in [0, n) by Lemire's multiply-shift (bias below 2^-40 for
// the sizes here, and deterministic).
func (r *stream) intn(n int) int {
	hi, _ := bits.Mul64(r.next(), uint64(n))
	return int(hi)
}

// permutation returns a Fisher–Yates shuffle of 0..n-1.
func (r *stream) permutation(n int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32(i)
	}
	for i := n - 1; i > 0; i-- {
		j := r.intn(i + 1)
		p[i], p[j] = p[j], p[i]
	}
	return p
}
