// Package sdk is what an explorer binary needs: implement hparam.Explorer (or
// the smaller Rule) and call Serve from main.
//
//	func main() { sdk.Serve(sdk.FromRule(myRule{})) }
//
// Serve speaks hdet's explorer protocol over go-plugin's gRPC transport. An
// explorer's lifetime belongs to hdet: Serve ignores SIGINT, SIGTERM and
// SIGUSR1 (Slurm and a terminal signal the whole process group, and hdet must
// checkpoint first) and exits when hdet closes the connection, kills it, or
// is itself gone.
package sdk

import (
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/hashicorp/go-plugin"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/plugins"
)

// parentPoll is how often Serve checks that hdet is still there, in case the
// kernel's parent-death signal did not fire (non-Linux, or a race at start).
const parentPoll = 500 * time.Millisecond

// Serve serves e to hdet and does not return. Run outside hdet, it prints
// that it is a plugin and exits 1.
func Serve(e hparam.Explorer) {
	signal.Ignore(syscall.SIGTERM, syscall.SIGUSR1, syscall.SIGINT)
	watchParent(parentPID())
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: plugins.Handshake,
		Plugins:         plugins.PluginSet(e),
		GRPCServer:      plugin.DefaultGRPCServer,
	})
	os.Exit(0)
}

// parentPID is the pid hdet passed in the environment, else the current
// parent's.
func parentPID() int {
	if pid, err := strconv.Atoi(os.Getenv(plugins.EnvParentPID)); err == nil && pid > 0 {
		return pid
	}
	return os.Getppid()
}

// watchParent makes the process exit once parent is no longer its parent:
// hdet died (even by SIGKILL) and the process was re-parented.
func watchParent(parent int) {
	armParentDeathSignal(parent)
	go func() {
		for range time.Tick(parentPoll) {
			if os.Getppid() != parent {
				os.Exit(3)
			}
		}
	}()
}
