// Command allreduce-go is the Go side of `make bench-allreduce`: the same
// in-place float32 allreduce as bench/allreduce-c, through hdet's mpi binding,
// timed the same way. Usage: allreduce-go REPS SIZE...
package main

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
	if err := mpi.Init(); err != nil {
		return err
	}
	w := mpi.World()
	for _, a := range args[1:] {
		n, err := strconv.Atoi(a)
		if err != nil || n < 1 {
			return fmt.Errorf("SIZE must be a positive integer, got %q", a)
		}
		iters := min(max(2000000/n, 1), 200)
		buf := make([]float32, n)
		for i := range buf {
			buf[i] = 1
		}
		for range iters { // warm-up
			if err := w.AllreduceFloat32(buf, mpi.Sum); err != nil {
				return err
			}
		}
		t := make([]float64, reps)
		for r := range t {
			if err := w.Barrier(); err != nil {
				return err
			}
			t0 := time.Now()
			for range iters {
				if err := w.AllreduceFloat32(buf, mpi.Sum); err != nil {
					return err
				}
			}
			dt := []float64{time.Since(t0).Seconds() / float64(iters)}
			if err := w.AllreduceFloat64(dt, mpi.Max); err != nil {
				return err
			}
			t[r] = dt[0]
		}
		slices.Sort(t)
		if w.Rank() == 0 {
			fmt.Printf("%d %.9g\n", n, t[reps/2])
		}
	}
	return mpi.Finalize()
}
