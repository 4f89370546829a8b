// Package runlock keeps two hdet runs out of one run directory: rank 0 holds
// an advisory lock (flock) on RUN_DIR/hdet.lock for the run's life. The
// kernel drops the lock when the holder dies, however it dies, so a lock left
// by a killed run is stale by construction and the next launch takes it over;
// the file's contents (host, pid, start time) only name the holder.
package runlock

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// FileName is the lock file in the run directory.
const FileName = "hdet.lock"

// Holder is who holds (or last held) a run directory.
type Holder struct {
	Host  string    `json:"host"`
	PID   int       `json:"pid"`
	Start time.Time `json:"start"`
}

func (h Holder) String() string {
	return fmt.Sprintf("pid %d on host %s, started %s", h.PID, h.Host, h.Start.Format(time.RFC3339))
}

// ErrHeld: another live process holds the run directory.
var ErrHeld = errors.New("run directory in use")

// ErrBadDir: the run directory cannot be one (a file, a path too long, ...).
var ErrBadDir = errors.New("not a usable run directory")

// HeldError names the live holder.
type HeldError struct {
	Dir    string
	Holder Holder
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("run.dir %s is in use by another hdet run (%s; lock %s): wait for it to end or use another run.dir",
		e.Dir, e.Holder, filepath.Join(e.Dir, FileName))
}

func (e *HeldError) Unwrap() error { return ErrHeld }

// Lock is a held run directory.
type Lock struct{ f *os.File }

// Acquire creates dir if needed and locks it. stale is the previous holder
// when the lock was left by a process that is gone (nil otherwise).
func Acquire(dir string) (l *Lock, stale *Holder, err error) {
	if err := usableDir(dir); err != nil {
		return nil, nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, FileName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: run.dir %s: %w", ErrBadDir, dir, err)
	}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	prev, _ := read(f)
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, nil, &HeldError{Dir: dir, Holder: prev}
		}
		return nil, nil, fmt.Errorf("run.dir %s: lock %s: %w", dir, FileName, err)
	}
	if prev.PID != 0 {
		stale = &prev
	}
	host, _ := os.Hostname()
	b, _ := json.Marshal(Holder{Host: host, PID: os.Getpid(), Start: time.Now().UTC().Truncate(time.Second)})
	if err := rewrite(f, append(b, '\n')); err != nil {
		return nil, nil, fmt.Errorf("run.dir %s: lock %s: %w", dir, FileName, err)
	}
	return &Lock{f: f}, stale, nil
}

// usableDir makes dir and refuses one that is not a directory, or whose
// checkpoints entry is not.
func usableDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("%w: run.dir: %w", ErrBadDir, err)
	}
	ck := filepath.Join(dir, "checkpoints")
	if fi, err := os.Stat(ck); err == nil && !fi.IsDir() {
		return fmt.Errorf("%w: run.dir: %s is not a directory", ErrBadDir, ck)
	}
	return nil
}

func read(f *os.File) (Holder, error) {
	var h Holder
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err == nil && len(b) > 0 {
		err = json.Unmarshal(b, &h)
	}
	return h, err
}

func rewrite(f *os.File, b []byte) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	if _, err := f.WriteAt(b, 0); err != nil {
		return err
	}
	return f.Sync()
}

// Release empties the lock file (a clean end leaves no holder named) and
// unlocks it. The file itself stays: removing it would let two later
// launches lock two different files.
func (l *Lock) Release() error {
	err := l.f.Truncate(0)
	return errors.Join(err, l.f.Close())
}
