package engine

import (
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/hdet-dev/hdet/internal/plan"
)

// rankReport is what a rank tells every other after its fan-out, in one
// Allgather: its window loss, first step's loss and probe loss, its health,
// whether a signal asked it to stop, (gradients mode) a fingerprint of
// its parameters, and the squared norm of the part of its parameters it
// owns (loop.owned: a replica's ranks' parts add up to the replica's).
type rankReport struct {
	loss, first, probe float64
	healthy, stop      bool
	print              uint64 // 0 when not taken
	sq                 float64
}

// reportLen is the float64s a rankReport packs into. The fingerprint
// travels as two 32-bit halves, which float64 holds exactly.
const reportLen = 7

func (r rankReport) pack(dst []float64) {
	flag := 0.0
	if r.healthy {
		flag = 1
	}
	if r.stop {
		flag += 2
	}
	dst[0], dst[1], dst[2] = r.loss, flag, r.probe
	dst[3], dst[4] = float64(r.print>>32), float64(r.print&math.MaxUint32)
	dst[5], dst[6] = r.first, r.sq
}

func unpackReport(src []float64) rankReport {
	f := int(src[1])
	return rankReport{loss: src[0], first: src[5], probe: src[2], healthy: f&1 == 1, stop: f&2 == 2,
		print: uint64(src[3])<<32 | uint64(src[4]), sq: src[6]}
}

// perReplica turns the world's reports into one per replica of g
// consecutive ranks: its ranks' mean loss and probe, healthy only when
// all are, stopping when any asks, its parameters' squared norm the sum of
// its ranks' parts. The fingerprint is not carried over.
func perReplica(all []rankReport, g int) []rankReport {
	if g <= 1 {
		return all
	}
	out := make([]rankReport, len(all)/g)
	for r := range out {
		rep := rankReport{healthy: true}
		for _, t := range all[r*g : (r+1)*g] {
			rep.loss, rep.first, rep.probe = rep.loss+t.loss, rep.first+t.first, rep.probe+t.probe
			rep.healthy, rep.stop = rep.healthy && t.healthy, rep.stop || t.stop
			rep.sq += t.sq
		}
		rep.loss, rep.first, rep.probe = rep.loss/float64(g), rep.first/float64(g), rep.probe/float64(g)
		out[r] = rep
	}
	return out
}

// identical reports whether every rank is healthy and took the same
// nonzero fingerprint: then every rank holds the same parameters.
func identical(all []rankReport) bool {
	for _, r := range all {
		if !r.healthy || r.print == 0 || r.print != all[0].print {
			return false
		}
	}
	return true
}

// fingerprint hashes a parameter buffer cheaply (a multiply-xor pass over
// its 64-bit words): enough to tell whether the ranks' copies differ at
// all, for a small fraction of an allreduce's cost. Never 0.
func fingerprint(b []float32) uint64 {
	h := uint64(0x9e3779b97f4a7c15)
	if n := len(b) / 2; n > 0 {
		for _, w := range unsafe.Slice((*uint64)(unsafe.Pointer(&b[0])), n) {
			h = (h ^ w) * 0x100000001b3
		}
	}
	if len(b)%2 == 1 {
		h = (h ^ uint64(math.Float32bits(b[len(b)-1]))) * 0x100000001b3
	}
	return h | 1
}

// ErrTrainedAlike: replicas that hdet planned different values trained
// identically, so the values never reached their training.
var ErrTrainedAlike = errors.New("the replicas trained identically under different planned values")

// trainedAlike returns ErrTrainedAlike, for window k, when every replica is
// healthy and reported the same window loss to the last bit although the
// plan spread some hyperparameter: the planned values never reached the
// training (a worker script whose optimizer is not the attached one, or
// ignores its learning rate), and a search would learn from noise. Every
// rank reaches the same verdict from the same reports.
func trainedAlike(k int, spread bool, reps []rankReport) error {
	if !spread || !allHealthyEqual(reps, func(r rankReport) float64 { return r.loss }) {
		return nil
	}
	return fmt.Errorf("%w: in window %d every replica reported the window loss %v to the last bit; make sure the optimizer that steps is the one given to hdet.attach and that it uses its param groups' learning rates", ErrTrainedAlike, k, reps[0].loss)
}

// sameBatches reports whether, in local mode, every replica started the
// window on the same parameters and took the same first step to the last
// bit: then they train on the same data and the ensemble is one replica.
func sameBatches(reps []rankReport) bool {
	return allHealthyEqual(reps, func(r rankReport) float64 { return r.first })
}

// sameDataAdvice is how a worker script gives each replica its own data
// with replicas of g ranks: under replica groups RANK is the position in
// the replica, so a DistributedSampler or a generator seeded by RANK gives
// every replica the same batches.
func sameDataAdvice(g int) string {
	if g <= 1 {
		return "a DistributedSampler, or a data order seeded with hdet.rank()"
	}
	return "with replica groups RANK is a rank's position in its replica, so the ranks at one position of every replica share it: seed the data order with hdet.rank() (the world rank), or add the replica's index (hdet.rank() // G) to a DistributedSampler's seed"
}

// allHealthyEqual reports whether there are several replicas, all healthy,
// whose value of field is the same to the last bit.
func allHealthyEqual(reps []rankReport, field func(rankReport) float64) bool {
	if len(reps) < 2 {
		return false
	}
	for _, r := range reps {
		if !r.healthy || field(r) != field(reps[0]) {
			return false
		}
	}
	return true
}

// checksData reports whether window w's first steps may be read for the
// same-data warning: not in a search pass whose replicas share their
// batches on purpose (plan.Plan.Search: the main pass starts again from
// step 0), nor in the first window of a first pass, whose first step a
// worker script draws before it hears whether the run has a search pass
// (it gives each replica its own data from the next step on); a script
// that shares its batches shows it in the next window.
func (l *loop) checksData(w *window) bool {
	return !w.plan.Search && (l.pass != plan.PassSearch || w.index > 0)
}
