package metrics

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzRead: the metrics reader never panics; it returns records starting
// with a start record, or an error saying why not.
func FuzzRead(f *testing.F) {
	f.Add([]byte(`{"type":"start","ranks":2}` + "\n" + `{"type":"window","window":0,"losses":[1,null]}` + "\n"))
	f.Add([]byte(`{"type":"start"}` + "\n" + `{"type":"wind`))
	f.Add([]byte("\n\n{}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, _, err := Read(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrNoStart) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		if _, ok := recs[0].(StartRecord); !ok {
			t.Fatalf("accepted a file without a leading start record")
		}
	})
}
