package plugins

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/hdet-dev/hdet/hparam"
)

// Spec says which explorer binary to run for one hyperparameter instance.
type Spec struct {
	Name     string        // instance name ("lr", "lr/hidden"), for logs and events
	Binary   string        // path of the explorer executable (see Resolve)
	Checksum string        // optional SHA-256 of Binary in hex ("sha256:" prefix allowed); when set, a different binary is refused
	Timeout  time.Duration // deadline of every call; 0 means DefaultTimeout
}

// DefaultTimeout bounds one explorer call when Spec.Timeout is zero. Explorer
// calls are tiny; a call this slow means the explorer is stuck.
const DefaultTimeout = 10 * time.Second

// StartTimeout bounds launching an explorer process up to its handshake.
const StartTimeout = 30 * time.Second

// EnvParentPID tells an explorer which process launched it, so the SDK can
// exit when that process is gone even if it died before the explorer started
// watching.
const EnvParentPID = "HDET_PLUGIN_PARENT_PID"

var (
	// ErrChecksumMismatch: the binary's SHA-256 is not the pinned one. hdet
	// exits 2 on it (a configuration error).
	ErrChecksumMismatch = errors.New("explorer binary does not match its pinned SHA-256")
	// ErrBadChecksum: the pinned checksum is not 64 hex digits.
	ErrBadChecksum = errors.New("checksum must be 64 hex digits of SHA-256")
	// ErrNotExecutable: the binary path is not an executable regular file.
	ErrNotExecutable = errors.New("not an executable file")
)

// process is one running explorer binary.
type process struct {
	client   *plugin.Client
	explorer hparam.Explorer
	pid      int
}

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

// start launches spec's binary and connects to it over gRPC with mutual TLS.
func start(spec Spec, hl hclog.Logger) (*process, error) {
	if err := checkExecutable(spec.Binary); err != nil {
		return nil, err
	}
	var secure *plugin.SecureConfig
	if spec.Checksum != "" {
		sum, err := parseChecksum(spec.Checksum)
		if err != nil {
			return nil, err
		}
		secure = &plugin.SecureConfig{Checksum: sum, Hash: sha256.New()}
	}
	cmd := exec.Command(spec.Binary)
	// SkipHostEnv below, so that our parent pid comes last and wins over an
	// inherited value.
	cmd.Env = append(os.Environ(), EnvParentPID+"="+strconv.Itoa(os.Getpid()))
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  Handshake,
		Plugins:          PluginSet(nil),
		Cmd:              cmd,
		SkipHostEnv:      true,
		SecureConfig:     secure,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		Managed:          true,
		StartTimeout:     StartTimeout,
		Logger:           hl,
	})
	rpc, err := client.Client()
	if err != nil {
		client.Kill()
		if errors.Is(err, plugin.ErrChecksumsDoNotMatch) {
			got, _ := FileSHA256(spec.Binary)
			return nil, fmt.Errorf("%w: %s has sha256:%s, the config pins %s", ErrChecksumMismatch, spec.Binary, got, spec.Checksum)
		}
		return nil, fmt.Errorf("start explorer %s: %w", spec.Binary, err)
	}
	raw, err := rpc.Dispense(PluginName)
	if err != nil {
		client.Kill()
		return nil, fmt.Errorf("start explorer %s: %w", spec.Binary, err)
	}
	ex, ok := raw.(hparam.Explorer)
	if !ok {
		client.Kill()
		return nil, fmt.Errorf("start explorer %s: dispensed %T, not an explorer", spec.Binary, raw)
	}
	p := &process{client: client, explorer: ex}
	if rc := client.ReattachConfig(); rc != nil {
		p.pid = rc.Pid
	}
	return p, nil
}

// KillAll kills every explorer process this program started. Call it on any
// exit path that skips the explorers' Close, such as a signal handler.
func KillAll() { plugin.CleanupClients() }
