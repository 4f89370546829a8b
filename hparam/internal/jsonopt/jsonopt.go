// Package jsonopt holds what hparam's config decoders share: optional
// fields (nil keeps the default) and the JSON name of a struct field.
package jsonopt

import (
	"reflect"
	"strings"
)

// Or is *p, or d when the field was not given.
func Or[T any](p *T, d T) T {
	if p != nil {
		return *p
	}
	return d
}

// Name is the field's key in JSON (its tag's name).
func Name(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	return name
}
