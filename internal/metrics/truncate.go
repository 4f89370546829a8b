package metrics

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"

	"github.com/hdet-dev/hdet/internal/atomicfile"
)

// TruncateAfter rewrites the metrics file at path keeping only what a run
// resumed at step of pass holds: its start records, the windows up to
// there and the commit when it came before (resumed in the main pass, or
// at the search pass's end, whose checkpoint follows the commit). The
// windows after it will run again, and the end record is gone. A missing
// file is not an error. The file is replaced atomically.
func TruncateAfter(path string, pass, step int) error {
	recs, _, err := ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, r := range recs {
		if keptAfterResume(r, pass, step) {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
	}
	return atomicfile.Write(path, buf.Bytes())
}

// keptAfterResume reports whether a run resumed at step of pass keeps r.
func keptAfterResume(r Record, pass, step int) bool {
	switch r := r.(type) {
	case StartRecord:
		return true
	case CommitRecord:
		return pass > 0 || r.Step <= step
	case WindowRecord:
		return r.Pass < pass || (r.Pass == pass && r.Step <= step)
	}
	return false
}
