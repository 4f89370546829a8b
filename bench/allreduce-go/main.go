// Command allreduce-go is the Go side of `make bench-allreduce`: the same
// in-place float32 allreduce as bench/allreduce-c, through hdet's mpi binding,
// timed the same way. Usage: allreduce-go REPS SIZE...
//
// Each repetition also times the same calls made from C inside this process
// (cloop below), the two in alternating order, so the binding's own cost is
// measured against a reference that shares the process, the buffer and the
// machine's load of that moment. Per size it prints "SIZE SECONDS" (the
// binding, as bench/allreduce-c prints its own) and "cloop SIZE SECONDS P25
// MEDIAN P75": the C loop's median and the quartiles of the per-repetition
// ratio binding / C loop. Past 16 MiB it times a fifth of REPS, at least 3.
package main

/*
#cgo pkg-config: ompi
#include <mpi.h>

// cloop is the timed loop of bench/allreduce-c, made from one cgo call.
static double cloop(float *buf, int n, long iters) {
	double t0 = MPI_Wtime();
	for (long i = 0; i < iters; i++)
		MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
	return MPI_Wtime() - t0;
}
*/
import "C"

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/hdet-dev/hdet/mpi"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "allreduce-go:", err)
		mpi.Abort(1)
	}
}

func run(args []string) error {
	if len(args) < 2 {
		return fmt.Errorf("usage: allreduce-go REPS SIZE [SIZE ...]")
	}
	reps, err := strconv.Atoi(args[0])
	if err != nil || reps < 1 {
		return fmt.Errorf("REPS must be a positive integer, got %q", args[0])
	}
	var sizes []int
	for _, a := range args[1:] {
		n, err := strconv.Atoi(a)
		if err != nil || n < 1 {
			return fmt.Errorf("SIZE must be a positive integer, got %q", a)
		}
		sizes = append(sizes, n)
	}
	if err := mpi.Init(); err != nil {
		return err
	}
	w := mpi.World()
	for _, n := range sizes {
		if err := size(w, n, reps); err != nil {
			return err
		}
	}
	return mpi.Finalize()
}

// size times n floats as bench/allreduce-c does (iterations per repetition,
// warm-up, the barrier, the slowest rank's time, the median) and the C loop
// beside it.
func size(w *mpi.Comm, n, reps int) error {
	iters := min(max(2000000/n, 1), 200)
	if n > 1<<22 { // past 16 MiB, as bench/allreduce-c
		reps = max(reps/5, 3)
	}
	buf := make([]float32, n)
	for i := range buf {
		buf[i] = 1
	}
	loop := func() error {
		for range iters {
			if err := w.AllreduceFloat32(buf, mpi.Sum); err != nil {
				return err
			}
		}
		return nil
	}
	if err := loop(); err != nil { // warm-up
		return err
	}
	g, c, ratio := make([]float64, reps), make([]float64, reps), make([]float64, reps)
	for r := range reps {
		t := []float64{0, 0}
		for k := range 2 {
			if err := w.Barrier(); err != nil {
				return err
			}
			if (r+k)%2 == 0 {
				t0 := time.Now()
				if err := loop(); err != nil {
					return err
				}
				t[0] = time.Since(t0).Seconds() / float64(iters)
			} else {
				t[1] = float64(C.cloop((*C.float)(&buf[0]), C.int(n), C.long(iters))) / float64(iters)
			}
		}
		if err := w.AllreduceFloat64(t, mpi.Max); err != nil {
			return err
		}
		g[r], c[r], ratio[r] = t[0], t[1], t[0]/t[1]
	}
	if w.Rank() == 0 {
		fmt.Printf("%d %.9g\n", n, quantile(g, 0.5))
		fmt.Printf("cloop %d %.9g %.4f %.4f %.4f\n", n, quantile(c, 0.5), quantile(ratio, 0.25), quantile(ratio, 0.5), quantile(ratio, 0.75))
	}
	return nil
}

// quantile is the element at q of the sorted values (reps/2 for the median,
// as bench/allreduce-c takes it).
func quantile(v []float64, q float64) float64 {
	s := slices.Sorted(slices.Values(v))
	return s[int(q*float64(len(s)))]
}
