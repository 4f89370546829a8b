// Package workload is the seam between a run and what it trains. A
// workload is a Factory that builds one rank's engine.Replica; what only
// some workloads can do is one of the small optional interfaces below (and
// engine's PeakLR and Unrestorable), which the session finds with
// engine.As. The session lists the workloads (internal/session/workloads.go)
// and holds the one replica, whatever its kind (docs/design.md §2).
package workload

import (
	"context"
	"errors"

	"github.com/hdet-dev/hdet/internal/config"
	"github.com/hdet-dev/hdet/internal/engine"
	"github.com/hdet-dev/hdet/mpi/reduce"
)

// Factory builds this rank's replica and says how many steps the run has.
// Every rank calls it in the same setup phase, so it may use collectives.
type Factory func(ctx context.Context, env Env) (r engine.Replica, steps int, err error)

// Comm is the part of a communicator a workload may use; *mpi.Comm has it.
type Comm interface {
	Rank() int
	Size() int
	LocalRank() int
	LocalSize() int
	AllreduceFloat64(buf []float64, op reduce.Op) error
	BcastMessage(msg []byte, root int) ([]byte, error)
}

// Env is where this rank stands in the run, as a Factory sees it.
type Env struct {
	// Config is the run's; a workload that decides a setting itself (a
	// script's train.window and train.sync) writes it here.
	Config *config.Config
	// CheckpointDir is where the run's checkpoints are (a resume starts
	// from the newest).
	CheckpointDir string
	World         Comm
	Layout        engine.Layout // replica groups (G = 1: a rank per replica)
	// Inside (G > 1) is this rank's replica; HostPeers the node-local ranks
	// of its ranks on this host, in position order.
	Inside    Comm
	HostPeers []int
	GPU       GPU
	// Host names this node (an address the other ranks can reach).
	Host func() (string, error)
	// Command is --worker's: the process that trains (empty for a
	// built-in workload).
	Command []string
}

// GPU is this rank's GPU as a process it starts should see it.
type GPU struct {
	// Own is the CUDA_VISIBLE_DEVICES entry of this rank's GPU (its MIG
	// instance, else its UUID); "" in CPU mode.
	Own string
	// Group is the CUDA_VISIBLE_DEVICES of the node-local ranks locals, in
	// that order ("" where they cannot all be listed: see
	// device.GroupVisible); nil in CPU mode.
	Group func(locals []int) (string, error)
}

// Restarter is a replica that can go back to its step-0 state for the
// main pass (docs/design.md §1.2); a run of a replica without it cannot
// commit. drawn reports parameters drawn anew from the seed, as at the
// start, to which train.warm_start applies again; a worker script started
// again reports false (the warm start is not applied to its main pass).
type Restarter interface {
	RestartMainPass(ctx context.Context) (drawn bool, err error)
}

// Agreer is a replica whose ranks must be checked to have built the same
// thing beyond its shape (every rank's script, its settings): every rank
// calls Agree, and every rank fails alike when one differs.
type Agreer interface {
	Agree(ctx context.Context, world Comm) error
}

// Sharder is a replica whose parameters may be sharded across its
// replica's ranks (FSDP2): Sharded ones differ in shape by position, so
// they are compared across the replicas, position by position.
type Sharder interface{ Sharded() bool }

// Explorers is a replica that brings explorers of its own (a script's
// schedule): Explorers merges them with the configured ones (notes are
// warnings for the log), SettingsHint says where its settings come from
// when the explorers are refused.
type Explorers interface {
	Explorers(configured []config.Explorer) (explorers []config.Explorer, notes []string, err error)
	SettingsHint() string
}

// Finisher is a replica that holds a process: Finish ends it after the
// last window and says how it ended (a script's exit after STOP fails the
// job, after the run's results are written). The session calls it at its
// own end too, after a failure, when it kills the process; it must then
// return at once.
type Finisher interface{ Finish() error }

// StateSaver is a replica with state outside its sync buffer (a worker
// script's data position and random streams) that it saves itself beside
// hdet's checkpoints, so that a relaunch resumes it at one where every
// rank saved it (docs/pytorch.md#resume); it is engine.Unrestorable, and
// started at the checkpoint its Factory found.
type StateSaver interface {
	// Resumable reports whether it saves its state at all (a script that
	// gave hdet its state); a run of one that does not starts over.
	Resumable() bool
	// StartedAt is the checkpoint it was started at; ok false: step 0.
	StartedAt() (pass, step int, ok bool)
	// SaveStateAt saves this rank's state for the checkpoint at step of
	// pass; every rank does before rank 0 writes hdet's. An error wrapping
	// ErrStateRefused is a disk's refusal: that checkpoint fails as a
	// refused write of hdet's own does, and the run goes on.
	SaveStateAt(ctx context.Context, pass, step int) error
	// PruneStates removes this rank's saved states that no checkpoint
	// kept refers to, after a checkpoint is written.
	PruneStates() error
	// RemoveStates (rank 0) removes every rank's saved states: the run
	// starts over.
	RemoveStates() error
}

// ErrStateRefused: a replica's state file could not be written (a full
// or read-only disk), and nothing else went wrong.
var ErrStateRefused = errors.New("its state could not be written")

// MainWindower is a replica that trains the main pass in windows longer
// than train.window where it has nothing to average (a script whose DDP
// keeps every rank the same): MainWindow is their length in steps, 0 for
// train.window.
type MainWindower interface {
	MainWindow(cfg *config.Config, steps int) int
}

// UsageError marks an error caused by what the user typed or configured
// (exit 2); a Factory's and an optional interface's errors may be one.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }
