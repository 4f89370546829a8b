package cuda_test

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/hdet-dev/hdet/device/cuda"
)

// A round trip through the first GPU's memory. Compiled but not run: what it
// prints depends on the machine (without a driver, Open returns ErrNoDriver
// and the caller keeps its data on the host).
func Example() {
	ctx, err := cuda.Open(0)
	if errors.Is(err, cuda.ErrNoDriver) {
		fmt.Println("no NVIDIA driver: host buffers")
		return
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ctx.Close()
	src, dst := []float32{1, 2, 3}, make([]float32, 3)
	p, err := ctx.Alloc(4 * len(src))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ctx.Free(p)
	if err := errors.Join(ctx.CopyHtoD(p, unsafe.Pointer(&src[0]), 4*len(src)), ctx.CopyDtoH(unsafe.Pointer(&dst[0]), p, 4*len(dst))); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(dst)
}
