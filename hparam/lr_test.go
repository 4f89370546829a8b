package hparam

import (
	"testing"
)

func TestIsLR(t *testing.T) {
	for name, want := range map[string]bool{"lr": true, "lr/hidden": true, "lr/backbone": true, "lrx": false, "dropout": false, "": false} {
		if IsLR(name) != want {
			t.Errorf("IsLR(%q) = %v", name, !want)
		}
	}
}
