package tests

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/testenv"
)

// What the chaos soak trains (issue 42): the built-in MLP
// (TestMultiHostChaos), or a PyTorch script under `hdet run --worker` with
// the attach line (TestMultiHostChaosPyTorch). The driver, the schedule and
// the faults are the same; a workload gives its run, its launch, its
// schedule's shape and what the verdict adds.
type chaosWorkload struct {
	name    string
	perHost int  // ranks on each of the bed's 3 hosts
	resumes bool // a relaunch resumes from the newest checkpoint
	faults  int  // HDET_CHAOS_FAULTS's default: the CI size
	kinds   func() []*faultKind
	first   []string // kinds the schedule places first (chaosShape.first)
	minMain int      // main-pass windows at the least
	// num/den: the search pass's length as a share of the main pass's.
	num, den int
	quiet    int // chaosShape.quiet
	config   func(windows int) string
	// args follow `hdet run CONFIG --run-dir DIR --plugin-dir DIR`.
	args func(c *chaos) []string
	// script is the worker's script ("" for the built-in workload).
	script string
	// slowStart: how much longer than chaosBound a launch may stand still
	// while it starts the worker's script (in setup, at the restart).
	slowStart time.Duration
}

func (wl *chaosWorkload) shape() *chaosShape {
	return &chaosShape{kinds: wl.kinds(), first: wl.first, minMain: wl.minMain, num: wl.num, den: wl.den, quiet: wl.quiet}
}

// need skips (fails under CI) without what the workload needs.
func (wl *chaosWorkload) need(t *testing.T) {
	if wl.script != "" {
		testenv.NeedTorch(t)
	}
}

var builtinChaos = chaosWorkload{
	name: "built-in", perHost: 2, resumes: true, faults: 25, kinds: chaosKinds, minMain: 400, num: 3, den: 10, quiet: 3,
	config: chaosConfig,
	args:   func(c *chaos) []string { return []string{"--set", "workload.data=" + mnistDir(c.t)} },
}

// pytorchChaos is tests/testdata/chaos_mlp.py on 3 hosts x 1 rank: each
// launch starts a Python with torch on every rank twice (the search pass's
// script, then the main pass's), seconds of CPU each on 2 shared cores.
// Its search pass is a quarter of the main pass (hdet does not know the
// script's schedule). The script gives hdet its state (attach(...,
// state=...)), so a relaunch resumes at hdet's newest checkpoint, written
// at every window end: a fault costs the window it struck and the restart.
var pytorchChaos = chaosWorkload{
	name: "pytorch", perHost: 1, resumes: true, faults: 8, kinds: pytorchKinds, minMain: 160, num: 1, den: 4, quiet: 60,
	first:  []string{"kill-python", "sigterm", "explorer-kill", "corrupt-checkpoint", "kill-host", "disk-full"},
	config: pytorchChaosConfig,
	args: func(c *chaos) []string {
		return []string{"--worker", "--", testenv.Python, c.wl.script, "--steps", fmt.Sprint(c.windows * chaosWindow),
			"--window", fmt.Sprint(chaosWindow), "--init", c.init}
	},
	script: "chaos_mlp.py", slowStart: 90 * time.Second,
}

// pytorchChaosConfig is the worker run's config: the script gives its
// steps, window and explorer (attach's default: lr); a checkpoint (and the
// workers' state files) at every window end, so a fault redoes at most one
// window; the rest as the built-in soak's.
func pytorchChaosConfig(int) string {
	return fmt.Sprintf(`# the PyTorch chaos soak's run (tests/chaos_workload_test.go): the default path, auto.commit restart
train: {window: %d, seed: 11, watchdog: %s}
run: {progress: none, checkpoint_every: 1, keep: 3, checkpoint_max_failing: %s}
`, chaosWindow, chaosWatchdog, chaosMaxFailing)
}

// awaited injects one fault the armer finds, as struck does, then waits
// for the launch it struck to end: SIGTERM to mpirun, which Open MPI's
// mpirun does not forward as it does SIGUSR1: it ends the job, sending the
// ranks SIGTERM (hdet checkpoints if it has the time), and exits 1.
func awaited(a armer) injector {
	return injector{run: func(c *chaos, kind string) bool { return c.single(kind, fired(a)) && c.waitEnd(kind) }}
}

