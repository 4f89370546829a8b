//go:build !race

package mnist

const raceEnabled = false
