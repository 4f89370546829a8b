package bridge

// The worker process: its start, environment, exit and kill.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hdet-dev/hdet/internal/forkthread"
)

func (w *Worker) start(ctx context.Context) error {
	o := &w.opts
	var id [8]byte
	_, _ = rand.Read(id[:])
	sock := fmt.Sprintf("@hdet-%d-r%d-%s", os.Getpid(), o.Rank, hex.EncodeToString(id[:]))
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return w.errorf("starting", "listen on %s: %w", sock, err)
	}
	w.ln = ln
	if w.shm, err = newSHM(fmt.Sprintf("hdet-rank%d", o.Rank)); err != nil {
		return w.errorf("starting", "%w", err)
	}
	pkg, err := packageDir()
	if err != nil {
		return w.errorf("starting", "%w", err)
	}

	// The script starts with SIGUSR1 ignored: under srun the signal that asks
	// hdet to checkpoint and stop (hdet sbatch's script passes it to the step)
	// reaches every process of each task, the script too, whose default is
	// to die of it, and hdet stops the script itself at the next window end.
	// Go cannot set a child's signal disposition; a shell's empty trap sets
	// SIG_IGN, which exec keeps. A script may still install its own handler.
	cmd := exec.Command("/bin/sh", append([]string{"-c", `trap '' USR1; exec "$@"`, "hdet-worker"}, o.Command...)...)
	cmd.Env = o.environ(sock, pkg)
	w.out = []*lineWriter{newLineWriter(o.Stdout, o.Rank), newLineWriter(o.Stderr, o.Rank)}
	cmd.Stdout = w.out[0]
	cmd.Stderr = io.MultiWriter(w.out[1], w.stderr)
	cmd.ExtraFiles = []*os.File{w.shm.file} // bufferFD
	// Its own process group, so that Close and failures also stop what the
	// script forked (data loader workers); Pdeathsig so that it dies with us.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 3 * time.Second // a forked child holding stderr must not block Wait
	if err := forkthread.Start(cmd); err != nil {
		return w.errorf("starting", "%w: %v", ErrExited, err)
	}
	w.cmd = cmd
	go func() {
		_ = cmd.Wait() // the exit status is read from ProcessState
		w.exitState = cmd.ProcessState
		for _, l := range w.out {
			l.flush()
		}
		close(w.exited)
	}()
	return w.handshake(ctx)
}

// environ is the worker's environment: ours, minus the variables we own,
// plus the HDET_* ones, torch.distributed's env:// rendezvous as torchrun
// sets it for the script's world (the run, or its replica: so
// DistributedSampler and init_process_group work unchanged), and the
// embedded hdet package first on PYTHONPATH.
func (o *Options) environ(sock, pkg string) []string {
	set := map[string]string{
		"HDET_SOCKET":       sock,
		"HDET_BUFFER_FD":    strconv.Itoa(bufferFD),
		"HDET_PROTOCOL":     strconv.Itoa(ProtocolVersion),
		"HDET_RANK":         strconv.Itoa(o.Rank),
		"HDET_WORLD_SIZE":   strconv.Itoa(o.WorldSize),
		"HDET_LOCAL_RANK":   strconv.Itoa(o.LocalRank),
		"HDET_REPLICA_SIZE": strconv.Itoa(max(1, o.ReplicaSize)),
		"RANK":              strconv.Itoa(o.torchRank()),
		"WORLD_SIZE":        strconv.Itoa(o.torchSize()),
		"LOCAL_RANK":        strconv.Itoa(o.torchLocalRank()),
		"LOCAL_WORLD_SIZE":  strconv.Itoa(o.torchLocalSize()),
		"MASTER_ADDR":       o.MasterAddr,
		"MASTER_PORT":       strconv.Itoa(o.MasterPort),
		"PYTHONPATH":        pkg,
	}
	if p := os.Getenv("PYTHONPATH"); p != "" {
		set["PYTHONPATH"] = pkg + ":" + p
	}
	if o.SyncMode != "" {
		set["HDET_SYNC_MODE"] = o.SyncMode
	}
	if o.RunDir != "" {
		set["HDET_RUN_DIR"] = o.RunDir
	}
	set["HDET_PASS"] = PassName(o.Pass)
	if o.ResumeState != "" {
		set["HDET_RESUME_STATE"], set["HDET_RESUME_STEP"] = o.ResumeState, strconv.Itoa(o.ResumeStep)
	}
	if o.GPU != "" {
		set["CUDA_VISIBLE_DEVICES"] = o.GPU
	}
	if _, ok := os.LookupEnv("OMP_NUM_THREADS"); !ok && o.LocalSize > 1 {
		set["OMP_NUM_THREADS"] = "1"
	}
	// A worker killed by a fatal signal (a native crash, an abort in
	// torch's teardown) then prints every thread's Python stack, and
	// whether the interpreter was finalizing, into the stderr hdet quotes.
	if _, ok := os.LookupEnv("PYTHONFAULTHANDLER"); !ok {
		set["PYTHONFAULTHANDLER"] = "1"
	}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if _, ours := set[k]; ours || k == "HDET_SYNC_MODE" || k == "HDET_RUN_DIR" || strings.HasPrefix(k, "HDET_RESUME_") {
			continue
		}
		env = append(env, kv)
	}
	for k, v := range set {
		env = append(env, k+"="+v)
	}
	return append(env, o.Env...)
}

