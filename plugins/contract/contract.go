// Package contract is what hdet and an explorer binary agree on: the
// explorer protocol (package proto, from explorer.proto), the go-plugin
// handshake, the plugin set, and the gRPC adapters between hparam.Explorer
// and the protocol. It is small on purpose: explorer binaries link it and
// the SDK, never the host's launcher, discovery or check (package plugins).
package contract

import (
	"context"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/plugins/contract/proto"
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

// Protocols are the transports hdet accepts: gRPC only (the plugin set has
// no net/rpc side), so an explorer can be written in any language.
var Protocols = []plugin.Protocol{plugin.ProtocolGRPC}

// EnvLifeline names the environment variable that gives an explorer the
// number of an inherited file descriptor: the read end of a pipe whose
// write end only hdet holds. It reaches end of file when hdet is gone, however
// it died, and through any wrapper script; the SDK then ends the explorer's
// process group.
const EnvLifeline = "HDET_PLUGIN_LIFELINE_FD"

// PluginSet is the set hdet and explorer binaries agree on.
func PluginSet(impl hparam.Explorer) plugin.PluginSet {
	return plugin.PluginSet{PluginName: &ExplorerPlugin{Impl: impl}}
}
