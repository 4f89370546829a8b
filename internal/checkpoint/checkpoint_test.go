package checkpoint

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func sample(step int) *State {
	return &State{Config: []byte("train: {steps: 10}\n"), Step: step, Window: step / 5, Ranks: 4, ParamCount: 3,
		Buffer: []float32{1.5, -2, 3e-9, 0.25, 7}, Controller: []byte{1, 2, 3}}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	s := sample(10)
	got, err := Decode(Encode(s))
	require.NoError(t, err)
	assert.Equal(t, s, got)
}

func TestDecodeRejectsDamage(t *testing.T) {
	b := Encode(sample(10))
	for name, data := range map[string][]byte{
		"empty":     nil,
		"truncated": b[:len(b)-5],
		"flipped":   append(append([]byte{}, b[:20]...), append([]byte{b[20] ^ 1}, b[21:]...)...),
		"not ours":  []byte("hello world, this is not a checkpoint at all......"),
	} {
		_, err := Decode(data)
		assert.ErrorIs(t, err, ErrCorrupt, name)
	}
}

func TestWriteKeepsNewestAndLatestSkipsCorrupt(t *testing.T) {
	dir := t.TempDir()
	for _, step := range []int{5, 10, 15, 20} {
		_, err := Write(dir, sample(step), 3)
		require.NoError(t, err)
	}
	names, err := list(dir)
	require.NoError(t, err)
	assert.Equal(t, []string{fileName(0, 10), fileName(0, 15), fileName(0, 20)}, names)

	// A torn newest checkpoint falls back to the one before.
	newest := filepath.Join(dir, fileName(0, 20))
	data, err := os.ReadFile(newest)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(newest, data[:len(data)/2], 0o644))
	s, path, skipped, err := Latest(dir)
	require.NoError(t, err)
	assert.Equal(t, 15, s.Step)
	assert.Equal(t, filepath.Join(dir, fileName(0, 15)), path)
	require.Len(t, skipped, 1)
	assert.ErrorIs(t, skipped[0].Err, ErrCorrupt)

	_, _, _, err = Latest(t.TempDir())
	assert.ErrorIs(t, err, ErrNone)
}

// The main pass's checkpoints come after the search pass's whatever their
// steps, and Latest picks the main pass's newest; a version-1 file (before
// the pass existed) reads as pass 0.
func TestMainPassCheckpointsComeLast(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ pass, step int }{{0, 0}, {0, 50}, {0, 100}, {1, 0}, {1, 50}} {
		s := sample(c.step)
		s.Pass = c.pass
		_, err := Write(dir, s, 4)
		require.NoError(t, err)
	}
	names, err := list(dir)
	require.NoError(t, err)
	assert.Equal(t, []string{fileName(0, 50), fileName(0, 100), fileName(1, 0), fileName(1, 50)}, names)
	s, _, _, err := Latest(dir)
	require.NoError(t, err)
	assert.Equal(t, []int{1, 50}, []int{s.Pass, s.Step})

	v1 := sample(30)
	b := Encode(v1)
	// Version 3 had no last losses (16 bytes after the 7 varints, a byte
	// each here), version 2 no rollbacks and version 1 no pass either (the
	// first two varints after the config): drop them and seal the file
	// again.
	at := len(magic) + 1 + len(v1.Config)
	b = append(append([]byte{}, b[:at+7]...), b[at+7+16:]...)
	for _, c := range []struct {
		magic      string
		keep, skip int // the kept head ends at keep; the body goes on from skip
	}{{magicV1, at, at + 2}, {magicV2, at + 1, at + 2}, {magicV3, at + 2, at + 2}} {
		body := append(append([]byte(c.magic), b[len(magic):c.keep]...), b[c.skip:len(b)-32]...)
		sum := sha256.Sum256(body)
		got, err := Decode(append(body, sum[:]...))
		require.NoError(t, err, c.magic)
		assert.Equal(t, v1, got, c.magic)
	}
}

// The divergence guard survives the file: a resumed run keeps its learning
// rates' halving and judges its next window against the last one's losses.
func TestRollbacksRoundTrip(t *testing.T) {
	s := sample(40)
	s.Pass, s.Guard = 1, Guard{Rollbacks: 2, LastMedian: 0.0123, LastProbe: 1.5e-7}
	got, err := Decode(Encode(s))
	require.NoError(t, err)
	assert.Equal(t, s, got)
}

func TestModelRoundTripAndSizeCheck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "model.bin")
	p := []float32{1.5, -2, 3e-9}
	require.NoError(t, WriteModel(path, p))
	got, err := ReadModel(path, 3)
	require.NoError(t, err)
	assert.Equal(t, p, got)
	_, err = ReadModel(path, 4)
	assert.ErrorContains(t, err, "need 16")
}

// A run resumed past a damaged newest checkpoint removes it at its next
// write, even before reaching its step, so no damaged file stays among the
// kept ones; valid later checkpoints are left alone.
func TestWriteRemovesDamagedLaterCheckpoints(t *testing.T) {
	dir := t.TempDir()
	for _, step := range []int{10, 20, 30} {
		_, err := Write(dir, sample(step), 5)
		require.NoError(t, err)
	}
	damaged := filepath.Join(dir, fileName(0, 30))
	data, err := os.ReadFile(damaged)
	require.NoError(t, err)
	data[len(data)/2] ^= 0xff
	require.NoError(t, os.WriteFile(damaged, data, 0o644))

	s, _, skipped, err := Latest(dir)
	require.NoError(t, err)
	require.Len(t, skipped, 1)
	assert.Equal(t, 20, s.Step, "the resume goes on from step 20")
	_, err = Write(dir, sample(25), 5)
	require.NoError(t, err)
	names, err := list(dir)
	require.NoError(t, err)
	assert.Equal(t, []string{fileName(0, 10), fileName(0, 20), fileName(0, 25)}, names)

	// A valid later checkpoint is not this function's to remove.
	_, err = Write(dir, sample(40), 5)
	require.NoError(t, err)
	_, err = Write(dir, sample(35), 5)
	require.NoError(t, err)
	names, err = list(dir)
	require.NoError(t, err)
	assert.Equal(t, []string{fileName(0, 10), fileName(0, 20), fileName(0, 25), fileName(0, 35), fileName(0, 40)}, names)
}
