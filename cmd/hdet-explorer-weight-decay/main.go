// Command hdet-explorer-weight-decay serves hdet's built-in "weight-decay" explorer as a plugin.
package main

import (
	"github.com/hdet-dev/hdet/hparam/builtin"
	"github.com/hdet-dev/hdet/plugins/sdk"
)

func main() { sdk.ServeBuiltin(builtin.WeightDecay) }
