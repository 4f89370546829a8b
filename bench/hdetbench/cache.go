package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/hdet-dev/hdet/internal/atomicfile"
	"github.com/hdet-dev/hdet/plugins"
)

// keyFile, in a finished run's directory, holds the key the run was made
// under; a later hdetbench invocation reuses the run when its key is equal.
// Training here is deterministic per seed, so an equal key means equal
// numbers; only timings would differ.
const keyFile = "hdetbench.key"

// cacheKey is the text that decides reuse: the rank (or process) count,
// the command's arguments (without the run directory), the bytes of the
// files it reads (config, script) and a fingerprint of what else the
// numbers depend on (canaryFingerprint, programFingerprint).
func cacheKey(np int, files []string, fingerprint string, args []string) (string, error) {
	var sb strings.Builder
	fmt.Fprintf(&sb, "hdetbench run key v2\nnp %d\nargs %s\n", np, strings.Join(args, " "))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("cache key: %w", err)
		}
		sum := sha256.Sum256(data)
		fmt.Fprintf(&sb, "file %s %s\n", f, hex.EncodeToString(sum[:]))
	}
	fmt.Fprintf(&sb, "trainer %s\n", fingerprint)
	return sb.String(), nil
}

// divergedFile, beside the key, marks a run that stopped because training
// diverged on every rank; it is as reusable as a finished one. secondsFile
// holds the launch's wall time, start-up included.
const (
	divergedFile = "hdetbench.diverged"
	secondsFile  = "hdetbench.seconds"
)

// saveKey records the key, the divergence and the wall time of a run just
// made.
func saveKey(dir, key string, diverged bool, seconds float64) error {
	if diverged {
		if err := atomicfile.Write(filepath.Join(dir, divergedFile), []byte(allUnhealthy+"\n")); err != nil {
			return err
		}
	}
	if err := atomicfile.Write(filepath.Join(dir, secondsFile), []byte(strconv.FormatFloat(seconds, 'g', -1, 64)+"\n")); err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, keyFile), []byte(key))
}

// reuse reads, with read, a finished or diverged run whose key file equals
// key.
func reuse(dir, key string, read func(dir, out string, diverged bool) (result, error)) (result, bool) {
	got, err := os.ReadFile(filepath.Join(dir, keyFile))
	if err != nil || string(got) != key {
		return result{}, false
	}
	_, err = os.Stat(filepath.Join(dir, divergedFile))
	diverged := err == nil
	out, _ := os.ReadFile(filepath.Join(dir, logFile))
	res, err := read(dir, string(out), diverged)
	if err != nil {
		return result{}, false
	}
	res.ProcessSeconds = math.NaN()
	if data, err := os.ReadFile(filepath.Join(dir, secondsFile)); err == nil {
		if v, err := strconv.ParseFloat(strings.TrimSpace(string(data)), 64); err == nil {
			res.ProcessSeconds = v
		}
	}
	return res, true
}

// canaryFingerprint is what a run's numbers depend on besides its command
// and config, measured rather than assumed: a short run of the same setup
// and variant (never reused) and the checksum of its final parameters.
// Plain runs (alpha 0, auto off) do not depend on the controller, so work
// on the auto phase leaves their canary, and with it the finished sweep,
// valid; any change to the model, optimizer, data order or schedule changes
// it. An HDET canary of a few windows also runs the controller (its phases
// are fractions of the run, so a short run passes through them); it cannot
// see a change that acts only in runs far from its start, which is why
// the HDET runs' key also carries programFingerprint. Delete runs/bench to
// be sure.
func (b *bench) canaryFingerprint(ctx context.Context, name, config string, steps int, sets ...string) (string, error) {
	sets = slices.Concat([]string{"train.epochs=0", fmt.Sprintf("train.steps=%d", steps), "train.seed=1"}, sets)
	r, err := b.rn.run(ctx, filepath.Join("canary", name), config, "", sets...)
	if err != nil {
		return "", fmt.Errorf("canary: %w", err)
	}
	if r.Checksum == "" {
		return "", fmt.Errorf("canary: %s: the end record has no checksum", r.Dir)
	}
	return "canary " + r.Checksum, nil
}

// programFingerprint hashes the hdet binary and the explorer plugins beside
// it (bin/plugins). An HDET run's key carries it besides its canary: a
// canary of a few windows from one start cannot see every change to the
// update (a new default that acts only far from the best rate left the
// canary's checksum equal and stale HDET runs in the table), so a rebuilt
// program remakes the HDET runs; the sweep's plain runs keep their canary
// alone.
func programFingerprint(hdet string) (string, error) {
	explorers, err := filepath.Glob(filepath.Join(filepath.Dir(hdet), "plugins", "*"))
	if err != nil {
		return "", fmt.Errorf("program fingerprint: %w", err)
	}
	var sums strings.Builder
	for _, path := range append([]string{hdet}, explorers...) {
		sum, err := plugins.FileSHA256(path)
		if err != nil {
			return "", fmt.Errorf("program fingerprint: %w", err)
		}
		fmt.Fprintf(&sums, "%s %s\n", filepath.Base(path), sum)
	}
	return "program\n" + sums.String(), nil
}
