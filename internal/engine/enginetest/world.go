package enginetest

import (
	"fmt"
	"runtime/debug"
	"sync"
)

// World is Size ranks: the world's Net and, with replicas of G ranks
// (engine.Layout: replica r is world ranks r*G .. r*G+G-1), each replica's
// Net of G ranks and each position's cross-replica Net of Size/G ranks,
// ranked by replica.
type World struct {
	Size, G  int
	World    *Net
	Replicas []*Net // by replica; nil when G is 1
	Cross    []*Net // by position in the replica; nil when G is 1
	ran      bool
}

// NewWorld returns a world of size ranks in replicas of g (1: a replica
// per rank, no group Nets). g must divide size.
func NewWorld(size, g int) *World {
	if g < 1 || size%g != 0 {
		panic(fmt.Sprintf("enginetest: %d ranks do not divide into replicas of %d", size, g))
	}
	w := &World{Size: size, G: g, World: NewNet("world", size)}
	if g == 1 {
		return w
	}
	for r := range size / g {
		w.Replicas = append(w.Replicas, NewNet(fmt.Sprintf("replica %d", r), g))
	}
	for p := range g {
		w.Cross = append(w.Cross, NewNet(fmt.Sprintf("cross %d", p), size/g))
	}
	return w
}

// Comm is rank's world communicator.
func (w *World) Comm(rank int) Comm { return w.World.Comm(rank) }

// ReplicaComm is rank's communicator inside its replica (G > 1).
func (w *World) ReplicaComm(rank int) Comm { return w.Replicas[rank/w.G].Comm(rank % w.G) }

// CrossComm is rank's communicator across the replicas, with the ranks at
// its position in every replica (G > 1).
func (w *World) CrossComm(rank int) Comm { return w.Cross[rank%w.G].Comm(rank / w.G) }

// Nets are every Net of the world.
func (w *World) Nets() []*Net {
	return append(append([]*Net{w.World}, w.Replicas...), w.Cross...)
}

// Fail sets hook on every Net (Call.Net tells them apart).
func (w *World) Fail(hook func(Call) error) {
	for _, n := range w.Nets() {
		n.Fail(hook)
	}
}

// Run runs f on one goroutine per rank and returns each rank's error. A
// rank that returns (or panics: its error then holds the stack) leaves
// every Net it is in, so the ranks still waiting for it fail with
// ErrRankGone instead of hanging. A World runs once.
func (w *World) Run(f func(rank int) error) []error {
	if w.ran {
		panic("enginetest: World.Run called twice (its ranks have left): make a new World")
	}
	w.ran = true
	errs := make([]error, w.Size)
	var wg sync.WaitGroup
	for rank := range w.Size {
		wg.Go(func() {
			defer w.leave(rank)
			defer func() {
				if p := recover(); p != nil {
					errs[rank] = fmt.Errorf("rank %d panicked: %v\n%s", rank, p, debug.Stack())
				}
			}()
			errs[rank] = f(rank)
		})
	}
	wg.Wait()
	return errs
}

func (w *World) leave(rank int) {
	w.World.Leave(rank)
	if w.G > 1 {
		w.Replicas[rank/w.G].Leave(rank % w.G)
		w.Cross[rank%w.G].Leave(rank / w.G)
	}
}
