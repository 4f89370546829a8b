package checkpoint

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"

	"github.com/hdet-dev/hdet/internal/atomicfile"
	"github.com/hdet-dev/hdet/internal/binread"
)

// WriteModel saves parameters as little-endian float32 (model.bin), atomically.
func WriteModel(path string, p []float32) error {
	b := make([]byte, 0, 4*len(p))
	for _, v := range p {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return atomicfile.Write(path, b)
}

// ReadModel loads a model.bin written by WriteModel, which must hold n parameters.
func ReadModel(path string, n int) ([]float32, error) {
	// The size first: a huge file is refused without reading it.
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || fi.Size() != 4*int64(n) {
		return nil, fmt.Errorf("%s holds %d bytes, this workload's %d parameters need %d", path, fi.Size(), n, 4*n)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	r := binread.New(b, nil)
	p := r.Float32s("parameters", n)
	if err := r.End(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}