// exitError explains a closed connection by the exit that normally follows.
func (w *Worker) exitError() error {
	select {
	case <-w.exited:
		return fmt.Errorf("%w (%s)", ErrExited, describeExit(w.exitState))
	case <-time.After(exitGrace):
		return fmt.Errorf("%w: it closed its connection but is still running", ErrProtocol)
	}
}

func describeExit(s *os.ProcessState) string {
	if s == nil {
		return "exit status unknown"
	}
	if ws, ok := s.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return fmt.Sprintf("killed by signal %d (%v)", int(ws.Signal()), ws.Signal())
	}
	return fmt.Sprintf("exit status %d", s.ExitCode())
}

func (w *Worker) kill() {
	if w.cmd != nil && w.cmd.Process != nil {
		_ = syscall.Kill(-w.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// interpreter is the program hdet started for the script, as PATH finds it.
func (o *Options) interpreter() string {
	if p, err := exec.LookPath(o.Command[0]); err == nil {
		return p
	}
	return o.Command[0]
}

// whyNoConnection explains a script that exited before connecting, from
// what it wrote to stderr.
func (w *Worker) whyNoConnection() string {
	py, err := w.opts.interpreter(), w.stderr.String()
	switch {
	case strings.Contains(err, "No module named 'torch'"):
		return fmt.Sprintf("the script's Python, %s, has no torch: install torch into it (pip install torch), or name a Python that has it: hdet run --worker -- /path/to/env/bin/python train.py", py)
	case strings.Contains(err, "No module named 'hdet"):
		return fmt.Sprintf("%s could not import the hdet package hdet puts first on its PYTHONPATH; does the script replace PYTHONPATH or sys.path?", py)
	case strings.Contains(err, "Traceback (most recent call last)"):
		return fmt.Sprintf("the script (run by %s) raised before it connected to hdet, which it does at its first optimizer step", py)
	}
	return fmt.Sprintf("the script (run by %s) ended without an optimizer step under hdet: it must call hdet.attach(optimizer, total_steps) and train", py)
}

// relevant is what of a worker's stderr explains its end: the last Python
// traceback, from its first line to the exception, or faulthandler's
// report of a fatal signal, whichever came last; else the last lines that
// are not warnings (a warning and the source line it quotes).
func relevant(stderr string) string {
	lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "Fatal Python error:") {
			return fatal(lines, i)
		}
		if strings.HasPrefix(lines[i], "Traceback (most recent call last):") {
			return strings.Join(lines[i:], "\n")
		}
	}
	var keep []string
	warning := false
	for _, l := range lines {
		indented := strings.HasPrefix(l, " ") || strings.HasPrefix(l, "\t")
		warning = strings.Contains(l, "Warning: ") || (warning && indented)
		if !warning && strings.TrimSpace(l) != "" {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep[max(0, len(keep)-maxQuoted):], "\n")
}

// maxQuoted bounds the lines relevant quotes when there is no traceback.
const maxQuoted = 12

// fatal quotes faulthandler's report that starts at lines[i]: the native
// message printed just before it (C++'s "terminate called ..."), then the
// threads' stacks, without the list of extension modules (one long line).
func fatal(lines []string, i int) string {
	if i > 0 && strings.TrimSpace(lines[i-1]) != "" {
		i--
	}
	var keep []string
	for _, l := range lines[i:] {
		if !strings.HasPrefix(l, "Extension modules:") && len(keep) < maxFatal {
			keep = append(keep, l)
		}
	}
	return strings.TrimSpace(strings.Join(keep, "\n"))
}

// maxFatal bounds the lines of a faulthandler report relevant quotes: the
// crashing thread's stack comes first.
const maxFatal = 40
