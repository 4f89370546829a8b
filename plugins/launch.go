// Package plugins is hdet's side of the explorer plugins: it launches
// explorer binaries (each in a process group of its own, ended with it),
// pins them by checksum, times their calls out and restarts them, finds them
// in the plugin directory and checks them. What hdet and an explorer agree
// on lives in plugins/contract; explorer authors use plugins/sdk.
package plugins

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"github.com/hashicorp/go-plugin/runner"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/plugins/contract"
)

// Spec says which explorer binary to run for one hyperparameter instance.
type Spec struct {
	Name     string        // instance name ("lr", "lr/hidden"), for logs and events
	Binary   string        // path of the explorer executable (see Resolve)
	Checksum string        // optional SHA-256 of Binary in hex ("sha256:" prefix allowed); when set, a different binary is refused
	Timeout  time.Duration // deadline of every call; 0 means DefaultTimeout
	// Handshake is the deadline from launch to go-plugin's handshake line;
	// past it the explorer's process group is killed. 0 means StartTimeout.
	Handshake time.Duration
}

// DefaultTimeout bounds one explorer call when Spec.Timeout is zero. Explorer
// calls are tiny; a call this slow means the explorer is stuck.
const DefaultTimeout = 10 * time.Second

// StartTimeout bounds launching an explorer process up to its handshake
// when Spec.Handshake is zero.
const StartTimeout = 30 * time.Second

var (
	// ErrChecksumMismatch: the binary's SHA-256 is not the pinned one. hdet
	// exits 2 on it (a configuration error).
	ErrChecksumMismatch = errors.New("explorer binary does not match its pinned SHA-256")
	// ErrBadChecksum: the pinned checksum is not 64 hex digits.
	ErrBadChecksum = errors.New("checksum must be 64 hex digits of SHA-256")
	// ErrNotExecutable: the binary path is not an executable regular file.
	ErrNotExecutable = errors.New("not an executable file")
	// ErrNotExplorer: the binary exited, or wrote something other than
	// go-plugin's handshake, before its handshake: the config names a
	// program that is not an explorer (hdet exits 2). A start that times
	// out is not this error: a loaded node can be slow.
	ErrNotExplorer = errors.New("not an hdet explorer")
)

// process is one running explorer binary.
type process struct {
	client   *plugin.Client
	explorer hparam.Explorer
	pid      int
}

// kill ends the explorer: go-plugin closes the connection and waits briefly
// for a clean exit, then kills; either way the group runner ends the rest
// of the explorer's process group.
func (p *process) kill() { p.client.Kill() }

// parseChecksum decodes a hex SHA-256, with an optional "sha256:" prefix.
func parseChecksum(s string) ([]byte, error) {
	sum, err := hex.DecodeString(strings.TrimPrefix(strings.TrimSpace(s), "sha256:"))
	if err != nil || len(sum) != sha256.Size {
		return nil, fmt.Errorf("%w: %q", ErrBadChecksum, s)
	}
	return sum, nil
}

// checkExecutable fails with ErrNotExecutable unless path is an executable
// regular file.
func checkExecutable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotExecutable, err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%w: %s (mode %s)", ErrNotExecutable, path, fi.Mode())
	}
	return nil
}

// checkPinned refuses spec's binary unless it has the pinned SHA-256. hdet
// checks it itself because go-plugin's check does not apply to a runner.
func checkPinned(spec Spec) error {
	if spec.Checksum == "" {
		return nil
	}
	want, err := parseChecksum(spec.Checksum)
	if err != nil {
		return err
	}
	got, err := FileSHA256(spec.Binary)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotExecutable, err)
	}
	if got != hex.EncodeToString(want) {
		return fmt.Errorf("%w: %s has sha256:%s, the config pins %s", ErrChecksumMismatch, spec.Binary, got, spec.Checksum)
	}
	return nil
}

// start launches spec's binary in a process group of its own and connects
// to it over gRPC with mutual TLS. Past the handshake deadline the group is
// killed and start fails; it never waits longer.
func start(spec Spec, hl hclog.Logger) (*process, error) {
	if err := checkExecutable(spec.Binary); err != nil {
		return nil, err
	}
	if err := checkPinned(spec); err != nil {
		return nil, err
	}
	deadline := spec.Handshake
	if deadline <= 0 {
		deadline = StartTimeout
	}
	var gr *groupRunner
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig: contract.Handshake,
		Plugins:         contract.PluginSet(nil),
		RunnerFunc: func(_ hclog.Logger, cmd *exec.Cmd, _ string) (runner.Runner, error) {
			gr = newGroupRunner(spec.Binary, cmd.Env)
			return gr, nil
		},
		AllowedProtocols: contract.Protocols,
		AutoMTLS:         true,
		Managed:          true,
		StartTimeout:     deadline,
		Logger:           hl,
	})
	t0 := time.Now()
	rpc, err := client.Client()
	if err != nil {
		client.Kill()
		if time.Since(t0) >= deadline {
			return nil, fmt.Errorf("start explorer %s: no go-plugin handshake within %s, so its process group was killed. %s: %w", spec.Binary, deadline, startHint, err)
		}
		return nil, fmt.Errorf("start explorer %s (%w): %w", spec.Binary, ErrNotExplorer, err)
	}
	raw, err := rpc.Dispense(contract.PluginName)
	if err != nil {
		client.Kill()
		return nil, fmt.Errorf("start explorer %s: %w", spec.Binary, err)
	}
	ex, ok := raw.(hparam.Explorer)
	if !ok {
		client.Kill()
		return nil, fmt.Errorf("start explorer %s: dispensed %T, not an explorer", spec.Binary, raw)
	}
	return &process{client: client, explorer: ex, pid: gr.pid}, nil
}

// KillAll kills every explorer process this program started. Call it on any
// exit path that skips the explorers' Close, such as a signal handler.
func KillAll() { plugin.CleanupClients() }
