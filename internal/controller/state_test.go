package controller

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/internal/plan"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/*.state from the current code")

// stub is an explorer whose plans, feedback and state are the test's own,
// so that the golden checkpoints test the controller's format, not the
// built-in explorers' (whose state may change meaning on its own terms).
type stub struct {
	name   string
	base   float64
	doneAt int // Observe of this window reports SearchDone; before it, Searching
	seen   uint64
}

func (s *stub) Describe(context.Context) (hparam.Descriptor, error) {
	return hparam.Descriptor{Name: s.name, Version: "test", Hyperparameter: s.name, Scale: hparam.Log,
		Bounds: hparam.Bounds{Lower: 1e-6, Upper: 0.5}, Spread: hparam.Spread{Kind: hparam.Geometric, Alpha: 2}}, nil
}

func (s *stub) Init(context.Context, hparam.Setup) error { return nil }

func (s *stub) Plan(_ context.Context, r hparam.WindowRequest) (hparam.WindowPlan, error) {
	wp := hparam.WindowPlan{Base: make([]float64, r.Steps), Spread: hparam.Spread{Kind: hparam.Geometric, Alpha: 2},
		Bounds: hparam.Bounds{Lower: 1e-6, Upper: 0.5}}
	for i := range wp.Base {
		wp.Base[i] = s.base * float64(1+r.Start+i) / 100
	}
	return wp, nil
}

func (s *stub) Observe(_ context.Context, o hparam.Observation) (hparam.Feedback, error) {
	s.seen++
	st := hparam.Searching
	if o.Window >= s.doneAt {
		st = hparam.SearchDone
	}
	return hparam.Feedback{Base: s.base, Search: st}, nil
}

func (s *stub) Commit(context.Context) (hparam.Commitment, error) {
	return hparam.Commitment{Offset: 0.25, Value: s.base * 1.5}, nil
}

func (s *stub) SaveState(context.Context) ([]byte, error) {
	return binary.AppendUvarint([]byte(s.name), s.seen), nil
}

func (s *stub) LoadState(_ context.Context, b []byte) error {
	if len(b) <= len(s.name) || string(b[:len(s.name)]) != s.name {
		return fmt.Errorf("%w: not %s's state", hparam.ErrDecode, s.name)
	}
	v, n := binary.Uvarint(b[len(s.name):])
	if n <= 0 {
		return fmt.Errorf("%w: bad count", hparam.ErrDecode)
	}
	s.seen = v
	return nil
}

func stubController(t *testing.T) *Controller {
	t.Helper()
	ex := []NamedExplorer{
		{Name: "lr", Explorer: &stub{name: "lr", base: 0.01, doneAt: 4}},
		{Name: "dropout", Explorer: &flaky{Explorer: &stub{name: "dropout", base: 0.1, doneAt: 2}, failOp: "observe", failWindow: 2}},
	}
	c, err := NewController(context.Background(), RunShape{Ranks: 4, TotalSteps: 100, WindowSteps: 10, Seed: 5}, ex)
	require.NoError(t, err)
	return c
}

// Checkpoints written by the controller as it was before it was split into
// files by job (testdata/*.state, version 3) still load, restore what was
// saved, and save back to the same bytes: the format did not change.
func TestControllerStateGolden(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		file    string
		windows int  // windows observed before the save
		pending bool // a plan drawn and not yet observed at the save
		pass    int
		next    int
	}{
		{"search-pending.state", 3, true, plan.PassSearch, 3},
		{"main.state", 7, false, plan.PassMain, 2},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			c := stubController(t)
			runUntil(t, c, tc.windows)
			if tc.pending {
				_, _, err := c.Plan(ctx)
				require.NoError(t, err)
			}
			st, _, err := c.SaveState(ctx)
			require.NoError(t, err)
			path := filepath.Join("testdata", tc.file)
			if *updateGolden {
				require.NoError(t, os.MkdirAll("testdata", 0o755))
				require.NoError(t, os.WriteFile(path, st, 0o644))
			}
			golden, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, golden, st, "this code saves what the golden file holds")

			d := stubController(t)
			_, err = d.LoadState(ctx, golden)
			require.NoError(t, err)
			assert.Equal(t, tc.pass, d.Pass())
			assert.Equal(t, tc.next, d.Next())
			assert.True(t, d.Frozen("dropout"), "dropout failed its observe of window 2")
			assert.Equal(t, c.Commitments(), d.Commitments())
			again, _, err := d.SaveState(ctx)
			require.NoError(t, err)
			assert.Equal(t, golden, again, "a loaded golden state saves back to the same bytes")
			pc, _, err := c.Plan(ctx)
			require.NoError(t, err)
			pd, _, err := d.Plan(ctx)
			require.NoError(t, err)
			assert.Equal(t, pc, pd, "the restored controller plans what the saved one does")
		})
	}
}

// runUntil plans and observes windows until n have been observed, across
// the commit (the window count restarts at 0 in the main pass).
func runUntil(t *testing.T, c *Controller, n int) {
	ctx := context.Background()
	for range n {
		p, _, err := c.Plan(ctx)
		require.NoError(t, err)
		_, _, err = c.Observe(ctx, lossesFor(p), nil, 0)
		require.NoError(t, err)
	}
}
