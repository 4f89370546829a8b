package metrics

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"

	"github.com/hdet-dev/hdet/internal/atomicfile"
)

// TruncateAfter rewrites the metrics file at path keeping only what a run
// resumed at step holds: its start records and the windows up to step. The
// windows after it will run again, and the end record is gone. A missing
// file is not an error. The file is replaced atomically.
func TruncateAfter(path string, step int) error {
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
		if r.Type == TypeStart || (r.Type == TypeWindow && r.Step <= step) {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
	}
	return atomicfile.Write(path, buf.Bytes())
}
