// Package atomicfile is hdet's one way to write a file: into a temporary
// file beside it, fsynced, renamed over the target, and the directory fsynced,
// so a reader (or a resumed run after a crash) sees the old file or the new
// one, never a torn one, and the new one survives a power loss.
package atomicfile

import (
	"io"
	"os"
	"path/filepath"
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

func write(path string, fill func(io.Writer) error, durable bool) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
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
