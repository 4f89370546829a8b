package mpi

import "unsafe"

// maxChunkBytes bounds what one MPI call moves. MPI counts are C ints, so a
// buffer past 2^31 elements cannot be named in one call, and some transports
// already misbehave past 2^31 bytes; larger buffers go in pieces of 1 GiB.
// A variable so that tests can make the pieces small.
var maxChunkBytes = 1 << 30

// chunked calls f on consecutive pieces of a buffer of n elements of
// elemSize bytes at p: each piece's address and element count. Every rank
// cuts the same n the same way, so the pieces match across ranks.
func chunked(p unsafe.Pointer, n, elemSize int, f func(p unsafe.Pointer, n int) error) error {
	per := max(maxChunkBytes/elemSize, 1)
	for off := 0; off < n; off += per {
		if err := f(unsafe.Add(p, off*elemSize), min(per, n-off)); err != nil {
			return err
		}
	}
	return nil
}

// elemSize is the size in bytes of one element of d.
func elemSize(d Datatype) int {
	if d == Float64 {
		return 8
	}
	return 4
}
