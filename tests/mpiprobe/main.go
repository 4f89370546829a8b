// Command mpiprobe exercises the mpi binding under mpirun for the end-to-end
// tests: each rank runs every check and prints one JSON line of results.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/hdet-dev/hdet/mpi"
)

type result struct {
	Rank, Size, LocalRank int
	Sizes                 []int
	F32, F64              []bool // exact sums at each size
	MaxMin                bool
	Bcast                 bool
	Allgather             bool
	BadRootErr            string
	CUDAAware             bool
	// Split: the ranks split by rank%2 into two communicators; this rank's
	// rank and size there and the sum of world ranks in its half.
	SplitRank, SplitSize int
	SplitSum             float64
}

// value is small enough that every sum over ranks is exact in float32.
func value(rank, i int) float64 { return float64((i%1021)*(rank+1)) + 0.5 }

func main() {
	if err := mpi.Init(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	w := mpi.World()
	r := result{Rank: w.Rank(), Size: w.Size(), LocalRank: w.LocalRank(), CUDAAware: mpi.CUDAAware()}
	n := w.Size()
	// sum over ranks of value(rank, i) = (i%1021)*n(n+1)/2 + n/2
	want := func(i int) float64 { return float64((i%1021)*n*(n+1)/2) + 0.5*float64(n) }
	r.Sizes = []int{1, 1000, 1000003, 16777216}
	for _, size := range r.Sizes {
		f32 := make([]float32, size)
		for i := range f32 {
			f32[i] = float32(value(w.Rank(), i))
		}
		ok := w.AllreduceFloat32(f32, mpi.Sum) == nil
		for i := range f32 {
			ok = ok && float64(f32[i]) == want(i)
		}
		r.F32 = append(r.F32, ok)
		f64 := make([]float64, size)
		for i := range f64 {
			f64[i] = value(w.Rank(), i)
		}
		ok = w.AllreduceFloat64(f64, mpi.Sum) == nil
		for i := range f64 {
			ok = ok && f64[i] == want(i)
		}
		r.F64 = append(r.F64, ok)
	}
	mm := []float64{float64(w.Rank()), float64(w.Rank())}
	r.MaxMin = w.AllreduceFloat64(mm[:1], mpi.Max) == nil && w.AllreduceFloat64(mm[1:], mpi.Min) == nil &&
		mm[0] == float64(n-1) && mm[1] == 0

	buf := make([]byte, 1<<20)
	if w.Rank() == 0 {
		for i := range buf {
			buf[i] = byte(i*7 + 3)
		}
	}
	r.Bcast = w.Bcast(buf, 0) == nil
	for i := range buf {
		r.Bcast = r.Bcast && buf[i] == byte(i*7+3)
	}

	all := make([]float64, 2*n)
	r.Allgather = w.AllgatherFloat64([]float64{float64(w.Rank()), -float64(w.Rank())}, all) == nil
	for k := 0; k < n; k++ {
		r.Allgather = r.Allgather && all[2*k] == float64(k) && all[2*k+1] == -float64(k)
	}

	if half, err := w.Split(w.Rank()%2, w.Rank()); err == nil {
		sum := []float64{float64(w.Rank())}
		if half.AllreduceFloat64(sum, mpi.Sum) == nil {
			r.SplitRank, r.SplitSize, r.SplitSum = half.Rank(), half.Size(), sum[0]
		}
		_ = half.Free()
	}

	var merr *mpi.Error
	if err := w.Bcast(buf[:4], n+5); errors.As(err, &merr) {
		r.BadRootErr = merr.Error()
	}
	if err := w.Barrier(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	b, _ := json.Marshal(r)
	fmt.Println(string(b))
	if err := mpi.Finalize(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
