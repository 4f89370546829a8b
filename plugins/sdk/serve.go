// Package sdk is what an explorer binary needs: implement hparam.Explorer (or
// the smaller Rule) and call Serve from main.
//
//	func main() { sdk.Serve(sdk.FromRule(myRule{})) }
//
// Serve speaks hdet's explorer protocol (package contract) over go-plugin's
// gRPC transport. An explorer's lifetime belongs to hdet: Serve ignores
// SIGINT, SIGTERM, SIGUSR1 and SIGHUP (Slurm and a terminal signal the
// whole process group, and hdet must checkpoint first) and ends its process
// group when hdet closes the connection, kills it, or is itself gone.
package sdk

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/hashicorp/go-plugin"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/hparam/builtin"
	"github.com/hdet-dev/hdet/plugins/contract"
)

// Serve serves e to hdet and does not return. Run outside hdet, it prints
// that it is a plugin and exits 1.
func Serve(e hparam.Explorer) {
	signal.Ignore(syscall.SIGTERM, syscall.SIGUSR1, syscall.SIGINT, syscall.SIGHUP)
	watchLifeline()
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: contract.Handshake,
		Plugins:         contract.PluginSet(e),
		GRPCServer:      plugin.DefaultGRPCServer,
	})
	os.Exit(0)
}

// ServeBuiltin serves one of hdet's built-in explorers (builtin.LR,
// ...): the whole main of cmd/hdet-explorer-*.
func ServeBuiltin(kind string) {
	e, err := builtin.NewExplorer(kind)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	Serve(e)
}

// watchLifeline ends the explorer's process group, itself and whatever it
// started, once hdet is gone: the pipe hdet passed (contract.EnvLifeline)
// reaches end of file when hdet's write end closes, whichever way hdet died
// and whether or not a wrapper script stands between them. hdet starts
// every explorer in a process group of its own, so the group is the
// explorer's.
func watchLifeline() {
	fd, err := strconv.Atoi(os.Getenv(contract.EnvLifeline))
	if err != nil || fd < 3 {
		return // not started by hdet: plugin.Serve says so and exits
	}
	syscall.CloseOnExec(fd) // the explorer's own children need not hold it
	f := os.NewFile(uintptr(fd), "hdet-lifeline")
	go func() {
		_, _ = io.Copy(io.Discard, f)
		_ = syscall.Kill(0, syscall.SIGKILL)
		os.Exit(3)
	}()
}
