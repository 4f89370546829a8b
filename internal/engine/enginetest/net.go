// Package enginetest is an in-process world of ranks for testing the
// engine's multi-rank paths without mpirun, after etcd raft's rafttest: a
// Net is one communicator of N ranks, each rank's handle a Comm (an
// engine.Comm and an engine.Converger), and a World runs one goroutine per
// rank with the world's Net and, for replica groups, the replicas' and the
// cross-replica Nets.
//
// A collective is a rendezvous: the k-th collective each rank calls on a
// Net joins that Net's round k, and the last rank to arrive completes the
// round for all. Reductions run in rank order (rank 0's buffer, then rank
// 1's, ...), whatever order the goroutines arrived in, so results are
// bit-identical from run to run, and every rank receives the same bits.
//
// Nothing hangs: a round whose ranks called different collectives fails
// on every rank (ErrMismatch); a rank that returned (World.Run) fails the
// rounds it will never join (ErrRankGone); a round not complete after
// Net.Timeout fails (ErrTimeout). Net.Fail injects failures: the chosen
// rank's call returns the injected error and its peers in the round get
// ErrPeerFailed, as survivors of a failed rank do under MPI's ULFM.
//
// The package does not import engine, so engine's own (internal) tests can
// use it; engine's tests check that Comm satisfies engine.Comm and
// engine.Converger.
package enginetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hdet-dev/hdet/mpi/reduce"
)

// Kind is a collective's kind.
type Kind string

// The collectives a Comm offers.
const (
	AllreduceFloat32 Kind = "AllreduceFloat32"
	AllreduceFloat64 Kind = "AllreduceFloat64"
	AllgatherFloat64 Kind = "AllgatherFloat64"
	AllgathervF32    Kind = "AllgathervFloat32" // Comm.AllgathervFloat32, in place
	BcastMessage     Kind = "BcastMessage"
	Converge         Kind = "Converge" // Comm.AllreduceSum, the engine's converge
)

// Errors of a collective that did not complete.
var (
	ErrPeerFailed = errors.New("a peer's call of the collective failed")
	ErrRankGone   = errors.New("a rank left before joining the collective")
	ErrMismatch   = errors.New("the ranks called different collectives")
	ErrTimeout    = errors.New("the collective timed out")
)

// DefaultTimeout is how long a round waits for its ranks before it fails
// with ErrTimeout: far longer than any unit test's window, far shorter
// than go test's own timeout.
const DefaultTimeout = 20 * time.Second

// Call is one rank's call of a collective, as Net.Fail's hook sees it.
type Call struct {
	Net     string // the Net's name: "world", "replica 1", "cross 0"
	Rank    int    // in that Net
	Seq     int    // the rank's collectives on the Net before this one: its round
	KindSeq int    // the rank's collectives of this Kind on the Net before this one
	Kind    Kind
	Op      reduce.Op // the allreduces' operation (Sum for Converge)
	Len     int       // elements sent (bytes for BcastMessage, at the root only)
	Root    int       // BcastMessage's
}

func (c Call) String() string {
	return fmt.Sprintf("%s rank %d: %s #%d (op %v, %d elements, root %d)", c.Net, c.Rank, c.Kind, c.Seq, c.Op, c.Len, c.Root)
}

// Net is one communicator of Size ranks.
type Net struct {
	name    string
	size    int
	Timeout time.Duration // DefaultTimeout unless changed before the first call

	mu      sync.Mutex
	seq     []int // per rank
	kindSeq []map[Kind]int
	rounds  map[int]*round
	gone    []bool
	fail    func(Call) error
	counts  map[Kind]int
}

// NewNet returns a communicator of size ranks named name in messages.
func NewNet(name string, size int) *Net {
	n := &Net{name: name, size: size, Timeout: DefaultTimeout, seq: make([]int, size), kindSeq: make([]map[Kind]int, size),
		rounds: map[int]*round{}, gone: make([]bool, size), counts: map[Kind]int{}}
	for r := range n.kindSeq {
		n.kindSeq[r] = map[Kind]int{}
	}
	return n
}

// Comm is rank's handle on the Net. A rank calls its collectives from one
// goroutine, as MPI ranks call a communicator from one thread.
func (n *Net) Comm(rank int) Comm {
	if rank < 0 || rank >= n.size {
		panic(fmt.Sprintf("enginetest: rank %d of a %d-rank Net", rank, n.size))
	}
	return Comm{n: n, rank: rank}
}

// Size is the number of ranks.
func (n *Net) Size() int { return n.size }

// Fail sets the failure hook: a call for which it returns an error fails
// with that error on its rank, and its peers in the round fail with
// ErrPeerFailed. It runs under the Net's lock, in each rank's call order,
// so a hook with state (a count) needs no locking of its own.
func (n *Net) Fail(hook func(Call) error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.fail = hook
}

// Count is how many rounds of kind completed without an error.
func (n *Net) Count(kind Kind) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.counts[kind]
}

// Leave marks rank as gone (it returned): every round it has not joined,
// and every later one, fails on the others with ErrRankGone.
func (n *Net) Leave(rank int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.gone[rank] = true
	for _, r := range n.rounds {
		if !r.finished && r.parts[rank] == nil {
			n.abort(r, fmt.Errorf("%w: %s rank %d left after %d collectives, before round %d", ErrRankGone, n.name, rank, n.seq[rank], r.seq))
		}
	}
}

// part is one rank's contribution to a round.
type part struct {
	call Call
	f32  []float32
	f64  []float64
	msg  []byte
	n    int   // AllgathervF32: this rank's part's length
	err  error // the call failed on this rank (injected, or bad arguments)
}

