// Package memcheck refuses a model that cannot fit in this host's memory
// before anything is allocated, with the estimate in the message, instead of
// letting the Go runtime die out of memory with a goroutine dump.
package memcheck

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// MLPBytes estimates what one rank of the built-in MLP holds: parameters,
// gradients, two optimizer moments, the sync buffer (parameters and moments
// again) and a spare copy — 8 float32 per parameter — plus the activations
// and their gradients of one batch (4 float32 per unit and example).
func MLPBytes(in int, hidden []int, out, batch int) int64 {
	var params, units int64
	prev := int64(in)
	for _, h := range append(hidden[:len(hidden):len(hidden)], out) {
		params += prev*int64(h) + int64(h)
		units += int64(h)
		prev = int64(h)
	}
	return 4 * (8*params + 4*units*int64(batch))
}

// Fit fails when localRanks ranks of need bytes each exceed the memory
// available on this host (MemAvailable); it says nothing when that is unknown.
func Fit(need int64, localRanks int) error {
	avail, ok := available()
	total := need * int64(max(localRanks, 1))
	if !ok || total <= avail {
		return nil
	}
	return fmt.Errorf("the model needs about %s per rank, %s for the %d ranks on this host, but only %s is available",
		gib(need), gib(total), localRanks, gib(avail))
}

func gib(b int64) string { return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30)) }

// available reads MemAvailable from /proc/meminfo.
func available() (int64, bool) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) >= 2 && string(f[0]) == "MemAvailable:" {
			kb, err := strconv.ParseInt(string(f[1]), 10, 64)
			return kb * 1024, err == nil
		}
	}
	return 0, false
}
