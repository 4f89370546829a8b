package mpi_test

import (
	"fmt"
	"log"

	"github.com/hdet-dev/hdet/mpi"
)

// A program's whole life with MPI: Init once, collectives on the world, and
// Finalize before exiting (Abort instead ends every rank when one cannot go
// on). Compiled but not run: MPI starts once per process, and this test
// binary's TestMain has already started it (ExampleComm_AllreduceFloat32
// runs).
func Example() {
	if err := mpi.Init(); err != nil {
		log.Fatal(err)
	}
	w := mpi.World()
	params := []float32{float32(w.Rank())}
	if err := w.AllreduceFloat32(params, mpi.Sum); err != nil {
		mpi.Abort(1)
	}
	fmt.Printf("rank %d of %d: sum of ranks %v\n", w.Rank(), w.Size(), params[0])
	if err := mpi.Finalize(); err != nil {
		log.Fatal(err)
	}
}

// Without mpirun the process is a world of one rank, where an allreduce
// leaves the buffer as it was (MPI is already initialised here by the test
// binary's TestMain; a program calls mpi.Init first).
func ExampleComm_AllreduceFloat32() {
	w := mpi.World()
	params := []float32{0.5, -2}
	if err := w.AllreduceFloat32(params, mpi.Sum); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("rank %d of %d: %v\n", w.Rank(), w.Size(), params)
	// Output: rank 0 of 1: [0.5 -2]
}