// round is one collective across the Net's ranks.
type round struct {
	seq      int
	parts    []*part // by rank; nil until the rank arrives
	arrived  int
	finished bool
	done     chan struct{}
	err      error   // every rank's, when the round failed as a whole
	errs     []error // per rank, when some rank's call failed
	f32      []float32
	f64      []float64
	msg      []byte
}

// join adds p to its round and waits for the round to finish.
func (n *Net) join(p *part) (*round, error) {
	n.mu.Lock()
	rank := p.call.Rank
	p.call.Net, p.call.Seq, p.call.KindSeq = n.name, n.seq[rank], n.kindSeq[rank][p.call.Kind]
	n.seq[rank]++
	n.kindSeq[rank][p.call.Kind]++
	if p.err == nil && n.fail != nil {
		p.err = n.fail(p.call)
	}
	r := n.rounds[p.call.Seq]
	if r == nil {
		r = &round{seq: p.call.Seq, parts: make([]*part, n.size), done: make(chan struct{})}
		n.rounds[r.seq] = r
	}
	if !r.finished {
		r.parts[rank] = p
		r.arrived++
		n.progress(r)
	}
	n.mu.Unlock()
	t := time.NewTimer(n.Timeout)
	defer t.Stop()
	select {
	case <-r.done:
	case <-t.C:
		n.mu.Lock()
		if !r.finished {
			n.abort(r, fmt.Errorf("%w after %s: %s waits for ranks %v", ErrTimeout, n.Timeout, p.call, r.missing()))
		}
		n.mu.Unlock()
	}
	return r, r.errFor(rank)
}

// progress finishes r when every rank arrived, or fails it when a rank
// that has not is gone. n.mu is held.
func (n *Net) progress(r *round) {
	if r.arrived == n.size {
		n.complete(r)
		return
	}
	for _, rank := range r.missing() {
		if n.gone[rank] {
			n.abort(r, fmt.Errorf("%w: %s rank %d left after %d collectives, before round %d", ErrRankGone, n.name, rank, n.seq[rank], r.seq))
			return
		}
	}
}

func (r *round) missing() []int {
	var out []int
	for rank, p := range r.parts {
		if p == nil {
			out = append(out, rank)
		}
	}
	return out
}

func (r *round) errFor(rank int) error {
	if r.err != nil {
		return r.err
	}
	if r.errs != nil {
		return r.errs[rank]
	}
	return nil
}

// abort fails the round on every rank. n.mu is held.
func (n *Net) abort(r *round, err error) {
	r.err = err
	n.finish(r)
}

func (n *Net) finish(r *round) {
	r.finished = true
	close(r.done)
}

// complete finishes a round every rank joined: a mismatch or a failed call
// fails it, else the result is computed in rank order. n.mu is held.
func (n *Net) complete(r *round) {
	if err := r.mismatch(); err != nil {
		n.abort(r, err)
		return
	}
	if r.failed() {
		n.finish(r)
		return
	}
	first := r.parts[0].call
	switch first.Kind {
	case AllreduceFloat32, Converge:
		r.f32 = reduce32(r.parts, first.Op)
	case AllreduceFloat64:
		r.f64 = reduce64(r.parts, first.Op)
	case AllgatherFloat64:
		for _, p := range r.parts {
			r.f64 = append(r.f64, p.f64...)
		}
	case AllgathervF32:
		for _, p := range r.parts {
			r.f32 = append(r.f32, p.f32[len(r.f32):len(r.f32)+p.n]...)
		}
	case BcastMessage:
		r.msg = r.parts[first.Root].msg
	}
	n.counts[first.Kind]++
	n.finish(r)
}

// mismatch reports ranks that called different collectives in one round.
func (r *round) mismatch() error {
	a := r.parts[0].call
	for _, p := range r.parts[1:] {
		b := p.call
		lenDiffers := a.Len != b.Len && a.Kind != BcastMessage // only the root's message has a length
		if a.Kind != b.Kind || a.Op != b.Op || a.Root != b.Root || lenDiffers {
			return fmt.Errorf("%w in round %d: %s; %s", ErrMismatch, r.seq, a, b)
		}
	}
	return nil
}

// failed sets the per-rank errors when some rank's call failed: its own
// error, and ErrPeerFailed naming it for the others.
func (r *round) failed() bool {
	var bad *part
	for _, p := range r.parts {
		if p.err != nil {
			bad = p
			break
		}
	}
	if bad == nil {
		return false
	}
	r.errs = make([]error, len(r.parts))
	for rank, p := range r.parts {
		if p.err != nil {
			r.errs[rank] = fmt.Errorf("%s: %w", p.call, p.err)
		} else {
			r.errs[rank] = fmt.Errorf("%w: %s: %v", ErrPeerFailed, bad.call, bad.err)
		}
	}
	return true
}

func reduce32(parts []*part, op reduce.Op) []float32 {
	out := slices.Clone(parts[0].f32)
	for _, p := range parts[1:] {
		for i, v := range p.f32 {
			out[i] = apply(out[i], v, op)
		}
	}
	return out
}

func reduce64(parts []*part, op reduce.Op) []float64 {
	out := slices.Clone(parts[0].f64)
	for _, p := range parts[1:] {
		for i, v := range p.f64 {
			out[i] = apply(out[i], v, op)
		}
	}
	return out
}

// apply is one step of a reduction; max and min are Go's (NaN wins).
func apply[T float32 | float64](acc, v T, op reduce.Op) T {
	switch op {
	case reduce.Max:
		return max(acc, v)
	case reduce.Min:
		return min(acc, v)
	}
	return acc + v
}
