// Command testhost is a minimal hdet stand-in for the orphan tests: it opens
// the explorer binary given as its argument, initialises it with the config
// given as the optional second argument, prints "pid N" (the explorer's pid)
// and waits. On SIGINT it closes the explorer and exits 0, as hdet does
// after its checkpoint; SIGKILL leaves the explorer to notice on its own.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/rs/zerolog"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/plugins"
)

func main() {
	if len(os.Args) < 2 || len(os.Args) > 3 {
		fmt.Fprintln(os.Stderr, "usage: testhost EXPLORER_BINARY [CONFIG_JSON]")
		os.Exit(2)
	}
	config := "{}"
	if len(os.Args) == 3 {
		config = os.Args[2]
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt)
	ctx := context.Background()
	x, err := plugins.Open(ctx, plugins.Spec{Binary: os.Args[1]}, zerolog.New(os.Stderr), nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := x.Init(ctx, hparam.Setup{Name: "test", Config: []byte(config), Ranks: 2, TotalSteps: 10, WindowSteps: 2}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("pid %d\n", x.Pid())
	<-sig
	_ = x.Close()
}
