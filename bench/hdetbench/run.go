package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hdet-dev/hdet/internal/atomicfile"
)

// ErrRun is wrapped by every failed benchmark run.
var ErrRun = errors.New("benchmark run failed")

// runner launches runs one at a time and remembers the command lines for
// the doc.
type runner struct {
	np     int
	mpirun []string // the launcher and its flags, before the program
	hdet   string   // path of the hdet binary
	root   string   // where run directories go
	log    func(format string, a ...any)
}

// mpirunArgs is the launcher prefix every study uses; as root Open MPI also
// needs OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM), set by main.
func mpirunArgs(np int) []string {
	return []string{"mpirun", "-np", fmt.Sprint(np), "--oversubscribe", "--bind-to", "none"}
}

// launch is one run: its command, how it is started, what decides its
// reuse and how its result is read. Setups build them (setup.go), so a new
// workload only says what its commands are.
type launch struct {
	Name string                    // the run directory, under the runner's root
	Cmd  func(dir string) []string // the command, given the run directory
	// Procs > 0 starts Procs copies of Cmd with torchrun's environment
	// (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, and
	// OMP_NUM_THREADS=1 for several unless it is set), as torchrun
	// --nproc_per_node would; rank 0's output is the run's. 0
	// starts Cmd once (mpirun ...).
	Procs int
	// Key is what of the command decides reuse (never the run directory);
	// nil: the run is made afresh every time.
	Key         []string
	Files       []string // files whose bytes the key holds (configs, scripts)
	Fingerprint string   // what else the numbers depend on (a canary's checksum, the program's hash)
	// Read reads the finished run from its directory and its output.
	Read func(dir, out string, diverged bool) (result, error)
}

