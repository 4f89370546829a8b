package plugins

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/hdet-dev/hdet/internal/forkthread"
	"github.com/hdet-dev/hdet/plugins/contract"
)

// groupRunner is go-plugin's runner for one explorer process (Linux). The
// explorer leads a process group of its own, and the whole group is killed
// on every way out: Kill (close, timeout, a failed handshake) and the
// leader's own exit, whose zombie keeps the group's id from being reused
// until the group is killed. hdet's death is covered twice: the kernel
// sends the leader SIGTERM (Pdeathsig, from a thread that never exits),
// which ends a wrapper shell or an explorer without the SDK, and the
// lifeline pipe tells an SDK explorer, however deep behind wrapper scripts,
// to end its group.
type groupRunner struct {
	binary string
	env    []string

	stdout, stderr *os.File // read ends, go-plugin's to drain
	lifeline       *os.File // the write end; hdet holds the only copy
	cmd            *exec.Cmd
	pid            int

	mu      sync.Mutex
	reaped  bool
	waitErr error
	exited  chan struct{}
}

func newGroupRunner(binary string, env []string) *groupRunner {
	return &groupRunner{binary: binary, env: env, exited: make(chan struct{})}
}

// lifelineFD is the explorer's descriptor of the lifeline: the first of
// exec.Cmd.ExtraFiles.
const lifelineFD = 3

func (r *groupRunner) Start(context.Context) error {
	var pipes [6]*os.File // stdout r/w, stderr r/w, lifeline r/w
	for i := 0; i < len(pipes); i += 2 {
		var err error
		if pipes[i], pipes[i+1], err = os.Pipe(); err != nil {
			closeAll(pipes[:])
			return err
		}
	}
	cmd := exec.Command(r.binary)
	cmd.Env = append(r.env, contract.EnvLifeline+"="+strconv.Itoa(lifelineFD))
	cmd.Stdout, cmd.Stderr = pipes[1], pipes[3]
	cmd.ExtraFiles = []*os.File{pipes[4]}
	// SIGTERM, not SIGKILL: an SDK explorer ignores it and ends its whole
	// group through the lifeline, which a killed leader could not do.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	err := startOnForkThread(cmd)
	closeAll([]*os.File{pipes[1], pipes[3], pipes[4]}) // the child's copies
	if err != nil {
		closeAll([]*os.File{pipes[0], pipes[2], pipes[5]})
		return err
	}
	r.stdout, r.stderr, r.lifeline, r.cmd, r.pid = pipes[0], pipes[2], pipes[5], cmd, cmd.Process.Pid
	go r.reap()
	return nil
}

func closeAll(fs []*os.File) {
	for _, f := range fs {
		if f != nil {
			_ = f.Close()
		}
	}
}

// reap waits for the leader to exit, kills what is left of its group while
// the leader's zombie still holds the group id, then reaps the leader.
func (r *groupRunner) reap() {
	var info unix.Siginfo
	for {
		if err := unix.Waitid(unix.P_PID, r.pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != unix.EINTR {
			break
		}
	}
	r.mu.Lock()
	_ = syscall.Kill(-r.pid, syscall.SIGKILL)
	r.waitErr = r.cmd.Wait()
	r.reaped = true
	r.mu.Unlock()
	_ = r.lifeline.Close()
	close(r.exited)
}

// Wait returns once the leader is reaped. go-plugin calls it after draining
// stdout and stderr, so they are closed here.
func (r *groupRunner) Wait(context.Context) error {
	<-r.exited
	closeAll([]*os.File{r.stdout, r.stderr})
	return r.waitErr
}

// Kill kills the explorer's whole process group; reap does the rest.
func (r *groupRunner) Kill(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pid > 0 && !r.reaped {
		_ = syscall.Kill(-r.pid, syscall.SIGKILL)
	}
	return nil
}

func (r *groupRunner) Stdout() io.ReadCloser { return r.stdout }
func (r *groupRunner) Stderr() io.ReadCloser { return r.stderr }
func (r *groupRunner) Name() string          { return r.binary }
func (r *groupRunner) ID() string            { return strconv.Itoa(r.pid) }

func (r *groupRunner) PluginToHost(network, addr string) (string, string, error) {
	return network, addr, nil
}

func (r *groupRunner) HostToPlugin(network, addr string) (string, string, error) {
	return network, addr, nil
}

// elfMachine is the ELF machine of the architectures hdet builds for.
var elfMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "ppc64le": elf.EM_PPC64}

// Diagnose explains a start that produced no handshake line; go-plugin adds
// it to its "Unrecognized remote plugin message" error.
func (r *groupRunner) Diagnose(context.Context) string {
	if f, err := elf.Open(r.binary); err == nil {
		defer f.Close()
		if want, ok := elfMachine[runtime.GOARCH]; ok && f.Machine != want {
			return fmt.Sprintf("%s is built for %s; this machine runs %s: rebuild it here", r.binary, f.Machine, runtime.GOARCH)
		}
	}
	how := "its first line on stdout was not go-plugin's handshake"
	select {
	case <-r.exited:
		how = fmt.Sprintf("it exited before its handshake (%v)", r.waitErr)
	default:
	}
	return fmt.Sprintf("%s did not start as an hdet explorer: %s. %s", r.binary, how, startHint)
}

// startHint says what an explorer, or a script that wraps one, must do.
const startHint = "An explorer calls sdk.Serve (go-plugin's Serve) first thing and writes nothing else to stdout; " +
	"a wrapper script must not write to stdout either and should start the explorer with exec (exec /path/to/explorer \"$@\"); " +
	"run by hand, an explorer says it is a plugin"

// startOnForkThread starts an explorer so that it dies with hdet (forkthread).
func startOnForkThread(cmd *exec.Cmd) error {
	err := forkthread.Start(cmd)
	if errors.Is(err, os.ErrPermission) {
		return fmt.Errorf("%w: %w", ErrNotExecutable, err)
	}
	return err
}
