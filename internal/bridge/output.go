package bridge

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/hdet-dev/hdet/python"
)

// maxLine bounds how much of an unterminated line is held back.
const maxLine = 64 << 10

// lineWriter prefixes every line of a worker's output with its rank and
// writes each whole line with one Write, so that the lines of several
// ranks, merged by mpirun, never interleave mid-line (pipes write up to
// 4096 bytes atomically).
type lineWriter struct {
	mu      sync.Mutex
	out     io.Writer
	prefix  []byte
	partial []byte
}

func newLineWriter(out io.Writer, rank int) *lineWriter {
	return &lineWriter{out: out, prefix: fmt.Appendf(nil, "[rank %d] ", rank)}
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 && len(l.partial) < maxLine {
			break
		}
		if i < 0 {
			i = len(l.partial) - 1
		}
		line := append(append(make([]byte, 0, len(l.prefix)+i+1), l.prefix...), l.partial[:i+1]...)
		l.partial = l.partial[i+1:]
		if _, err := l.out.Write(line); err != nil {
			return len(p), err
		}
	}
	return len(p), nil
}

// flush ends an unterminated last line.
func (l *lineWriter) flush() {
	if len(l.partial) > 0 {
		_, _ = l.Write([]byte("\n"))
	}
}

// packageDir returns a folder holding the hdet Python package embedded in
// this binary (extracted once per content into the user's cache), which
// goes first on the worker's PYTHONPATH: the script then always speaks
// this hdet's protocol, installed or not.
func packageDir() (string, error) {
	sum := sha256.New()
	var files []string
	err := fs.WalkDir(python.Package, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := python.Package.ReadFile(p)
		files = append(files, p)
		sum.Write([]byte(p))
		sum.Write(b)
		return err
	})
	if err != nil {
		return "", err
	}
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	base = filepath.Join(base, "hdet")
	dir := filepath.Join(base, "python-"+hex.EncodeToString(sum.Sum(nil))[:16])
	if _, err := os.Stat(filepath.Join(dir, "hdet", "__init__.py")); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		return "", err
	}
	// Written aside, then renamed into place: ranks extracting at once never
	// see a half-written package.
	tmp, err := os.MkdirTemp(base, "extract-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	for _, p := range files {
		b, _ := python.Package.ReadFile(p)
		// boot/ holds what goes at the top of the path (sitecustomize.py).
		dst := filepath.Join(tmp, strings.TrimPrefix(p, "boot/"))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			return "", err
		}
	}
	if err := os.Rename(tmp, dir); err != nil && !errors.Is(err, fs.ErrExist) {
		if _, serr := os.Stat(filepath.Join(dir, "hdet", "__init__.py")); serr != nil {
			return "", fmt.Errorf("extract the hdet Python package to %s: %w", dir, err)
		}
	}
	return dir, nil
}
