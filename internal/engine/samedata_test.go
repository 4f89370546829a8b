package engine

import (
	"testing"

	"github.com/hdet-dev/hdet/internal/plan"
	"github.com/stretchr/testify/assert"
)

// The same-data warning reads a window's first steps only where the
// replicas should draw their own batches: not in a search pass that the
// run restarts (the replicas share the script's batches there on purpose),
// nor in a first pass's window 0 (a worker script draws its first batch
// before it hears whether the run has a search pass); from window 1 of a
// run of one pass, and in the main pass from window 0, it does.
func TestSameDataWarningSkipsTheSharedSearch(t *testing.T) {
	for _, tc := range []struct {
		pass, index  int
		search, want bool
	}{
		{plan.PassSearch, 0, true, false},
		{plan.PassSearch, 3, true, false},
		{plan.PassSearch, 0, false, false},
		{plan.PassSearch, 1, false, true},
		{plan.PassMain, 0, false, true},
		{plan.PassMain, 5, false, true},
	} {
		l := &loop{pass: tc.pass}
		w := &window{index: tc.index, plan: plan.Plan{Window: tc.index, Pass: tc.pass, Search: tc.search}}
		assert.Equal(t, tc.want, l.checksData(w), "pass %d window %d search %v", tc.pass, tc.index, tc.search)
	}
}
