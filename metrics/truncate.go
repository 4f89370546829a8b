package metrics

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
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
	tmp := filepath.Join(filepath.Dir(path), ".metrics.jsonl.tmp")
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
