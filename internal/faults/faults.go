// Package faults is the one table of test-only fault kinds (Kinds, in
// kinds.go) that the fault suite and the chaos soak both read, and the
// injector of its in-process kinds: failures a rank injects into its own
// replica. Only a binary built with `-tags faults` links it
// (cmd/hdet/faults.go), and only the environment variable HDET_FAULTS
// switches it on, so neither production binaries nor the user's config
// know of it. The outside kinds' injectors are the chaos soak's
// (tests/chaos_faults_test.go): they strike processes, links and disks of
// its test bed.
//
// HDET_FAULTS is a comma-separated list of KIND=RANK@WINDOW, or
// KIND=WINDOW for a kind that hits every rank (Self.EveryRank), each KIND
// an in-process row of Kinds: "nan=2@3,blowup_all=4".
package faults

import (
	"context"
	"fmt"
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
		at, err := parseAt(val, k.Self.EveryRank)
		if err != nil {
			return nil, fmt.Errorf("%s: %q: %w", Env, item, err)
		}
		set[name] = at
	}
	return set, nil
}

// kindOf is the in-process row of Kinds named name.
func kindOf(name string) (Kind, bool) {
	k, ok := Lookup(name)
	return k, ok && k.Where == InProcess
}

// kindNames lists the in-process kinds, for the error on an unknown one.
func kindNames() string {
	var names []string
	for _, k := range Kinds {
		if k.Where == InProcess {
			names = append(names, k.Name)
		}
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

// hits reports whether an in-process fault placed at a hits rank in
// window, first telling whether this is the window's first run.
func (s *Self) hits(a At, rank, window int, first bool) bool {
	if a.Rank >= 0 && a.Rank != rank {
		return false
	}
	if s.Onward {
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
		if !ok || !kind.Self.hits(at, f.rank, k, first) {
			continue
		}
		if kind.Self.Stop {
			stopSelf()
		}
		if kind.Self.Scale != 0 && scale == 1 {
			scale = kind.Self.Scale
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
