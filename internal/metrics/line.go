package metrics

import (
	"encoding/json"
	"fmt"
)

// The lines of metrics.jsonl were first written from one struct for every
// kind of record, so each line carries the window record's "window" and
// "step" keys, 0 where they mean nothing: a start line ends with
// "window":0,"step":0, and a commit or end line has "window":0 before its
// step. The line types below keep those bytes, so that a file written
// before the records were typed and one written after compare equal, and
// a file rewritten by TruncateAfter keeps its lines as they were.
type (
	startFields  StartRecord  // the record's fields without its MarshalJSON
	windowFields WindowRecord // likewise

	startLine struct {
		Type string `json:"type"`
		startFields
		Window int `json:"window"`
		Step   int `json:"step"`
	}
	windowLine struct {
		Type string `json:"type"`
		windowFields
	}
	commitLine struct {
		Type      string            `json:"type"`
		Time      float64           `json:"time"`
		Committed map[string]Commit `json:"committed,omitempty"`
		Window    int               `json:"window"`
		Step      int               `json:"step"`
	}
	endLine struct {
		Type        string  `json:"type"`
		Time        float64 `json:"time"`
		Window      int     `json:"window"`
		Step        int     `json:"step"`
		Checksum    string  `json:"checksum,omitempty"`
		Eval        *Eval   `json:"eval,omitempty"`
		WallSeconds float64 `json:"wall_seconds,omitempty"`
	}
)

func (r StartRecord) MarshalJSON() ([]byte, error) {
	return json.Marshal(startLine{Type: TypeStart, startFields: startFields(r)})
}

func (r WindowRecord) MarshalJSON() ([]byte, error) {
	return json.Marshal(windowLine{Type: TypeWindow, windowFields: windowFields(r)})
}

func (r CommitRecord) MarshalJSON() ([]byte, error) {
	return json.Marshal(commitLine{Type: TypeCommit, Time: r.Time, Committed: r.Committed, Step: r.Step})
}

func (r EndRecord) MarshalJSON() ([]byte, error) {
	return json.Marshal(endLine{Type: TypeEnd, Time: r.Time, Step: r.Step, Checksum: r.Checksum, Eval: r.Eval,
		WallSeconds: r.WallSeconds})
}

// errNoType is a line without a "type".
var errNoType = fmt.Errorf(`no "type" field`)

// decodeLine decodes one line into the record its "type" names. A line of
// a type this reader does not know gives a nil record and no error: a
// later hdet may add kinds, which readers of this one skip.
func decodeLine(line []byte) (Record, error) {
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(line, &head); err != nil {
		return nil, err
	}
	switch head.Type {
	case "":
		return nil, errNoType
	case TypeStart:
		return decodeAs[StartRecord](line)
	case TypeWindow:
		return decodeAs[WindowRecord](line)
	case TypeCommit:
		return decodeAs[CommitRecord](line)
	case TypeEnd:
		return decodeAs[EndRecord](line)
	}
	return nil, nil
}

func decodeAs[T Record](line []byte) (Record, error) {
	var r T
	if err := json.Unmarshal(line, &r); err != nil {
		return nil, err
	}
	return r, nil
}

// Of is the records of recs of type T, in order: Of[WindowRecord](recs)
// is a run's windows.
func Of[T Record](recs []Record) []T {
	var out []T
	for _, r := range recs {
		if t, ok := r.(T); ok {
			out = append(out, t)
		}
	}
	return out
}
