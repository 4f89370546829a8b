package reduce

import "testing"

func TestOpNamesAndValidity(t *testing.T) {
	for o, want := range map[Op]string{Sum: "sum", Max: "max", Min: "min", Op(7): "Op(7)"} {
		if got := o.String(); got != want {
			t.Errorf("%d: %q, want %q", int(o), got, want)
		}
		if o.Valid() != (want != "Op(7)") {
			t.Errorf("%v: Valid() = %v", o, o.Valid())
		}
	}
}
