// Command hdet-explorer-dropout serves hdet's built-in "dropout" explorer as a plugin.
package main

import (
	"log"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/plugins/sdk"
)

func main() {
	e, err := hparam.NewBuiltinExplorer(hparam.BuiltinDropout)
	if err != nil {
		log.Fatal(err)
	}
	sdk.Serve(e)
}
