package mnist

import (
	"compress/gzip"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/engine"
	"github.com/hdet-dev/hdet/internal/testenv"
)

// writeIdx writes an idx file of bytes with the given dimensions, gzipped
// when name ends in .gz.
func writeIdx(t *testing.T, path string, dims []int, body []byte) {
	t.Helper()
	hdr := []byte{0, 0, 8, byte(len(dims))}
	for _, d := range dims {
		hdr = binary.BigEndian.AppendUint32(hdr, uint32(d))
	}
	data := append(hdr, body...)
	if filepath.Ext(path) == ".gz" {
		f, err := os.Create(path)
		require.NoError(t, err)
		gz := gzip.NewWriter(f)
		_, err = gz.Write(data)
		require.NoError(t, err)
		require.NoError(t, gz.Close())
		require.NoError(t, f.Close())
		return
	}
	require.NoError(t, os.WriteFile(path, data, 0o644))
}

func TestLoadReadsIdxFilesGzippedOrNot(t *testing.T) {
	dir := t.TempDir()
	img := []byte{1, 2, 3, 4, 5, 6, 7, 8} // two 2×2 images
	writeIdx(t, filepath.Join(dir, "train-images-idx3-ubyte.gz"), []int{2, 2, 2}, img)
	writeIdx(t, filepath.Join(dir, "train-labels-idx1-ubyte.gz"), []int{2}, []byte{3, 9})
	writeIdx(t, filepath.Join(dir, "t10k-images-idx3-ubyte"), []int{1, 2, 2}, img[:4])
	writeIdx(t, filepath.Join(dir, "t10k-labels-idx1-ubyte"), []int{1}, []byte{0})
	d, err := Load(dir)
	require.NoError(t, err)
	require.Equal(t, &Dataset{Images: img, Labels: []byte{3, 9}, N: 2, Dim: 4, Classes: 10}, d.Train)
	require.Equal(t, &Dataset{Images: img[:4], Labels: []byte{0}, N: 1, Dim: 4, Classes: 10}, d.Test)

	// Inconsistent or corrupt files are ErrBadData.
	writeIdx(t, filepath.Join(dir, "t10k-labels-idx1-ubyte"), []int{1}, []byte{10})
	_, err = Load(dir)
	require.ErrorIs(t, err, ErrBadData)
	writeIdx(t, filepath.Join(dir, "t10k-labels-idx1-ubyte"), []int{2}, []byte{0, 1})
	_, err = Load(dir)
	require.ErrorIs(t, err, ErrBadData)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "t10k-labels-idx1-ubyte"), []byte{0, 0, 9, 1, 0, 0, 0, 1, 0}, 0o644))
	_, err = Load(dir)
	require.ErrorIs(t, err, ErrBadData)
	writeIdx(t, filepath.Join(dir, "t10k-labels-idx1-ubyte"), []int{1}, nil) // truncated body
	_, err = Load(dir)
	require.ErrorIs(t, err, ErrBadData)
}

func TestLoadWithoutDataNamesMakeData(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "absent"))
	require.ErrorIs(t, err, ErrNoData)
	require.Contains(t, err.Error(), "make data")
}

func TestRealMNISTReachesNinetyPercent(t *testing.T) {
	if raceEnabled {
		t.Skip("covered without -race; the detector only slows these 400 steps")
	}
	data, err := Load(testenv.NeedMNIST(t))
	require.NoError(t, err)
	require.Equal(t, 60000, data.Train.N)
	require.Equal(t, 10000, data.Test.N)
	require.Equal(t, 784, data.Train.Dim)
	cfg := DefaultConfig()
	cfg.Data = data
	r := newReplica(t, cfg)
	ctx := context.Background()
	res, err := r.TrainWindow(ctx, engine.Window{Start: 0, Steps: 400})
	require.NoError(t, err)
	require.Less(t, mean(res.Losses[380:]), mean(res.Losses[:20])/4)
	loss, acc, err := r.Evaluate(ctx)
	require.NoError(t, err)
	t.Logf("400 steps of 64: test loss %.4f, accuracy %.4f", loss, acc)
	require.Greater(t, acc, 0.9)
}
