// Command hdet-explorer-lr serves hdet's built-in "lr" explorer as a plugin.
package main

import (
	"log"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/plugins/sdk"
)

func main() {
	e, err := hparam.NewBuiltinExplorer(hparam.BuiltinLR)
	if err != nil {
		log.Fatal(err)
	}
	sdk.Serve(e)
}
