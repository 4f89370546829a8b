package tests

import (
	"encoding/json"
	"os/exec"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/internal/testenv"
)

// builtinNames is what the Python client offers to explore on an SGD
// optimizer with momentum and weight decay and a module with dropout:
// every built-in hyperparameter it applies itself, besides callbacks.
const builtinNames = `
import json, torch
from hdet._attach import prepare
model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.1))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01)
_, values, _ = prepare(opt, 10, window=None, explore=None, alpha=None, spread=None, auto=None,
                       dropout=model, callbacks=None, by="test")
print(json.dumps(values.names()))
`

// The Python client applies exactly the rows of hparam.Builtins that say
// where it does (their PyTorch field).
func TestPythonClientAppliesTheBuiltinsThatSaySo(t *testing.T) {
	testenv.NeedTorch(t)
	out, err := exec.Command(testenv.Python, "-c", builtinNames).Output()
	require.NoError(t, err, "%s", out)
	var names []string
	require.NoError(t, json.Unmarshal(out, &names), "%s", out)
	var want []string
	for _, b := range hparam.Builtins {
		if b.PyTorch != "" {
			want = append(want, b.Name)
		}
	}
	slices.Sort(names)
	slices.Sort(want)
	assert.Equal(t, want, names, "python/hdet/_values.py and the PyTorch fields of hparam.Builtins disagree")
}
