package config

import (
	"errors"
	"testing"

	"github.com/hdet-dev/hdet/examples"
)

// FuzzLoad: the config loader never panics; every error is ErrInvalid, and
// an accepted config is valid and loads again from its own YAML rendering.
func FuzzLoad(f *testing.F) {
	f.Add(examples.MNIST, "train.window=50")
	f.Add([]byte("train: {steps: 10, window: 5}\nrun: {keep: 2}\n"), "explorers.lr.config.spread.alpha=0.2")
	f.Add([]byte("train:\n  window: 5\n  window: 6\n"), "train.steps=1e9")
	f.Add([]byte("workload: {hidden: [&a 3, *a]}\n"), "x[0]=1")
	f.Fuzz(func(t *testing.T, data []byte, set string) {
		c, err := Load(data, []string{set})
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error is not ErrInvalid: %v", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("accepted an invalid config: %v", err)
		}
		y, err := c.YAML()
		if err != nil {
			t.Fatalf("YAML: %v", err)
		}
		if _, err := Load(y, nil); err != nil {
			t.Fatalf("its own rendering does not load: %v\n%s", err, y)
		}
	})
}
