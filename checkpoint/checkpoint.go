// Package checkpoint writes and reads hdet's checkpoints: the shared
// parameters and optimizer state after a converge, the step, and the
// controller's and explorers' state, so a stopped run resumes bit-exactly.
//
// A checkpoint is one file, written atomically (temporary file, fsync,
// rename, fsync of the directory) and ending with the SHA-256 of everything
// before it, so a torn or corrupt file is detected and skipped.
package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// ErrCorrupt marks a checkpoint that fails its checksum or does not decode.
var ErrCorrupt = errors.New("corrupt checkpoint")

// ErrNone: the directory holds no valid checkpoint.
var ErrNone = errors.New("no checkpoint")

const magic = "HDETCKP1"

// maxField bounds every length read from a file, so garbage cannot make the
// reader allocate without limit.
const maxField = 1 << 34

// State is what a checkpoint holds.
type State struct {
	Config     []byte    // the resolved config.yaml of the run that wrote it
	Step       int       // steps done
	Window     int       // windows done
	Ranks      int       // N when written
	ParamCount int       // parameters at the start of Buffer (the model's shape)
	Buffer     []float32 // parameters then optimizer state, as all ranks hold them after a converge
	Controller []byte    // hparam.Controller.SaveState
}

// Encode serialises s with its trailing checksum.
func Encode(s *State) []byte {
	b := make([]byte, 0, len(magic)+len(s.Config)+len(s.Controller)+4*len(s.Buffer)+96)
	b = append(b, magic...)
	b = appendBytes(b, s.Config)
	for _, v := range []int{s.Step, s.Window, s.Ranks, s.ParamCount, len(s.Buffer)} {
		b = binary.AppendUvarint(b, uint64(v))
	}
	for _, f := range s.Buffer {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
	}
	b = appendBytes(b, s.Controller)
	sum := sha256.Sum256(b)
	return append(b, sum[:]...)
}

func appendBytes(b, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

// Decode parses a checkpoint, checking its checksum first. It never panics
// on garbage.
func Decode(data []byte) (*State, error) {
	if len(data) < len(magic)+sha256.Size || string(data[:len(magic)]) != magic {
		return nil, fmt.Errorf("%w: not an hdet checkpoint (bad header)", ErrCorrupt)
	}
	body, sum := data[:len(data)-sha256.Size], data[len(data)-sha256.Size:]
	if got := sha256.Sum256(body); !bytes.Equal(got[:], sum) {
		return nil, fmt.Errorf("%w: checksum mismatch (truncated or damaged)", ErrCorrupt)
	}
	r := reader{b: body[len(magic):]}
	s := &State{Config: r.bytes("config")}
	s.Step, s.Window, s.Ranks, s.ParamCount = r.int("step"), r.int("window"), r.int("ranks"), r.int("parameter count")
	n := r.int("buffer length")
	if r.err == nil && (n > len(r.b)/4 || s.ParamCount > n) {
		r.fail("buffer length")
	}
	if r.err == nil {
		s.Buffer = make([]float32, n)
		for i := range s.Buffer {
			s.Buffer[i] = math.Float32frombits(binary.LittleEndian.Uint32(r.b[4*i:]))
		}
		r.b = r.b[4*n:]
	}
	s.Controller = r.bytes("controller state")
	if r.err == nil && len(r.b) != 0 {
		r.fail("trailing bytes")
	}
	if r.err != nil {
		return nil, r.err
	}
	return s, nil
}

type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: bad %s", ErrCorrupt, what)
	}
}

func (r *reader) int(what string) int {
	if r.err != nil {
		return 0
	}
	v, k := binary.Uvarint(r.b)
	if k <= 0 || v > maxField {
		r.fail(what)
		return 0
	}
	r.b = r.b[k:]
	return int(v)
}

func (r *reader) bytes(what string) []byte {
	n := r.int(what)
	if r.err != nil {
		return nil
	}
	if n > len(r.b) {
		r.fail(what)
		return nil
	}
	v := bytes.Clone(r.b[:n])
	r.b = r.b[n:]
	return v
}

// fileName orders checkpoints by step.
func fileName(step int) string { return fmt.Sprintf("ckpt-%012d.hdet", step) }

// Write stores s in dir atomically and keeps the newest keep checkpoints.
func Write(dir string, s *State, keep int) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, fileName(s.Step))
	if err := writeAtomic(path, Encode(s)); err != nil {
		return "", err
	}
	names, err := list(dir)
	if err != nil {
		return path, err
	}
	for len(names) > keep {
		if err := os.Remove(filepath.Join(dir, names[0])); err != nil {
			return path, err
		}
		names = names[1:]
	}
	return path, nil
}

func writeAtomic(path string, data []byte) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// list returns the checkpoint file names in dir, oldest first.
func list(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "ckpt-") && strings.HasSuffix(e.Name(), ".hdet") && e.Type().IsRegular() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names, nil
}

// Skipped is a checkpoint Latest passed over, and why.
type Skipped struct {
	Path string
	Err  error
}

// Latest returns the newest valid checkpoint in dir and the newer ones it
// had to skip (corrupt or truncated), newest first. ErrNone when there is none.
func Latest(dir string) (*State, string, []Skipped, error) {
	names, err := list(dir)
	if err != nil {
		return nil, "", nil, err
	}
	var skipped []Skipped
	for i := len(names) - 1; i >= 0; i-- {
		path := filepath.Join(dir, names[i])
		data, err := os.ReadFile(path)
		if err == nil {
			var s *State
			if s, err = Decode(data); err == nil {
				return s, path, skipped, nil
			}
		}
		skipped = append(skipped, Skipped{Path: path, Err: err})
	}
	return nil, "", skipped, ErrNone
}
