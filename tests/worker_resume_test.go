package tests

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/checkpoint"
	"github.com/hdet-dev/hdet/internal/metrics"
	"github.com/hdet-dev/hdet/internal/plan"
	"github.com/hdet-dev/hdet/internal/testenv"
)

// resumeRanks is the ranks of the worker and callback resume tests:
// HDET_RESUME_RANKS, 2 unless set. make test-resume-4 runs them on 4; the
// default suite runs 2, because each launch starts every rank's Python
// twice (the search pass, the main pass) and 4 ranks on a 2-core CI runner
// double their 8 minutes. Replica groups need 4: the FSDP2 case always
// runs, the DDP one (resumeGroup, as slow) only under make test-resume-4.
func resumeRanks(t *testing.T) int {
	s := os.Getenv("HDET_RESUME_RANKS")
	if s == "" {
		return 2
	}
	n, err := strconv.Atoi(s)
	require.NoError(t, err, "HDET_RESUME_RANKS")
	require.GreaterOrEqual(t, n, 2, "HDET_RESUME_RANKS")
	return n
}

// resumeWindow and resumeSteps are resume_train.py's window and run
// length (its --window and --steps defaults).
const (
	resumeWindow = 8
	resumeSteps  = 160
)

// resumeSetup is how a resume test's script runs: its ranks, hdet's flags,
// the script in tests/testdata (resume_train.py when empty) and its flags.
type resumeSetup struct {
	ranks      int
	hdet, args []string
	script     string
}

// resumeLocal is local mode on resumeRanks ranks; resumeGroup is 4 ranks
// as two replica groups of 2, each a DDP of its two ranks.
func resumeLocal(t *testing.T) resumeSetup { return resumeSetup{ranks: resumeRanks(t)} }

var resumeGroup = resumeSetup{ranks: 4, hdet: []string{"--set", "train.replica_size=2"}, args: []string{"--ddp"}}

// resumeFSDP is 4 ranks as two replica groups of 2, each an FSDP2 of its
// two ranks (uneven shards), run as long as resume_train.py.
var resumeFSDP = resumeSetup{ranks: 4, hdet: []string{"--set", "train.replica_size=2"}, script: "fsdp_worker.py",
	args: []string{"--state", "--steps", strconv.Itoa(resumeSteps), "--window", strconv.Itoa(resumeWindow)}}

// workerLaunch is one launch of resume_train.py under hdet into a run
// directory: the same command every time, env only differs.
type workerLaunch struct {
	runDir, record string
	resumeSetup
}

func newWorkerLaunch(t *testing.T, setup resumeSetup) workerLaunch {
	dir := t.TempDir()
	l := workerLaunch{runDir: filepath.Join(dir, "run"), record: filepath.Join(dir, "record"), resumeSetup: setup}
	require.NoError(t, os.Mkdir(l.record, 0o755))
	return l
}

// run launches it with env added and returns its output and exit code.
func (l workerLaunch) run(t *testing.T, env ...string) (string, int) {
	t.Helper()
	testenv.NeedTorch(t)
	hdet, plugins := hdetBinaries(t)
	script := filepath.Join(repoRoot(t), "tests", "testdata", cmp.Or(l.script, "resume_train.py"))
	full := append([]string{hdet, "run", "--run-dir", l.runDir, "--plugin-dir", plugins, "--progress", "none"}, l.hdet...)
	full = append(append(full, "--worker", "--", testenv.Python, script, "--record", l.record), l.args...)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := mpirunCmd(ctx, t, l.ranks, full...)
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	require.NoError(t, err, "%s", out)
	return string(out), 0
}

// windows lists the run's window records as "pass/window" and its commit
// as "commit@step", in their order.
func (l workerLaunch) windows(t *testing.T) []string {
	recs, _, err := metrics.ReadFile(filepath.Join(l.runDir, "metrics.jsonl"))
	require.NoError(t, err)
	var out []string
	for _, r := range recs {
		switch r := r.(type) {
		case metrics.WindowRecord:
			out = append(out, fmt.Sprintf("%d/%d", r.Pass, r.Window))
		case metrics.CommitRecord:
			out = append(out, fmt.Sprintf("commit@%d", r.Step))
		}
	}
	return out
}

// checkpoint is where the run's newest checkpoint is: where a relaunch resumes.
func (l workerLaunch) checkpoint(t *testing.T) position {
	ck, _, _, err := checkpoint.Latest(filepath.Join(l.runDir, "checkpoints"))
	require.NoError(t, err)
	if ck.Pass == plan.PassMain {
		return position{"main", ck.Step}
	}
	return position{"search", ck.Step}
}

func (l workerLaunch) end(t *testing.T) metrics.EndRecord {
	return hdetRun{dir: l.runDir}.end(t)
}

