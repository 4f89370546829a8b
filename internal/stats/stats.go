// Package stats holds the summary statistics that several packages report
// (the engine's divergence check, hdet bench, the benchmark tables).
package stats

import (
	"math"
	"slices"
)

// Median is the median of xs, the mean of the middle two for an even
// count, NaN when xs is empty; xs is not modified. Callers drop the values
// (NaN, Inf) that must not count.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
