//go:build !race

package cref

const raceEnabled = false
