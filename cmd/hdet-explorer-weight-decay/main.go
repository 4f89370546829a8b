// Command hdet-explorer-weight-decay serves hdet's built-in "weight-decay" explorer as a plugin.
package main

import (
	"log"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/plugins/sdk"
)

func main() {
	e, err := hparam.NewBuiltinExplorer(hparam.BuiltinWeightDecay)
	if err != nil {
		log.Fatal(err)
	}
	sdk.Serve(e)
}
