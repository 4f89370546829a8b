package mnist

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// ErrNoData is returned by Load when the MNIST files are not there.
var ErrNoData = errors.New("MNIST data not found (run `make data` to fetch it)")

// ErrBadData marks a malformed idx file or an inconsistent data set.
var ErrBadData = errors.New("bad data")

// Dataset is a labelled set of images kept as raw bytes (a quarter of the
// memory of float32); batches are converted when they are drawn.
type Dataset struct {
	Images  []uint8 // N rows of Dim pixels, row-major
	Labels  []uint8 // N labels in [0, Classes)
	N       int
	Dim     int
	Classes int
}

// Data is a training set and a test set.
type Data struct {
	Train, Test *Dataset
}

// validate checks the shape invariants; name says which set in the error.
func (d *Dataset) validate(name string) error {
	switch {
	case d.N < 1 || d.Dim < 1 || d.Classes < 2:
		return fmt.Errorf("%w: %s: N=%d Dim=%d Classes=%d (need N>=1, Dim>=1, Classes>=2)", ErrBadData, name, d.N, d.Dim, d.Classes)
	case len(d.Images) != d.N*d.Dim || len(d.Labels) != d.N:
		return fmt.Errorf("%w: %s: %d image bytes and %d labels for N=%d Dim=%d", ErrBadData, name, len(d.Images), len(d.Labels), d.N, d.Dim)
	}
	for i, l := range d.Labels {
		if int(l) >= d.Classes {
			return fmt.Errorf("%w: %s: label %d of example %d is not below Classes=%d", ErrBadData, name, l, i, d.Classes)
		}
	}
	return nil
}

// Load reads MNIST's four idx files (gzipped or not) from dir, the folder
// scripts/mnist-data.sh fills.
func Load(dir string) (*Data, error) {
	train, err := loadSet(dir, "train")
	if err != nil {
		return nil, err
	}
	test, err := loadSet(dir, "t10k")
	if err != nil {
		return nil, err
	}
	return &Data{Train: train, Test: test}, nil
}

func loadSet(dir, prefix string) (*Dataset, error) {
	images, dims, err := readIdx(dir, prefix+"-images-idx3-ubyte", 3)
	if err != nil {
		return nil, err
	}
	labels, ldims, err := readIdx(dir, prefix+"-labels-idx1-ubyte", 1)
	if err != nil {
		return nil, err
	}
	d := &Dataset{Images: images, Labels: labels, N: dims[0], Dim: dims[1] * dims[2], Classes: 10}
	if ldims[0] != d.N {
		return nil, fmt.Errorf("%w: %s: %d images but %d labels", ErrBadData, prefix, d.N, ldims[0])
	}
	if err := d.validate(prefix); err != nil {
		return nil, err
	}
	return d, nil
}

// readIdx reads an idx file of unsigned bytes with rank dimensions, trying
// name.gz first (as the GoMNIST module ships them), then name.
func readIdx(dir, name string, rank int) ([]uint8, []int, error) {
	path := filepath.Join(dir, name+".gz")
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		path = filepath.Join(dir, name)
		f, err = os.Open(path)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("%w: no %s(.gz) in %s", ErrNoData, name, dir)
	}
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	var r io.Reader = bufio.NewReader(f)
	if filepath.Ext(path) == ".gz" {
		gz, err := gzip.NewReader(r)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %s: %w", ErrBadData, path, err)
		}
		defer gz.Close()
		r = gz
	}
	// Header: two zero bytes, type 0x08 (unsigned byte), rank; then rank
	// big-endian uint32 sizes.
	hdr := make([]byte, 4+4*rank)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, nil, fmt.Errorf("%w: %s: header: %w", ErrBadData, path, err)
	}
	if hdr[0] != 0 || hdr[1] != 0 || hdr[2] != 0x08 || int(hdr[3]) != rank {
		return nil, nil, fmt.Errorf("%w: %s: magic % x, want 00 00 08 %02x", ErrBadData, path, hdr[:4], rank)
	}
	const maxSize = 1 << 30 // refuse absurd headers rather than allocate them
	dims := make([]int, rank)
	size := 1
	for i := range dims {
		dims[i] = int(binary.BigEndian.Uint32(hdr[4+4*i:]))
		if dims[i] > 0 && size > maxSize/dims[i] {
			return nil, nil, fmt.Errorf("%w: %s: dimensions too large", ErrBadData, path)
		}
		size *= dims[i]
	}
	buf := make([]uint8, size)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, nil, fmt.Errorf("%w: %s: body: %w", ErrBadData, path, err)
	}
	return buf, dims, nil
}
