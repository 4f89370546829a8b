// Package faults injects test-only failures into a rank's replica, for the
// fault suite (tests/faults_test.go). Only a binary built with `-tags
// faults` links it (cmd/hdet/faults.go), and only the environment variable
// HDET_FAULTS switches it on, so neither production binaries nor the
// user's config know of it.
//
// HDET_FAULTS is a comma-separated list of KIND=RANK@WINDOW (nan_all and
// blowup_all take only =WINDOW):
//
//	nan=2@3      rank 2's window loss is NaN from window 3 on
//	nan_all=4    every rank's loss is NaN in window 4, first pass only
//	             (the window re-run after a rollback is clean)
//	stop=2@3     rank 2 stops itself (SIGSTOP) when it first starts
//	             window 3, as a hung node would
//	diverge=3@4  rank 3's loss is 1000 times larger (still finite) from
//	             window 4 on
//	blowup_all=4 every rank's loss is 100 times larger (still finite) in
//	             window 4, first pass only
package faults

import (
	"context"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hdet-dev/hdet/internal/engine"
)

// Env is the environment variable that holds the faults.
const Env = "HDET_FAULTS"

// At places a fault: Rank (-1: every rank) from or at Window.
type At struct{ Rank, Window int }

// Set is the faults of one run; a nil *At is off.
type Set struct {
	NaN, NaNAll, Stop, Diverge, BlowUpAll *At
}

// Parse reads a HDET_FAULTS value.
func Parse(s string) (Set, error) {
	var set Set
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		kind, val, _ := strings.Cut(item, "=")
		at, err := parseAt(val, kind == "nan_all" || kind == "blowup_all")
		if err != nil {
			return Set{}, fmt.Errorf("%s: %q: %w", Env, item, err)
		}
		switch kind {
		case "nan":
			set.NaN = at
		case "nan_all":
			set.NaNAll = at
		case "stop":
			set.Stop = at
		case "diverge":
			set.Diverge = at
		case "blowup_all":
			set.BlowUpAll = at
		default:
			return Set{}, fmt.Errorf("%s: %q: unknown fault (want nan, nan_all, stop, diverge or blowup_all)", Env, item)
		}
	}
	return set, nil
}

func parseAt(v string, everyRank bool) (*At, error) {
	at := &At{Rank: -1}
	w := v
	if !everyRank {
		r, rest, ok := strings.Cut(v, "@")
		if !ok {
			return nil, fmt.Errorf("want RANK@WINDOW")
		}
		var err error
		if at.Rank, err = strconv.Atoi(r); err != nil || at.Rank < 0 {
			return nil, fmt.Errorf("rank %q: want a rank number", r)
		}
		w = rest
	}
	var err error
	if at.Window, err = strconv.Atoi(w); err != nil || at.Window < 0 {
		return nil, fmt.Errorf("window %q: want a window number", w)
	}
	return at, nil
}

func (a *At) hits(rank int) bool { return a != nil && (a.Rank < 0 || a.Rank == rank) }

// FromEnv wraps r with the faults HDET_FAULTS sets for this rank; r itself
// when it sets none. window is train.window (T), to tell windows apart.
func FromEnv(r engine.Replica, rank, window int) (engine.Replica, error) {
	set, err := Parse(os.Getenv(Env))
	if err != nil || set == (Set{}) {
		return r, err
	}
	return &replica{Replica: r, set: set, rank: rank, window: window, seen: map[int]bool{}}, nil
}

// replica applies a Set to one rank's windows.
type replica struct {
	engine.Replica
	set          Set
	rank, window int
	seen         map[int]bool // windows trained at least once (a rollback re-runs them)
}

// Unwrap lets engine.As find what only the wrapped replica can do.
func (f *replica) Unwrap() engine.Replica { return f.Replica }

func (f *replica) TrainWindow(ctx context.Context, w engine.Window) (engine.WindowResult, error) {
	k := w.Start / f.window
	first := !f.seen[k]
	f.seen[k] = true
	if s := f.set.Stop; first && s.hits(f.rank) && s.Window == k {
		stopSelf()
	}
	res, err := f.Replica.TrainWindow(ctx, w)
	if err != nil {
		return res, err
	}
	scale := 1.0
	switch {
	case f.set.NaN.hits(f.rank) && k >= f.set.NaN.Window,
		first && f.set.NaNAll.hits(f.rank) && k == f.set.NaNAll.Window:
		scale = math.NaN()
	case f.set.Diverge.hits(f.rank) && k >= f.set.Diverge.Window:
		scale = 1000
	case first && f.set.BlowUpAll.hits(f.rank) && k == f.set.BlowUpAll.Window:
		scale = 100
	}
	if scale != 1 {
		res.Losses = append([]float64(nil), res.Losses...)
		for i := range res.Losses {
			res.Losses[i] *= scale
		}
	}
	return res, nil
}

// stopSelf stops the process as a hung node or a debugger would, after a
// moment for its heartbeat to be written; it goes on only on SIGCONT.
func stopSelf() {
	time.Sleep(200 * time.Millisecond)
	_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
}
