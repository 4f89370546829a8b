// Command hdet-explorer-dropout serves hdet's built-in "dropout" explorer as a plugin.
package main

import (
	"github.com/hdet-dev/hdet/hparam/builtin"
	"github.com/hdet-dev/hdet/plugins/sdk"
)

func main() { sdk.ServeBuiltin(builtin.Dropout) }
