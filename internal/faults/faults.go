// Package faults injects test-only failures into a rank's replica, for the
// fault suite (tests/faults_test.go). Only a binary built with `-tags
// faults` links it (cmd/hdet/faults.go), and only the environment variable
// HDET_FAULTS switches it on, so neither production binaries nor the
// user's config know of it.
//
// HDET_FAULTS is a comma-separated list of KIND=RANK@WINDOW, or
// KIND=WINDOW for a kind that hits every rank. The kinds are the rows of
// Kinds (`hdet-faults` lists them in its error for an unknown one):
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
//
// The chaos soak's faults (tests/chaos_faults_test.go) strike from
// outside hdet instead: processes, links and disks of its test bed.
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

// Kind is one fault HDET_FAULTS can set: how it is written and what it
// does to the windows it hits.
type Kind struct {
	Name string
	// EveryRank: written KIND=WINDOW, it hits every rank; else
	// KIND=RANK@WINDOW.
	EveryRank bool
	// Onward: it hits its window and every later one, each time it runs;
	// else its window only, and only the first time it runs (not the
	// re-run after a rollback).
	Onward bool
	Scale  float64 // the factor on the losses of a window it hits; 0: none
	Stop   bool    // the rank stops itself (SIGSTOP) as the window starts
}

// Kinds is every fault HDET_FAULTS can set. Where a window has several
// whose Scale applies, the first row's wins.
var Kinds = []Kind{
	{Name: "nan", Onward: true, Scale: math.NaN()},
	{Name: "nan_all", EveryRank: true, Scale: math.NaN()},
	{Name: "stop", Stop: true},
	{Name: "diverge", Onward: true, Scale: 1000},
	{Name: "blowup_all", EveryRank: true, Scale: 100},
}

// At places a fault: Rank (-1: every rank) from or at Window.
type At struct{ Rank, Window int }

// Set is the faults of one run, by kind name.
type Set map[string]At

// Parse reads a HDET_FAULTS value.
func Parse(s string) (Set, error) {
	set := Set{}
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		name, val, _ := strings.Cut(item, "=")
		k, ok := kindOf(name)
		if !ok {
			return nil, fmt.Errorf("%s: %q: unknown fault (want %s)", Env, item, kindNames())
		}
		at, err := parseAt(val, k.EveryRank)
		if err != nil {
			return nil, fmt.Errorf("%s: %q: %w", Env, item, err)
		}
		set[name] = at
	}
	return set, nil
}

func kindOf(name string) (Kind, bool) {
	for _, k := range Kinds {
		if k.Name == name {
			return k, true
		}
	}
	return Kind{}, false
}

func kindNames() string {
	names := make([]string, len(Kinds))
	for i, k := range Kinds {
		names[i] = k.Name
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

func parseAt(v string, everyRank bool) (At, error) {
	at := At{Rank: -1}
	w := v
	if !everyRank {
		r, rest, ok := strings.Cut(v, "@")
		if !ok {
			return at, fmt.Errorf("want RANK@WINDOW")
		}
		var err error
		if at.Rank, err = strconv.Atoi(r); err != nil || at.Rank < 0 {
			return at, fmt.Errorf("rank %q: want a rank number", r)
		}
		w = rest
	}
	var err error
	if at.Window, err = strconv.Atoi(w); err != nil || at.Window < 0 {
		return at, fmt.Errorf("window %q: want a window number", w)
	}
	return at, nil
}

// hits reports whether the fault of kind k placed at a hits rank in
// window, first telling whether this is the window's first run.
func (k Kind) hits(a At, rank, window int, first bool) bool {
	if a.Rank >= 0 && a.Rank != rank {
		return false
	}
	if k.Onward {
		return window >= a.Window
	}
	return first && window == a.Window
}

// FromEnv wraps r with the faults HDET_FAULTS sets for this rank; r itself
// when it sets none. window is train.window (T), to tell windows apart.
func FromEnv(r engine.Replica, rank, window int) (engine.Replica, error) {
	set, err := Parse(os.Getenv(Env))
	if err != nil || len(set) == 0 {
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
	scale := 1.0
	for _, kind := range Kinds {
		at, ok := f.set[kind.Name]
		if !ok || !kind.hits(at, f.rank, k, first) {
			continue
		}
		if kind.Stop {
			stopSelf()
		}
		if kind.Scale != 0 && scale == 1 {
			scale = kind.Scale
		}
	}
	res, err := f.Replica.TrainWindow(ctx, w)
	if err != nil || scale == 1 {
		return res, err
	}
	res.Losses = append([]float64(nil), res.Losses...)
	for i := range res.Losses {
		res.Losses[i] *= scale
	}
	return res, nil
}

// stopSelf stops the process as a hung node or a debugger would, after a
// moment for its heartbeat to be written; it goes on only on SIGCONT.
func stopSelf() {
	time.Sleep(200 * time.Millisecond)
	_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
}
