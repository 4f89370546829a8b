package metrics

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/hdet-dev/hdet/internal/atomicfile"
)

// Errors a reader of metrics.jsonl reports; both mean the file is not a
// metrics file at all, as opposed to one cut short by a crash.
var (
	ErrCorrupt = errors.New("metrics: not a metrics.jsonl file")
	ErrNoStart = errors.New("metrics: no start record")
)

// Writer appends records to a metrics.jsonl file, one line per record in one
// write call, so a reader (hdet report on a live run) sees whole lines. It
// fsyncs by batch, not per line (a sync per window would hurt on Lustre or
// NFS): after SyncWindows window records or SyncInterval, after every other
// record (start, end, events), on Sync (before each checkpoint, so the
// windows a checkpoint covers are on disk) and on Close. A power loss can
// thus lose the windows since the last sync, which a resume from the last
// checkpoint runs again anyway.
//
// A record that cannot be written (a full disk) is not lost: what part of it
// reached the file is cut off again, the record is held and written before
// the next one, and Sync fails while any is held, so no checkpoint covers a
// window whose record is not on disk (a resume from the one before runs it
// again, and writes its record then).
type Writer struct {
	f        *os.File
	path     string
	size     int64     // the file's length up to its last whole record
	held     []byte    // records not written yet, one line each
	nHeld    int       // how many
	cut      bool      // a failed write may have left part of a line after size
	unsynced int       // window records written since the last sync
	synced   time.Time // time of the last sync
}

// The batch bounds of Writer's fsync policy.
const (
	SyncWindows  = 10
	SyncInterval = 10 * time.Second
)

// OpenWriter opens path for appending, creating it if needed. A partial last
// line left by a crash is cut off first, so that the records appended by a
// resumed run start on a line of their own.
func OpenWriter(path string) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	end, err := cutPartialLine(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("metrics: %s: %w", path, err)
	}
	return &Writer{f: f, path: path, size: end, synced: time.Now()}, nil
}

// cutPartialLine truncates f after its last newline and returns its new
// length.
func cutPartialLine(f *os.File) (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	size := fi.Size()
	// Scan back in blocks for the last newline.
	const block = 4096
	buf := make([]byte, block)
	end := size
	for end > 0 {
		n := min(int64(block), end)
		if _, err := f.ReadAt(buf[:n], end-n); err != nil {
			return 0, err
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			end = end - n + int64(i) + 1
			break
		}
		end -= n
	}
	if end != size {
		if err := f.Truncate(end); err != nil {
			return 0, err
		}
	}
	return end, nil
}

// Write appends r as one line, syncing the file when the policy says so.
// When the line cannot be written, Write returns the error and holds the
// record (see Writer): the next Write or Sync writes it first.
func (w *Writer) Write(r Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("metrics: encode %s record: %w", r.Type(), err)
	}
	w.held = append(append(w.held, b...), '\n')
	w.nHeld++
	if err := w.flush(); err != nil {
		return err
	}
	if r.Type() == TypeWindow {
		w.unsynced++
		if w.unsynced < SyncWindows && time.Since(w.synced) < SyncInterval {
			return nil
		}
	}
	return w.Sync()
}

// flush writes the held records in one write call at the end of the last
// whole record. On failure the file is cut back there (a short write on a
// full disk leaves part of a line), and the records stay held.
func (w *Writer) flush() error {
	if w.cut {
		if err := w.f.Truncate(w.size); err != nil {
			return w.heldError(err)
		}
		w.cut = false
	}
	if len(w.held) == 0 {
		return nil
	}
	n, err := w.f.WriteAt(w.held, w.size)
	if err != nil {
		// Even a write that reports no byte written can leave some in
		// the file (seen on tmpfs): always cut back.
		w.cut = w.f.Truncate(w.size) != nil
		return w.heldError(err)
	}
	w.size += int64(n)
	w.held, w.nHeld = w.held[:0], 0
	return nil
}

func (w *Writer) heldError(err error) error {
	return fmt.Errorf("metrics: %w; %d record(s) held in memory, written before the next one (no checkpoint until then)",
		atomicfile.NoSpace(err, filepath.Dir(w.path)), w.nHeld)
}

// Sync writes the held records, if any, and flushes the file to disk. It
// fails while a record is held.
func (w *Writer) Sync() error {
	if err := w.flush(); err != nil {
		return err
	}
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("metrics: %w", atomicfile.NoSpace(err, filepath.Dir(w.path)))
	}
	w.unsynced, w.synced = 0, time.Now()
	return nil
}

// Close syncs and closes the file.
func (w *Writer) Close() error { return errors.Join(w.Sync(), w.f.Close()) }

// Read parses a metrics.jsonl stream. It tolerates a last line that does not
// parse (a run still writing it, or one that crashed mid-write) and reports
// it with truncated. Lines of a type it does not know are skipped (see
// decodeLine). A bad line anywhere else, a first line that is not
// JSON, or a first record that is not a start record is an error wrapping
// ErrCorrupt or ErrNoStart.
func Read(r io.Reader) (recs []Record, truncated bool, err error) {
	br := bufio.NewReader(r)
	var pending error // a bad line, forgiven only if it turns out to be the last
	for lineNo := 1; ; lineNo++ {
		line, rerr := readLine(br)
		if errors.Is(rerr, errLongLine) {
			return nil, false, fmt.Errorf("%w: line %d: %w", ErrCorrupt, lineNo, rerr)
		}
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			return nil, false, fmt.Errorf("metrics: %w", rerr)
		}
		if trimmed := bytes.TrimSpace(line); len(trimmed) > 0 {
			if pending != nil {
				return nil, false, pending
			}
			rec, jerr := decodeLine(trimmed)
			switch {
			case jerr != nil:
				pending = fmt.Errorf("%w: line %d: %v", ErrCorrupt, lineNo, jerr)
				if lineNo == 1 {
					return nil, false, pending
				}
			case rec != nil:
				recs = append(recs, rec)
			}
		}
		if rerr != nil { // io.EOF
			break
		}
	}
	if _, ok := first(recs).(StartRecord); !ok {
		return nil, false, ErrNoStart
	}
	return recs, pending != nil, nil
}

func first(recs []Record) Record {
	if len(recs) == 0 {
		return nil
	}
	return recs[0]
}

// MaxLine bounds a line of metrics.jsonl: a window record of thousands of
// ranks is far shorter, and a reader never holds more than this of one line.
const MaxLine = 64 << 20

var errLongLine = fmt.Errorf("line longer than %d bytes", MaxLine)

// readLine reads up to and including the next newline, at most MaxLine bytes.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		frag, err := br.ReadSlice('\n')
		line = append(line, frag...)
		if len(line) > MaxLine {
			return nil, errLongLine
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return line, err
		}
	}
}

// ReadFile reads the metrics.jsonl at path; see Read.
func ReadFile(path string) (recs []Record, truncated bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false, fmt.Errorf("metrics: %w", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && !fi.Mode().IsRegular() {
		return nil, false, fmt.Errorf("%w: %s is not a regular file", ErrCorrupt, path)
	}
	recs, truncated, err = Read(f)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", path, err)
	}
	return recs, truncated, nil
}
