package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// keyFile, in a finished run's directory, holds the key the run was made
// under; a later hdetbench invocation reuses the run when its key is equal.
// Training here is deterministic per seed, so an equal key means equal
// numbers; only timings would differ.
const keyFile = "hdetbench.key"

// cacheKey is the text that decides reuse: the rank count, the hdet
// arguments (without the run directory), the config file's bytes, and a
// fingerprint of what the trainer computes (canaryFingerprint for plain
// runs, binaryFingerprint for HDET runs).
func cacheKey(np int, config, fingerprint string, args []string) (string, error) {
	data, err := os.ReadFile(config)
	if err != nil {
		return "", fmt.Errorf("cache key: %w", err)
	}
	sum := sha256.Sum256(data)
	return fmt.Sprintf("hdetbench run key v1\nnp %d\nargs %s\nconfig %s\ntrainer %s\n",
		np, strings.Join(args, " "), hex.EncodeToString(sum[:]), fingerprint), nil
}

// reuse reads a finished run whose key file equals key.
func reuse(dir, key string) (result, bool) {
	got, err := os.ReadFile(filepath.Join(dir, keyFile))
	if err != nil || string(got) != key {
		return result{}, false
	}
	res, err := readResult(dir)
	return res, err == nil
}

// binaryFingerprint hashes the hdet binary and the plugins next to it: an
// HDET run is reused only with the very binaries that made it.
func binaryFingerprint(bin string) (string, error) {
	h := sha256.New()
	paths, err := filepath.Glob(filepath.Join(bin, "plugins", "*"))
	if err != nil {
		return "", err
	}
	for _, p := range append([]string{filepath.Join(bin, "hdet")}, paths...) {
		f, err := os.Open(p)
		if err != nil {
			return "", fmt.Errorf("fingerprint: %w", err)
		}
		fmt.Fprintf(h, "%s\n", filepath.Base(p))
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", fmt.Errorf("fingerprint: %w", err)
		}
	}
	return "binaries " + hex.EncodeToString(h.Sum(nil)), nil
}

// canaryFingerprint is what a plain data-parallel run's numbers depend on,
// measured rather than assumed: a 60-step plain run of the setup (never
// reused) and the checksum of its final parameters. Plain runs (alpha 0,
// auto off) do not depend on the controller, so work on the auto phase
// leaves the checksum, and with it the finished sweep runs, valid; any
// change to the model, optimizer, data order or schedule changes it.
func (b *bench) canaryFingerprint(ctx context.Context, s setup) (string, error) {
	sets := append([]string{"train.epochs=0", "train.steps=60", "train.seed=1"}, s.Sets...)
	sets = append(sets, maxLRSet(gridLR(s.GridFrom+6)))
	r, err := b.rn.run(ctx, filepath.Join("canary", s.Name), sweepConfig, "", sets...)
	if err != nil {
		return "", fmt.Errorf("canary: %w", err)
	}
	if r.Checksum == "" {
		return "", fmt.Errorf("canary: %s: the end record has no checksum", r.Dir)
	}
	return "canary " + r.Checksum, nil
}
