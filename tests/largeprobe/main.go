// Command largeprobe moves a parameter buffer past 2 GiB through hdet's
// converge allreduce (the host path) and through a checkpoint written and
// read back, under mpirun: each rank prints one line saying what it checked.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime/debug"

	"github.com/hdet-dev/hdet/device"
	"github.com/hdet-dev/hdet/internal/checkpoint"
	"github.com/hdet-dev/hdet/mpi"
)

// value is what rank puts at i; every sum over a few ranks is exact.
func value(rank, i int) float32 { return float32(rank+1) + float32(i%7) }

func main() {
	n := flag.Int("n", 1<<29+1<<20, "float32 elements (the default is 2 GiB + 4 MiB)")
	dir := flag.String("dir", "", "checkpoint directory (rank 0 writes there)")
	flag.Parse()
	if err := run(*n, *dir); err != nil {
		fmt.Fprintln(os.Stderr, "largeprobe:", err)
		mpi.Abort(1)
	}
}

func run(n int, dir string) error {
	if err := mpi.Init(); err != nil {
		return err
	}
	w := mpi.World()
	buf := make([]float32, n)
	for i := range buf {
		buf[i] = value(w.Rank(), i)
	}
	a, err := device.NewAllreducer(device.PathHost, w, nil)
	if err != nil {
		return err
	}
	if err := a.Allreduce(device.HostBuffer(buf), mpi.Sum); err != nil {
		return fmt.Errorf("converge allreduce of %d bytes: %w", 4*n, err)
	}
	if err := check(buf, n, w.Size()); err != nil {
		return fmt.Errorf("after the allreduce: %w", err)
	}
	fmt.Printf("rank %d: converge allreduce of %d bytes exact\n", w.Rank(), 4*n)
	if w.Rank() == 0 {
		if _, err := checkpoint.Write(dir, &checkpoint.State{Step: 1, Ranks: w.Size(), ParamCount: n, Buffer: buf}, 1); err != nil {
			return fmt.Errorf("checkpoint write: %w", err)
		}
	}
	buf = nil
	debug.FreeOSMemory() // the ranks share the machine's memory
	if w.Rank() == 0 {
		ck, path, _, err := checkpoint.Latest(dir)
		if err != nil {
			return fmt.Errorf("checkpoint read: %w", err)
		}
		if err := check(ck.Buffer, n, w.Size()); err != nil {
			return fmt.Errorf("checkpoint %s: %w", path, err)
		}
		st, _ := os.Stat(path)
		fmt.Printf("rank 0: checkpoint of %d bytes read back exact\n", st.Size())
	}
	if err := w.Barrier(); err != nil {
		return err
	}
	return mpi.Finalize()
}

// check compares buf with the sum over size ranks of value.
func check(buf []float32, n, size int) error {
	if len(buf) != n {
		return fmt.Errorf("%d elements, want %d", len(buf), n)
	}
	for i, v := range buf {
		var want float32
		for r := range size {
			want += value(r, i)
		}
		if v != want {
			return fmt.Errorf("element %d is %g, want %g", i, v, want)
		}
	}
	return nil
}
