// Package atomicfile is hdet's one way to write a file: into a temporary
// file beside it, fsynced, renamed over the target, and the directory fsynced,
// so a reader (or a resumed run after a crash) sees the old file or the new
// one, never a torn one, and the new one survives a power loss.
package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Write replaces path with data atomically and durably (mode 0644).
func Write(path string, data []byte) error {
	return write(path, bytesFill(data), true)
}

// WriteVolatile replaces path with data atomically but without the fsyncs:
// for files rewritten often whose loss in a power failure does not matter
// (the watchdog's heartbeats), where a sync per rewrite would load the disk.
func WriteVolatile(path string, data []byte) error {
	return write(path, bytesFill(data), false)
}

// WriteFunc replaces path atomically and durably with what fill writes. When
// fill or any step fails, path is left as it was and the temporary file is
// removed.
func WriteFunc(path string, fill func(io.Writer) error) error {
	return write(path, fill, true)
}

func bytesFill(data []byte) func(io.Writer) error {
	return func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	}
}

// tempPrefix starts the name of every temporary file Write makes.
const tempPrefix = ".tmp-"

func write(path string, fill func(io.Writer) error, durable bool) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, tempPrefix+filepath.Base(path)+"-*")
	if err != nil {
		return NoSpace(err, dir)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
			err = NoSpace(err, dir)
		}
	}()
	if err = fill(f); err != nil {
		return err
	}
	if err = f.Chmod(0o644); err != nil {
		return err
	}
	if durable {
		if err = f.Sync(); err != nil {
			return err
		}
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(f.Name(), path); err != nil || !durable {
		return err
	}
	return SyncDir(dir)
}

// SyncDir fsyncs a directory, making a rename or a new entry in it durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// NoSpace adds to an error that says the disk is full (ENOSPC, or EDQUOT: a
// quota) how much room the file system holding dir has, so the message
// names the place and the free space; any other error is returned as is.
func NoSpace(err error, dir string) error {
	if err == nil || !(errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)) {
		return err
	}
	var st syscall.Statfs_t
	if serr := syscall.Statfs(dir, &st); serr != nil {
		return fmt.Errorf("%w (the file system of %s is full)", err, dir)
	}
	bs := uint64(st.Bsize)
	return fmt.Errorf("%w (the file system of %s has %s free of %s)", err, dir, bytesText(uint64(st.Bavail)*bs), bytesText(uint64(st.Blocks)*bs))
}

// bytesText writes n bytes the way df -h would, in binary units.
func bytesText(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n)/unit, 0
	for v >= unit && i < 4 {
		v, i = v/unit, i+1
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGTP"[i])
}

// RemoveStale removes the temporary files that writers killed mid-write
// (SIGKILL, a lost node) left in dir, and returns their names. Call it only
// while no one else writes in dir (hdet: rank 0 holding the run directory's
// lock): a live writer's temporary file looks the same.
func RemoveStale(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), tempPrefix) || !e.Type().IsRegular() {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, e.Name())
	}
	return removed, errors.Join(errs...)
}
