//go:build race

package cref

// raceEnabled shortens the cosine's comparisons under -race, which makes
// them ten times slower and finds nothing more in them.
const raceEnabled = true