// stepRec is a line of resume_train.py's --record: one optimizer step.
type stepRec struct {
	PID  int    `json:"pid"`
	Pass string `json:"pass"`
	Step int    `json:"step"`
}

// steps reads rank's record from line from on: the steps trained since.
func (l workerLaunch) steps(t *testing.T, rank, from int) []stepRec {
	f, err := os.Open(filepath.Join(l.record, "steps-rank"+strconv.Itoa(rank)+".jsonl"))
	require.NoError(t, err)
	defer f.Close()
	var out []stepRec
	sc := bufio.NewScanner(f)
	for i := 0; sc.Scan(); i++ {
		if i >= from {
			var r stepRec
			require.NoError(t, json.Unmarshal(sc.Bytes(), &r))
			out = append(out, r)
		}
	}
	return out
}

// span is the steps of pass in recs as [first, last+1), checked to be
// consecutive, each once; (0, 0) when none.
func span(t *testing.T, recs []stepRec, pass string) (int, int) {
	first, next := -1, -1
	for _, r := range recs {
		if r.Pass != pass {
			continue
		}
		if first < 0 {
			first, next = r.Step, r.Step
		}
		require.Equal(t, next, r.Step, "the %s pass's steps run in order, each once", pass)
		next++
	}
	if first < 0 {
		return 0, 0
	}
	return first, next
}

// searchEnd is the search pass's length in a finished run's metrics.
func searchEnd(t *testing.T, l workerLaunch) int {
	recs, _, err := metrics.ReadFile(filepath.Join(l.runDir, "metrics.jsonl"))
	require.NoError(t, err)
	end := 0
	for _, r := range metrics.Of[metrics.WindowRecord](recs) {
		if r.Pass == 0 {
			end = max(end, r.Step)
		}
	}
	return end
}

// position is where a run is: a pass and the steps done in it.
type position struct {
	pass string
	step int
}

// A worker run whose script gives hdet its state (attach's state=), stopped
// by a signal and launched again with the same command, ends with the
// parameters of the run left alone; each relaunch trains only the steps
// left, and metrics.jsonl holds each window once. Each run is stopped in
// the search pass, then in its last window (so that the relaunch commits),
// then in the main pass. Local mode and DDP (gradients mode) on resumeRanks
// ranks; replica groups of an FSDP2 and (make test-resume-4) of a DDP
// script on 4 ranks.
func TestWorkerResumesAtTheStep(t *testing.T) {
	ddp := resumeLocal(t)
	ddp.args = []string{"--ddp"}
	for _, mode := range []struct {
		name  string
		setup resumeSetup
		// sharded: the checksum is rank 0's shards, so the gathered
		// models are compared too; only4: make test-resume-4 alone.
		sharded, only4 bool
	}{{"local", resumeLocal(t), false, false}, {"ddp", ddp, false, false}, {"fsdp2-groups", resumeFSDP, true, false},
		{"replica-groups", resumeGroup, false, true}} {
		if mode.only4 && resumeRanks(t) < 4 {
			continue // see resumeRanks
		}
		t.Run(fmt.Sprintf("%s, %d ranks", mode.name, mode.setup.ranks), func(t *testing.T) {
			ref := newWorkerLaunch(t, mode.setup)
			out, code := ref.run(t)
			require.Equal(t, 0, code, out)
			want, wantWindows := ref.end(t).Checksum, ref.windows(t)
			search := searchEnd(t, ref)
			require.Greater(t, search, 3*resumeWindow, "the run committed after its third window: %v", wantWindows)
			stops := []position{{"search", 2 * resumeWindow}, {"search", search - resumeWindow}, {"main", 3 * resumeWindow}}
			l := stoppedAndResumed(t, mode.setup, stops, search, want, wantWindows)
			if mode.sharded {
				assert.Equal(t, fsdpModel(t, ref), fsdpModel(t, l), "the final model (every shard) is the uninterrupted run's")
			}
		})
	}
}

// stoppedAndResumed launches a run that a signal stops at each of stops in
// turn, then once more to its end, and checks it against the uninterrupted
// run's checksum and windows, and what each launch trained.
// Returns the launch, for what else the test checks.
func stoppedAndResumed(t *testing.T, setup resumeSetup, stops []position, search int, want string, wantWindows []string) workerLaunch {
	l := newWorkerLaunch(t, setup)
	from, seen := position{"search", 0}, make([]int, setup.ranks)
	for i := 0; i <= len(stops); i++ {
		to, env, wantCode := position{"main", resumeSteps}, []string(nil), 0
		if i < len(stops) {
			env, wantCode = []string{"STOP_AT=" + stops[i].pass + ":" + strconv.Itoa(stops[i].step)}, 3
		}
		out, code := l.run(t, env...)
		require.Equal(t, wantCode, code, "launch %d:\n%s", i+1, out)
		if i > 0 {
			assert.Contains(t, out, "resuming from checkpoint", "launch %d", i+1)
		}
		if i < len(stops) {
			assert.Contains(t, out, "stopped by a signal after checkpointing; launch the same command again to resume")
		}
		from = l.checkLaunch(t, i, stops, from, to, seen, search)
	}
	assert.Equal(t, want, l.end(t).Checksum, "the final parameters are the uninterrupted run's")
	assert.Equal(t, wantWindows, l.windows(t), "metrics.jsonl holds each window and the commit once")
	return l
}

