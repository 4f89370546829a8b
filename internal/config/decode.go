package config

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// ErrInvalid marks every configuration error; the message names the field's
// full path and what is allowed.
var ErrInvalid = errors.New("invalid configuration")

// FieldError is a configuration error at one field. Line is the line in the
// file, 0 when the value came from --set, -1 when it is a default.
type FieldError struct {
	Path string
	Line int
	Msg  string
}

func (e *FieldError) Error() string {
	where := "(default value)"
	switch {
	case e.Line > 0:
		where = fmt.Sprintf("line %d", e.Line)
	case e.Line == 0:
		where = "--set"
	}
	return fmt.Sprintf("%v: %s: %s: %s", ErrInvalid, where, e.Path, e.Msg)
}

func (e *FieldError) Unwrap() error { return ErrInvalid }

// invalid is an error at path whose line Load fills in.
func invalid(path, format string, a ...any) error {
	return &FieldError{Path: short(path), Line: -1, Msg: fmt.Sprintf(format, a...)}
}

// at is an error at node n's line (0 for a node --set made).
func at(n *yaml.Node, path, format string, a ...any) error {
	return &FieldError{Path: short(path), Line: n.Line, Msg: fmt.Sprintf(format, a...)}
}

// maxShown is the longest value an error message repeats whole.
const maxShown = 80

// short cuts a long value for an error message: a 50 MB value is not
// echoed back.
func short(s string) string {
	if len(s) <= maxShown {
		return s
	}
	return strings.ToValidUTF8(s[:maxShown-20], "") + fmt.Sprintf("...(%d bytes)", len(s))
}

var durationType = reflect.TypeOf(Duration(0))

// decodeStrict decodes n into v (a pointer to a struct), walking the YAML tree
// itself so that an unknown key or a wrong type is reported with its full path
// (for example `explorers[1].timeout`), which yaml.v3's KnownFields does not give.
// It also records each decoded field's line in lines, and rejects duplicate
// keys, which yaml.v3 lets through when it builds a tree.
func decodeStrict(n *yaml.Node, v any, lines map[string]int) error {
	d := decoder{lines: lines}
	return d.value(n, reflect.ValueOf(v).Elem(), "")
}

type decoder struct{ lines map[string]int }

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func (d decoder) value(n *yaml.Node, v reflect.Value, path string) error {
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return nil
		}
		n = n.Content[0]
	}
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Tag == "!!null" {
		return nil // keep the default
	}
	d.lines[path] = n.Line
	where := path
	if where == "" {
		where = "(top level)"
	}
	switch {
	case v.Type() == durationType:
		if n.Kind != yaml.ScalarNode {
			return at(n, where, "want a duration such as 30s or 5m, got a %s", kindName(n))
		}
		dur, err := time.ParseDuration(n.Value)
		if err != nil {
			return at(n, where, "want a duration such as 30s or 5m, got %q", short(n.Value))
		}
		v.SetInt(int64(dur))
		return nil
	case v.Kind() == reflect.Struct:
		return d.structure(n, v, path, where)
	case v.Kind() == reflect.Slice && v.Type().Elem().Kind() != reflect.Uint8:
		if n.Kind != yaml.SequenceNode {
			return at(n, where, "want a list, got a %s", kindName(n))
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, c := range n.Content {
			if err := d.value(c, s.Index(i), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		v.Set(s)
		return nil
	case v.Kind() == reflect.Map:
		// Free-form blocks (an explorer's config) are checked by their owner;
		// yaml.v3 refuses their duplicate keys itself.
		if n.Kind != yaml.MappingNode {
			return at(n, where, "want a mapping, got a %s", kindName(n))
		}
		m := reflect.New(v.Type())
		if err := n.Decode(m.Interface()); err != nil {
			return at(n, where, "%s", short(err.Error()))
		}
		if err := finiteNumbers(n, path); err != nil {
			return err
		}
		v.Set(m.Elem())
		return nil
	}
	if n.Kind != yaml.ScalarNode {
		return at(n, where, "want %s, got a %s", typeName(v.Type()), kindName(n))
	}
	p := reflect.New(v.Type())
	if err := n.Decode(p.Interface()); err != nil || !integral(n, v.Kind()) {
		return at(n, where, "want %s, got %q", typeName(v.Type()), short(n.Value))
	}
	v.Set(p.Elem())
	return nil
}

// finiteNumbers refuses .inf and .nan anywhere in a free-form block, naming
// the key: the block reaches its owner (an explorer) as JSON, which has no
// such numbers, and would otherwise fail there with no field named.
func finiteNumbers(n *yaml.Node, path string) error {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if err := finiteNumbers(n.Content[i+1], join(path, n.Content[i].Value)); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			if err := finiteNumbers(c, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case yaml.AliasNode:
		return finiteNumbers(n.Alias, path)
	case yaml.ScalarNode:
		var f float64
		if n.Tag == "!!float" && n.Decode(&f) == nil && !finite(f) {
			return at(n, path, "want a finite number, got %s", short(n.Value))
		}
	}
	return nil
}

// structure decodes a mapping into a struct: every key known, none twice.
func (d decoder) structure(n *yaml.Node, v reflect.Value, path, where string) error {
	if n.Kind != yaml.MappingNode {
		return at(n, where, "want a mapping of keys (%s), got a %s", strings.Join(fieldNames(v.Type()), ", "), kindName(n))
	}
	fields := map[string]int{}
	for i := 0; i < v.NumField(); i++ {
		fields[yamlName(v.Type().Field(i))] = i
	}
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		idx, ok := fields[k.Value]
		if !ok {
			return at(k, join(path, k.Value), "unknown key (allowed here: %s)", strings.Join(fieldNames(v.Type()), ", "))
		}
		if first, dup := seen[k.Value]; dup {
			return at(k, join(path, k.Value), "duplicate key (first at line %d)", first.Line)
		}
		seen[k.Value] = k
		if err := d.value(n.Content[i+1], v.Field(idx), join(path, k.Value)); err != nil {
			return err
		}
	}
	return nil
}

// integral refuses a fractional number for an integer field, which yaml.v3
// would truncate (train.epochs: 1.5 is not one epoch).
func integral(n *yaml.Node, k reflect.Kind) bool {
	switch k {
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint, reflect.Uint64, reflect.Uint32:
	default:
		return true
	}
	if n.ShortTag() != "!!float" {
		return true
	}
	f, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
	return err == nil && f == math.Trunc(f)
}

func yamlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "" {
		return strings.ToLower(f.Name)
	}
	return name
}

