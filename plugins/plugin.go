// Package plugins runs hyperparameter explorers as go-plugin processes: the
// gRPC adapters between hparam.Explorer and the explorer protocol
// (plugins/proto), the host side that launches, pins, times out and restarts
// explorer binaries, and discovery of the binaries. Plugin authors use
// plugins/sdk.
package plugins

import (
	"context"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/plugins/proto"
)

// Handshake is shared by hdet and every explorer binary. ProtocolVersion
// changes whenever explorer.proto changes incompatibly, so an old binary is
// refused at start instead of failing mid-run.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "HDET_EXPLORER_PLUGIN",
	MagicCookieValue: "5c0b1b8e-hdet-explorer",
}

// PluginName is the name the explorer is dispensed under.
const PluginName = "explorer"

// ExplorerPlugin is the go-plugin glue for hparam.Explorer. Impl is only set
// on the plugin side. It speaks gRPC only.
type ExplorerPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	Impl hparam.Explorer
}

var _ plugin.GRPCPlugin = (*ExplorerPlugin)(nil)

// GRPCServer registers the explorer on the plugin's gRPC server.
func (p *ExplorerPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	proto.RegisterExplorerServer(s, &GRPCServer{Impl: p.Impl})
	return nil
}

// GRPCClient returns the host's hparam.Explorer talking to the plugin.
func (p *ExplorerPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return NewGRPCClient(c), nil
}

// PluginSet is the set hdet and explorer binaries agree on.
func PluginSet(impl hparam.Explorer) plugin.PluginSet {
	return plugin.PluginSet{PluginName: &ExplorerPlugin{Impl: impl}}
}
