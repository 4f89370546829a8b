package mpi

/*
#include <mpi.h>
static int hdet_comm_errors_return(MPI_Comm c) { return MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN); }
*/
import "C"

// Split is MPI_Comm_split: the ranks passing the same color form a new
// communicator, ordered by key (ties by their rank here). It is the building
// block of replica groups (issue 18: a communicator per replica for the
// per-step gradient allreduce, one of same-position ranks for the converge).
// Errors on the new communicator are returned, like on the world's.
func (c *Comm) Split(color, key int) (*Comm, error) {
	var out C.MPI_Comm
	if err := call("MPI_Comm_split", func() C.int { return C.MPI_Comm_split(c.c, C.int(color), C.int(key), &out) }); err != nil {
		return nil, err
	}
	mu.Lock()
	defer mu.Unlock()
	if err := check("MPI_Comm_set_errhandler", C.hdet_comm_errors_return(out)); err != nil {
		return nil, err
	}
	return newComm(out)
}

// Free releases a communicator made by Split; the world cannot be freed.
func (c *Comm) Free() error {
	if c == World() {
		return nil
	}
	return call("MPI_Comm_free", func() C.int { return C.MPI_Comm_free(&c.c) })
}