// fsdpModel is the SHA-256 of the whole model fsdp_worker.py gathered on
// rank 0 at the end of a launch's run.
func fsdpModel(t *testing.T, l workerLaunch) string {
	b, err := os.ReadFile(filepath.Join(l.record, "fsdp-rank0.json"))
	require.NoError(t, err)
	var e fsdpEnd
	require.NoError(t, json.Unmarshal(b, &e))
	return e.FullSHA
}

// checkLaunch checks launch i of a run stopped at stops, which started at
// from: a stopped launch checkpointed at the end of the window the signal
// came in (T steps, or in the main pass of a DDP script the longer window
// of its hand-overs), and each rank trained from from to there (to, the
// run's end, for the last launch), its record read on from line seen[r].
// Returns where the next launch starts.
func (l workerLaunch) checkLaunch(t *testing.T, i int, stops []position, from, to position, seen []int, search int) position {
	t.Helper()
	if i < len(stops) {
		to = l.checkpoint(t)
		assert.Equal(t, stops[i].pass, to.pass, "launch %d checkpointed in the pass it was stopped in", i+1)
		assert.Greater(t, to.step, stops[i].step, "launch %d checkpointed at the end of the window it was stopped in", i+1)
	}
	for r := range seen {
		recs := l.steps(t, r, seen[r])
		seen[r] += len(recs)
		s0, s1 := span(t, recs, "search")
		m0, m1 := span(t, recs, "main")
		assert.Equal(t, trained(from, to, search), [4]int{s0, s1, m0, m1},
			"rank %d's launch %d trains from %v to %v (search pass [s0, s1), main pass [m0, m1))", r, i+1, from, to)
	}
	return to
}

// trained is what a launch from one position to another trains: its search
// and main pass steps, [s0, s1) and [m0, m1), (0, 0) for none.
func trained(from, to position, search int) [4]int {
	var s, m [2]int
	if from.pass == "search" {
		s = [2]int{from.step, search}
		if to.pass == "search" {
			s[1] = to.step
		}
		from = position{"main", 0}
	}
	if to.pass == "main" {
		m = [2]int{from.step, to.step}
	}
	if s[0] == s[1] {
		s = [2]int{}
	}
	if m[0] == m[1] {
		m = [2]int{}
	}
	return [4]int{s[0], s[1], m[0], m[1]}
}

// A script that does not give hdet its state: a relaunch says so and
// starts the run over, with each window once in metrics.jsonl. The same
// script relaunched without state= into a run whose script gave it stops
// with exit 2 and says what to add.
func TestWorkerWithoutStateStartsOver(t *testing.T) {
	l := newWorkerLaunch(t, resumeLocal(t))
	out, code := l.run(t, "NO_STATE=1", "STOP_AT=search:16")
	require.Equal(t, 3, code, out)
	assert.Contains(t, out, "launch the same command again to run it again from step 0 (the script does not give hdet its state")
	at := l.checkpoint(t).step // the end of the window the signal reached hdet in
	out, code = l.run(t, "NO_STATE=1")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, fmt.Sprintf("hdet's checkpoint is at step %d of the search pass, but this script does not give hdet its state (attach(..., state=...)): the run starts over from step 0", at))
	assert.Equal(t, resumeSteps/resumeWindow+1, len(l.windows(t))-searchEnd(t, l)/resumeWindow, "metrics.jsonl holds each window and the commit once")
	for r := 0; r < l.ranks; r++ {
		s0, s1 := span(t, l.steps(t, r, at), "search")
		assert.Equal(t, [2]int{0, searchEnd(t, l)}, [2]int{s0, s1}, "rank %d's relaunch trains the search pass from step 0", r)
	}

	l = newWorkerLaunch(t, resumeLocal(t))
	out, code = l.run(t, "STOP_AT=search:16")
	require.Equal(t, 3, code, out)
	at = l.checkpoint(t).step
	out, code = l.run(t, "NO_STATE=1")
	require.Equal(t, 2, code, out)
	assert.Contains(t, out, fmt.Sprintf("hdet resumes this run at step %d of the search pass from the state the script saved there", at))
	assert.Contains(t, out, "but the script did not pass state= to hdet.attach this time, so it cannot resume")
}
