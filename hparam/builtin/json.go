package builtin

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"

	"github.com/hdet-dev/hdet/hparam/internal/jsonopt"

	"github.com/hdet-dev/hdet/hparam"
)

// decodeStrict decodes one JSON value into v, rejecting unknown keys and
// trailing data, and turns decoding errors into FieldErrors under prefix.
func decodeStrict(data []byte, v any, prefix string) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, e := dec.Token(); e != io.EOF {
			err = errors.New("trailing data after the JSON value")
		}
	}
	if err == nil {
		return nil
	}
	field := func(f string) string {
		if prefix == "" {
			return f
		}
		if f == "" {
			return prefix
		}
		return prefix + "." + f
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		got := te.Value
		if v := valueBefore(data, te.Offset); v != "" {
			got += " " + v
		}
		return hparam.FieldErrorf(field(te.Field), "must be a JSON %s, got %s", jsonKind(te.Type), got)
	}
	if key, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		key = strings.Trim(key, `"`)
		return hparam.FieldErrorf(field(key), "unknown key (allowed: %s)", strings.Join(structKeys(v), ", "))
	}
	where := prefix
	if where == "" {
		where = "config"
	}
	return hparam.FieldErrorf(where, "invalid JSON: %v", err)
}

// valueBefore returns the JSON scalar that ends at offset in data (where
// encoding/json reports a type error), cut to 40 bytes, or "" for an
// array or object: the message then names what the user wrote ("NaN",
// "0.5x"), not only its JSON kind.
func valueBefore(data []byte, offset int64) string {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err != nil || dec.InputOffset() > offset {
			return ""
		}
		if _, delim := tok.(json.Delim); dec.InputOffset() == offset && !delim {
			v, _ := json.Marshal(tok)
			if len(v) > 40 {
				return strings.ToValidUTF8(string(v[:37]), "") + "..."
			}
			return string(v)
		}
	}
}

func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int:
		return "integer"
	case reflect.Float64:
		return "number"
	case reflect.Bool:
		return "boolean"
	case reflect.String:
		return "string"
	}
	return "object"
}

func structKeys(v any) []string {
	t := reflect.TypeOf(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var keys []string
	if t.Kind() == reflect.Struct {
		for i := range t.NumField() {
			keys = append(keys, jsonopt.Name(t.Field(i)))
		}
	}
	return keys
}

// present reports whether a raw JSON block was given and is not null.
func present(raw json.RawMessage) bool {
	return len(raw) > 0 && string(bytes.TrimSpace(raw)) != "null"
}

// isNumber reports whether raw is a bare JSON number (the "schedule": 0.1 shorthand).
func isNumber(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && (t[0] == '-' || (t[0] >= '0' && t[0] <= '9'))
}

// prefixField qualifies a FieldError's field with a block name
// ("max_lr" -> "schedule.max_lr"); other errors pass through.
func prefixField(prefix string, err error) error {
	var fe *hparam.FieldError
	if errors.As(err, &fe) {
		return &hparam.FieldError{Field: prefix + "." + fe.Field, Msg: fe.Msg}
	}
	return err
}
