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
// there and, resumed in the main pass, the commit. The windows after it
// will run again, and the end record is gone. A missing file is not an
// error. The file is replaced atomically.
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
		keep := r.Type == TypeStart || (r.Type == TypeCommit && pass > 0) ||
			(r.Type == TypeWindow && (r.Pass < pass || (r.Pass == pass && r.Step <= step)))
		if keep {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
	}
	return atomicfile.Write(path, buf.Bytes())
}