// waitEnd waits, watching the launch, until the launch a fault struck has
// exited, at most chaosBound; one still running then is a problem of the
// verdict (the fault was to end it).
func (c *chaos) waitEnd(kind string) bool {
	l, inj := c.cur, c.faults[len(c.faults)-1]
	for !l.exited() && time.Since(inj.at) < chaosBound {
		c.tick()
	}
	if !l.exited() {
		c.problems = append(c.problems, fmt.Sprintf("launch %d: still running %s after %s (%s)", l.n, chaosBound, kind, inj.detail))
	}
	return true
}

// The chaos soak of a PyTorch script under `hdet run --worker` with the
// attach line (issue 42): tests/testdata/chaos_mlp.py on the bed's 3
// hosts, the default path, faults in the search pass, at the restart and
// in the main pass, relaunched after each failure. CI runs 8 faults, the
// kinds most at risk first; HDET_CHAOS_FAULTS and HDET_CHAOS_SEED as for
// the built-in soak (make test-chaos-pytorch).
func TestMultiHostChaosPyTorch(t *testing.T) {
	wl := pytorchChaos
	wl.script = filepath.Join(repoRoot(t), "tests", "testdata", wl.script)
	soakChaos(t, &wl)
}

// prepare writes what the workload needs before the first launch: the
// worker script's own file it starts from (its initial parameters), whose
// checksum the verdict compares; and finds the interpreter's binary.
func (c *chaos) prepare(dir string) {
	if c.wl.script == "" {
		return
	}
	exe, err := filepath.EvalSymlinks(testenv.Python)
	require.NoError(c.t, err)
	c.python = exe
	rng := rand.New(rand.NewPCG(7, 7))
	b := make([]byte, 4*(16*32+32+32+1)) // chaos_mlp.py's Linear(16, 32), Linear(32, 1)
	for i := 0; i < len(b); i += 4 {
		binary.LittleEndian.PutUint32(b[i:], math.Float32bits(float32(rng.Float64()-0.5)/4))
	}
	c.init = filepath.Join(dir, "init.f32")
	require.NoError(c.t, os.WriteFile(c.init, b, 0o444))
	c.initSum = fileSHA(c.t, c.init)
}

func fileSHA(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

var scriptSum = regexp.MustCompile(`chaos_mlp\.py: final parameters sha256 ([0-9a-f]{64})`)

// scriptChecksum is the checksum the worker script printed in a launch.
func scriptChecksum(l *launch) string {
	b, _ := os.ReadFile(l.log)
	if m := scriptSum.FindSubmatch(b); m != nil {
		return string(m[1])
	}
	return ""
}

// scriptVerdict asserts, for a worker script, that the finished launch's
// script printed the uninterrupted run's checksum of its final parameters
// and that its own file is untouched.
func (c *chaos) scriptVerdict() {
	if c.wl.script == "" {
		return
	}
	last := c.launches[len(c.launches)-1]
	got := scriptChecksum(last)
	assert.Equal(c.t, c.ref.script, got, "the script's final parameters (launch %d) are the uninterrupted run's", last.n)
	assert.Equal(c.t, c.initSum, fileSHA(c.t, c.init), "the script's own file is untouched")
	fmt.Printf("script: final parameters sha256 %s (uninterrupted %s); its own file %s\n", got, c.ref.script,
		map[bool]string{true: "untouched", false: "changed"}[c.initSum == fileSHA(c.t, c.init)])
}

// strays are the run's processes outside the bed's hosts: hdet, the
// explorer, and the interpreter running the worker script.
func (c *chaos) strays() []int {
	pids := c.pidsOf("", c.hdet, c.explorer)
	if c.python == "" {
		return pids
	}
	for _, p := range c.pidsOf("", c.python) {
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		if strings.Contains(string(cmd), c.wl.script) {
			pids = append(pids, p)
		}
	}
	return pids
}

// armKillPython finds one rank's Python (the worker script) on a random
// host; the strike kills it.
func armKillPython(c *chaos) func() (*injection, func()) {
	var pids []int
	var hosts []string
	for _, h := range c.tb.hosts {
		for _, p := range c.pidsOf(h, c.python) {
			pids, hosts = append(pids, p), append(hosts, h)
		}
	}
	if len(pids) == 0 {
		return nil
	}
	i := c.rng.IntN(len(pids))
	return func() (*injection, func()) {
		at := time.Now()
		if syscall.Kill(pids[i], syscall.SIGKILL) != nil {
			return nil, nil
		}
		return &injection{at: at, detail: fmt.Sprintf("python (pid %d) on %s", pids[i], hosts[i])}, nil
	}
}
