package engine

import (
	"math"
	"math/rand/v2"
)

// WarmStart sets params to theta0 plus this rank's noise eps ~ N(0, nu^2 *
// ||theta0||^2 / d) (docs/design.md §1), each rank with its own stream derived from
// (seed, rank), so replicas start near a trained model but apart.
func WarmStart(params, theta0 []float32, nu float64, seed uint64, rank int) {
	d := len(theta0)
	var sq float64
	for _, v := range theta0 {
		sq += float64(v) * float64(v)
	}
	std := 0.0
	if d > 0 {
		std = nu * math.Sqrt(sq/float64(d))
	}
	rng := rand.New(rand.NewPCG(seed, 0x5741524d^uint64(rank))) // "WARM"
	for i, v := range theta0 {
		params[i] = v + float32(std*rng.NormFloat64())
	}
}
