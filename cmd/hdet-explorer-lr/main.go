// Command hdet-explorer-lr serves hdet's built-in "lr" explorer as a plugin.
package main

import (
	"github.com/hdet-dev/hdet/hparam/builtin"
	"github.com/hdet-dev/hdet/plugins/sdk"
)

func main() { sdk.ServeBuiltin(builtin.LR) }
