// Package reduce names MPI's reduction operations and element types without
// cgo, so the packages that only pass them along (engine, watchdog, device's
// interfaces) build and test without libmpi. Package mpi maps them to MPI's
// handles and re-exports them.
package reduce

import "fmt"

// Op is a reduction operation.
type Op int

// The reductions hdet uses.
const (
	Sum Op = iota
	Max
	Min
)

func (o Op) String() string {
	switch o {
	case Sum:
		return "sum"
	case Max:
		return "max"
	case Min:
		return "min"
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// Valid reports whether o is one of the reductions above.
func (o Op) Valid() bool { return o >= Sum && o <= Min }

// Datatype is an element type for a reduction on raw memory.
type Datatype int

// The element types hdet reduces.
const (
	Float32 Datatype = iota
	Float64
)
