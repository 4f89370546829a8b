package jsonopt

import (
	"reflect"
	"testing"
)

func TestOrAndName(t *testing.T) {
	v := 2.5
	if Or(&v, 1) != 2.5 || Or[float64](nil, 1) != 1 {
		t.Fatal("Or: a given field wins, a missing one takes the default")
	}
	f, _ := reflect.TypeOf(struct {
		A int `json:"max_lr,omitempty"`
	}{}).FieldByName("A")
	if got := Name(f); got != "max_lr" {
		t.Fatalf("Name = %q, want max_lr", got)
	}
}
