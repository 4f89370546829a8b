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

	"github.com/hdet-dev/hdet/internal/atomicfile"
	"github.com/hdet-dev/hdet/internal/binread"
)

// ErrCorrupt marks a checkpoint that fails its checksum or does not decode.
var ErrCorrupt = errors.New("corrupt checkpoint")

// ErrNone: the directory holds no valid checkpoint.
var ErrNone = errors.New("no checkpoint")

// magic starts every checkpoint; version 2 added the pass, version 3 the
// rollbacks, version 4 the divergence guard's last losses. Older files
// still read: version 3 with no last losses (the first window after the
// resume is judged as a pass's first), version 2 with no rollbacks either,
// version 1 (one-pass runs, before the search and main passes) also as
// pass 0.
const (
	magic   = "HDETCKP4"
	magicV3 = "HDETCKP3"
	magicV2 = "HDETCKP2"
	magicV1 = "HDETCKP1"
)

// maxCount bounds the step, window, rank and size fields: far beyond any
// real run, and small enough that no arithmetic on them overflows.
const maxCount = 1 << 40

// Guard is the divergence guard's state that a resumed run carries on
// with, so that it judges its windows as the run left alone would have.
type Guard struct {
	Rollbacks int // rollbacks so far: the learning rates train at 0.5^Rollbacks, in the main pass too
	// LastMedian and LastProbe are the healthy replicas' median window and
	// probe losses of the last window (0: none), which the next window's
	// are judged against (engine's checkDivergence).
	LastMedian, LastProbe float64
}

// State is what a checkpoint holds.
type State struct {
	Config []byte // the resolved config.yaml of the run that wrote it
	Pass   int    // plan.PassSearch or PassMain
	Guard
	Step       int       // steps done in the pass
	Window     int       // windows done in the pass
	Ranks      int       // N when written
	ParamCount int       // parameters at the start of Buffer (the model's shape)
	Buffer     []float32 // parameters then optimizer state, as all ranks hold them after a converge
	Controller []byte    // controller.Controller.SaveState
}

// Encode serialises s with its trailing checksum.
func Encode(s *State) []byte {
	b := make([]byte, 0, len(magic)+len(s.Config)+len(s.Controller)+4*len(s.Buffer)+96)
	b = append(b, magic...)
	b = appendBytes(b, s.Config)
	for _, v := range []int{s.Pass, s.Rollbacks, s.Step, s.Window, s.Ranks, s.ParamCount, len(s.Buffer)} {
		b = binary.AppendUvarint(b, uint64(v))
	}
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(s.LastMedian))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(s.LastProbe))
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
	head := ""
	if len(data) >= len(magic)+sha256.Size {
		head = string(data[:len(magic)])
	}
	if head != magic && head != magicV3 && head != magicV2 && head != magicV1 {
		return nil, fmt.Errorf("%w: not an hdet checkpoint (bad header)", ErrCorrupt)
	}
	body, sum := data[:len(data)-sha256.Size], data[len(data)-sha256.Size:]
	if got := sha256.Sum256(body); !bytes.Equal(got[:], sum) {
		return nil, fmt.Errorf("%w: checksum mismatch (truncated or damaged)", ErrCorrupt)
	}
	r := binread.New(body[len(magic):], ErrCorrupt)
	s := &State{Config: r.Bytes("config")}
	if head != magicV1 {
		s.Pass = r.Int("pass", 1)
	}
	if head == magic || head == magicV3 {
		s.Rollbacks = r.Int("rollbacks", maxCount)
	}
	s.Step, s.Window, s.Ranks = r.Int("step", maxCount), r.Int("window", maxCount), r.Int("ranks", maxCount)
	s.ParamCount = r.Int("parameter count", maxCount)
	n := r.Int("buffer length", maxCount)
	if r.Err() == nil && s.ParamCount > n {
		r.Fail("parameter count")
	}
	if head == magic {
		last := r.Float64s("last losses", 2)
		if len(last) == 2 {
			s.LastMedian, s.LastProbe = last[0], last[1]
		}
	}
	s.Buffer = r.Float32s("buffer", n)
	s.Controller = r.Bytes("controller state")
	if err := r.End(); err != nil {
		return nil, err
	}
	return s, nil
}

// mainPrefix names the main pass's checkpoints, which come after every
// checkpoint of the search pass (or of a one-pass run).
const mainPrefix = "ckpt-main-"

// fileName orders checkpoints by step within a pass.
func fileName(pass, step int) string {
	if pass > 0 {
		return fmt.Sprintf(mainPrefix+"%012d.hdet", step)
	}
	return fmt.Sprintf("ckpt-%012d.hdet", step)
}

// FileName is the name of the checkpoint of step of pass in its directory.
func FileName(pass, step int) string { return fileName(pass, step) }

// Write stores s in dir atomically and keeps the newest keep checkpoints.
// Damaged checkpoints of later steps (ones a resume skipped) are removed
// first: the run has gone on from an earlier one, so they hold nothing it
// can use, and left in place they would count among the kept ones.
func Write(dir string, s *State, keep int) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, fileName(s.Pass, s.Step))
	if err := atomicfile.Write(path, Encode(s)); err != nil {
		return "", err
	}
	names, err := list(dir)
	if err != nil {
		return path, err
	}
	if names, err = removeDamagedAfter(dir, names, fileName(s.Pass, s.Step)); err != nil {
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

// removeDamagedAfter removes the checkpoints in names (sorted) that come
// after name and do not decode, and returns the names left. A file that
// cannot be read (an I/O error) is left alone.
func removeDamagedAfter(dir string, names []string, name string) ([]string, error) {
	kept, after := names[:0:0], false // names are in list's order
	for _, n := range names {
		if after {
			data, err := os.ReadFile(filepath.Join(dir, n))
			if err == nil {
				if _, err = Decode(data); errors.Is(err, ErrCorrupt) {
					if err := os.Remove(filepath.Join(dir, n)); err != nil {
						return names, err
					}
					continue
				}
			}
		}
		kept = append(kept, n)
		after = after || n == name
	}
	return kept, nil
}

// List returns the checkpoint file names in dir, oldest first (none when
// dir does not exist).
func List(dir string) ([]string, error) { return list(dir) }

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
	sort.Slice(names, func(i, j int) bool {
		mi, mj := strings.HasPrefix(names[i], mainPrefix), strings.HasPrefix(names[j], mainPrefix)
		if mi != mj {
			return mj
		}
		return names[i] < names[j]
	})
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