// launch runs l, or reuses a finished run whose key matches: the run
// directory is wiped first, so a stale file can never be read as this run's.
func (rn *runner) launch(ctx context.Context, l launch) (result, error) {
	dir := filepath.Join(rn.root, l.Name)
	cmd := l.Cmd(dir)
	var key string
	if l.Key != nil {
		var err error
		if key, err = cacheKey(max(rn.np, l.Procs), l.Files, l.Fingerprint, l.Key); err != nil {
			return result{}, fmt.Errorf("%w: %s: %w", ErrRun, l.Name, err)
		}
		if res, ok := reuse(dir, key, l.Read); ok {
			rn.log("  reused %s", dir)
			res.Command, res.Cached = commandText(cmd, l.Procs, 0), true
			return res, nil
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return result{}, fmt.Errorf("%w: %s: %w", ErrRun, l.Name, err)
	}
	out, cmdline, elapsed, err := rn.start(ctx, cmd, l.Procs)
	if mkErr := os.MkdirAll(dir, 0o755); mkErr == nil {
		_ = atomicfile.Write(filepath.Join(dir, logFile), []byte(out))
	}
	diverged := err != nil && strings.Contains(out, allUnhealthy)
	if err != nil && !diverged {
		return result{}, fmt.Errorf("%w: %s: %w\n%s", ErrRun, cmdline, err, tail(out, 2000))
	}
	res, err := l.Read(dir, out, diverged)
	if err != nil {
		return result{}, fmt.Errorf("%w: %s: %w", ErrRun, cmdline, err)
	}
	res.Command, res.ProcessSeconds = cmdline, elapsed
	if key != "" {
		if err := saveKey(dir, key, diverged, elapsed); err != nil {
			return result{}, fmt.Errorf("%w: %s: %w", ErrRun, l.Name, err)
		}
	}
	return res, nil
}

// logFile, in a run directory, holds the run's output (rank 0's for a
// torchrun-style start).
const logFile = "hdetbench.log"

// start runs cmd (procs copies with torchrun's environment when procs >
// 0) and returns its output, its command line and its wall time.
func (rn *runner) start(ctx context.Context, cmd []string, procs int) (string, string, float64, error) {
	if procs == 0 {
		cmdline := strings.Join(cmd, " ")
		rn.log("  %s", cmdline)
		var out bytes.Buffer
		c := exec.CommandContext(ctx, cmd[0], cmd[1:]...)
		c.Stdout, c.Stderr = &out, &out
		t0 := time.Now()
		err := c.Run()
		return out.String(), cmdline, time.Since(t0).Seconds(), err
	}
	port, err := freePort()
	if err != nil {
		return "", "", 0, err
	}
	cmdline := commandText(cmd, procs, port)
	rn.log("  %s", cmdline)
	outs := make([]bytes.Buffer, procs)
	errs := make([]error, procs)
	var wg sync.WaitGroup
	t0 := time.Now()
	for r := range procs {
		c := exec.CommandContext(ctx, cmd[0], cmd[1:]...)
		c.Env = append(os.Environ(), "RANK="+strconv.Itoa(r), "LOCAL_RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(procs),
			"LOCAL_WORLD_SIZE="+strconv.Itoa(procs), "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port))
		c.Env = append(c.Env, torchrunOMP(procs)...)
		c.Stdout, c.Stderr = &outs[r], &outs[r]
		if errs[r] = c.Start(); errs[r] != nil {
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); errs[r] = c.Wait() }()
	}
	wg.Wait()
	elapsed := time.Since(t0).Seconds()
	out := outs[0].String()
	for r, e := range errs {
		if e != nil && r > 0 {
			out += fmt.Sprintf("\n[rank %d: %v]\n%s", r, e, tail(outs[r].String(), 1000))
		}
	}
	return out, cmdline, elapsed, errors.Join(errs...)
}

// commandText is how the doc shows a command: a torchrun-style start as
// the shell loop that makes it (port 0: not started yet).
func commandText(cmd []string, procs, port int) string {
	if procs == 0 {
		return strings.Join(cmd, " ")
	}
	p := "PORT"
	if port > 0 {
		p = strconv.Itoa(port)
	}
	omp := strings.Join(append(torchrunOMP(procs), ""), " ")
	return fmt.Sprintf("for r in $(seq 0 %d); do RANK=$r LOCAL_RANK=$r WORLD_SIZE=%d MASTER_ADDR=127.0.0.1 MASTER_PORT=%s %s%s & done; wait",
		procs-1, procs, p, omp, strings.Join(cmd, " "))
}

// torchrunOMP is torchrun's rule for several workers on a host:
// OMP_NUM_THREADS=1 unless the environment sets it.
func torchrunOMP(procs int) []string {
	if _, set := os.LookupEnv("OMP_NUM_THREADS"); set || procs < 2 {
		return nil
	}
	return []string{"OMP_NUM_THREADS=1"}
}

// freePort is a TCP port on 127.0.0.1 nothing listens on right now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("a free port for torch.distributed: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// builtinLaunch is `mpirun hdet run CONFIG --run-dir DIR --set ...` on the
// built-in workload; fingerprint "" makes it afresh every time.
func (rn *runner) builtinLaunch(name, config, fingerprint string, sets ...string) launch {
	var setArgs []string
	for _, s := range sets {
		setArgs = append(setArgs, "--set", s)
	}
	l := launch{Name: name, Files: []string{config}, Fingerprint: fingerprint,
		Cmd: func(dir string) []string {
			return slices.Concat(rn.mpirun, []string{rn.hdet, "run", config, "--run-dir", dir, "--progress", "none"}, setArgs)
		},
		Read: func(dir, _ string, diverged bool) (result, error) { return readRun(dir, diverged) },
	}
	if fingerprint != "" {
		l.Key = slices.Concat([]string{"run", config, "--progress", "none"}, setArgs)
	}
	return l
}

// run starts `hdet run config --run-dir root/name --set ...` on the
// built-in workload and reads the run's metrics. With a non-empty
// fingerprint (what the trainer's numbers depend on besides the command and
// the config, see cacheKey) a finished run whose key matches is reused.
func (rn *runner) run(ctx context.Context, name, config, fingerprint string, sets ...string) (result, error) {
	return rn.launch(ctx, rn.builtinLaunch(name, config, fingerprint, sets...))
}

// allUnhealthy is how hdet run fails when training diverged on every rank
// with no checkpoint to roll back to (engine.ErrAllUnhealthy): at a
// learning rate far too high that is a result, not a broken benchmark.
const allUnhealthy = "every rank is unhealthy"

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

// nan is a fresh NaN, for fields a run does not have.
var nan = math.NaN()
