package checkpoint

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
)

// WriteModel saves parameters as little-endian float32 (model.bin), atomically.
func WriteModel(path string, p []float32) error {
	b := make([]byte, 0, 4*len(p))
	for _, v := range p {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return writeAtomic(path, b)
}

// ReadModel loads a model.bin written by WriteModel, which must hold n parameters.
func ReadModel(path string, n int) ([]float32, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b) != 4*n {
		return nil, fmt.Errorf("%s holds %d bytes, this workload's %d parameters need %d", path, len(b), n, 4*n)
	}
	p := make([]float32, n)
	for i := range p {
		p[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return p, nil
}