func fieldNames(t reflect.Type) []string {
	var names []string
	for i := 0; i < t.NumField(); i++ {
		names = append(names, yamlName(t.Field(i)))
	}
	sort.Strings(names)
	return names
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	}
	return "value " + strconv.Quote(short(n.Value))
}

func typeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "an integer"
	case reflect.Uint64, reflect.Uint32, reflect.Uint:
		return "a non-negative integer"
	case reflect.Float64, reflect.Float32:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	}
	return t.String()
}

// setPath applies one --set override (dotted path, `[i]` or a list element's
// name to pick from a list) to the YAML tree, creating mappings as needed.
func setPath(root *yaml.Node, path, value string) error {
	if path == "" {
		return fmt.Errorf("%w: --set needs key=value, got %q", ErrInvalid, short("="+value))
	}
	if strings.TrimSpace(value) == "" {
		// An unset shell variable (--set train.seed=$SEED) would otherwise
		// read as null and quietly keep the default.
		return fmt.Errorf("%w: --set %s: empty value (write %s=null for the default)", ErrInvalid, short(path), short(path))
	}
	var val yaml.Node
	if err := yaml.Unmarshal([]byte(value), &val); err != nil || len(val.Content) == 0 {
		val = yaml.Node{Kind: yaml.ScalarNode, Value: value}
	} else {
		val = *val.Content[0]
	}
	fromSet(&val)
	n := root
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			n.Content = []*yaml.Node{{Kind: yaml.MappingNode, Tag: "!!map"}}
		}
		n = n.Content[0]
	}
	segs := splitPath(path)
	for i, seg := range segs {
		last := i == len(segs)-1
		switch n.Kind {
		case yaml.MappingNode:
			var next *yaml.Node
			for j := 0; j+1 < len(n.Content); j += 2 {
				if n.Content[j].Value == seg {
					next = n.Content[j+1]
					if last {
						n.Content[j+1] = &val
					}
				}
			}
			if next == nil {
				next = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
				if last {
					next = &val
				}
				n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: seg}, next)
			}
			n = next
		case yaml.SequenceNode:
			j, err := seqIndex(n, seg)
			if err != nil {
				return fmt.Errorf("%w: --set %s: %v", ErrInvalid, short(path), err)
			}
			if last {
				n.Content[j] = &val
			}
			n = n.Content[j]
		default:
			return fmt.Errorf("%w: --set %s: %q is a value, not a mapping or list", ErrInvalid, short(path), short(strings.Join(segs[:i], ".")))
		}
	}
	return nil
}

// fromSet marks a --set value's nodes (line 0), so errors say "--set".
func fromSet(n *yaml.Node) {
	n.Line = 0
	for _, c := range n.Content {
		fromSet(c)
	}
}

func splitPath(p string) []string {
	p = strings.ReplaceAll(p, "[", ".")
	p = strings.ReplaceAll(p, "]", "")
	return strings.Split(p, ".")
}

// seqIndex finds a list element by index or by its `name` key.
func seqIndex(n *yaml.Node, seg string) (int, error) {
	if j, err := strconv.Atoi(seg); err == nil {
		if j < 0 || j >= len(n.Content) {
			return 0, fmt.Errorf("index %d out of range (the list has %d entries)", j, len(n.Content))
		}
		return j, nil
	}
	for j, c := range n.Content {
		if c.Kind != yaml.MappingNode {
			continue
		}
		for k := 0; k+1 < len(c.Content); k += 2 {
			if c.Content[k].Value == "name" && c.Content[k+1].Value == seg {
				return j, nil
			}
		}
	}
	return 0, fmt.Errorf("no list entry named %q", short(seg))
}
