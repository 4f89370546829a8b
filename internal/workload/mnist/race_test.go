//go:build race

package mnist

// raceEnabled lets the real-MNIST test step aside under -race: it runs the
// same code paths as the synthetic tests, ten times slower.
const raceEnabled = true
