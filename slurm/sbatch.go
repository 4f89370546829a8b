package slurm

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// ErrOption means a Job setting is out of range or malformed; the message
// names the sbatch option.
var ErrOption = errors.New("invalid sbatch option")

// Launchers Script can write.
const (
	LauncherSrun   = "srun"
	LauncherMpirun = "mpirun"
)

// MpirunKeepalive makes mpirun notice a host that froze or lost its link:
// TCP keepalives on its idle connection to each host's daemon, the first after
// 5 s of silence, then every 3 s, the host declared lost after 3 unanswered
// (about 14 s); mpirun then ends the job. Without them it notices only when
// a rank or the watchdog aborts, and that abort hangs on the lost host.
const MpirunKeepalive = "--mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 3 --mca oob_tcp_keepalive_probes 3"

// DefaultSignalLead is how long before the time limit Slurm warns the batch
// script: it must cover the rest of a window plus writing a checkpoint.
const DefaultSignalLead = 300

// Job describes the batch job Script writes. Paths must already be absolute:
// the job runs wherever Slurm puts it.
type Job struct {
	Config        string // hdet config file
	Hdet          string // hdet binary: absolute, or a bare name looked up on PATH
	RunRoot       string // run directories are RunRoot/$SLURM_JOB_ID
	JobName       string
	Partition     string // empty: the cluster's default
	Account       string // empty: the user's default
	Time          string // Slurm time limit, e.g. 24:00:00 or 1-12:00:00
	Nodes         int
	GPUsPerNode   int // 0 on CPU clusters
	NTasksPerNode int // 0: one per GPU; must be set when GPUsPerNode is 0
	CPUsPerTask   int // 0: the cluster's default
	Launcher      string
	SignalLead    int // seconds before the time limit to send SIGUSR1
	// ReplicaSize is train.replica_size, G ranks per replica (0 or 1: one
	// rank per replica, and the config's own value stands). With G > 1 the
	// script passes it to hdet and lays the tasks out in blocks, so a
	// replica fills a node (or G/tasks-per-node whole nodes) and only the
	// converge crosses the network.
	ReplicaSize int
	// Sync is train.sync for the job ("": the config's): gradients for
	// links fast enough to all-reduce the gradients every step, local for
	// slower ones (docs/sync-modes.md). The script says which and why.
	Sync string
	// Worker is a PyTorch script's command (hdet run --worker -- CMD...);
	// empty: the config's built-in workload. With a worker Config may be
	// empty (the script is the configuration).
	Worker  []string
	Command string // the command line that made the script, for its header
}

// Sync modes Script can set.
const (
	SyncLocal     = "local"
	SyncGradients = "gradients"
)

// Slurm's time formats: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S.
var timeRE = regexp.MustCompile(`^(?:(\d+)-(\d+)(?::(\d+)(?::(\d+))?)?|(\d+)(?::(\d+)(?::(\d+))?)?)$`)

// ParseTime parses a Slurm time limit. UNLIMITED and INFINITE give 0.
func ParseTime(s string) (time.Duration, error) {
	switch strings.ToUpper(s) {
	case "UNLIMITED", "INFINITE":
		return 0, nil
	}
	m := timeRE.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("%w: --time %q: want minutes, M:S, H:M:S, D-H, D-H:M or D-H:M:S", ErrOption, s)
	}
	n := func(i int) time.Duration {
		v, _ := strconv.Atoi(m[i]) // the pattern admits only digits; "" gives 0
		return time.Duration(v)
	}
	var d time.Duration
	if m[1] != "" { // D-H[:M[:S]]
		d = n(1)*24*time.Hour + n(2)*time.Hour + n(3)*time.Minute + n(4)*time.Second
	} else {
		parts := strings.Count(s, ":")
		switch parts {
		case 0:
			d = n(5) * time.Minute
		case 1:
			d = n(5)*time.Minute + n(6)*time.Second
		default:
			d = n(5)*time.Hour + n(6)*time.Minute + n(7)*time.Second
		}
	}
	if d <= 0 {
		return 0, fmt.Errorf("%w: --time %q: the limit must be positive", ErrOption, s)
	}
	return d, nil
}

// Values that go into #SBATCH lines: no spaces, quotes or shell syntax.
var wordRE = regexp.MustCompile(`^[A-Za-z0-9_.+-]+$`)

// Validate checks j and returns every problem, each naming its option.
func (j Job) Validate() error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrOption}, a...)...))
	}
	limit, err := ParseTime(j.Time)
	if err != nil {
		errs = append(errs, err)
	}
	if j.Nodes < 1 {
		bad("--nodes %d: want at least 1", j.Nodes)
	}
	if j.GPUsPerNode < 0 {
		bad("--gpus-per-node %d: want 0 (CPU cluster) or more", j.GPUsPerNode)
	}
	switch {
	case j.NTasksPerNode < 0:
		bad("--ntasks-per-node %d: want at least 1", j.NTasksPerNode)
	case j.GPUsPerNode == 0 && j.NTasksPerNode == 0:
		bad("--ntasks-per-node: required when --gpus-per-node is 0 (a CPU cluster)")
	case j.GPUsPerNode > 0 && j.NTasksPerNode != 0 && j.NTasksPerNode != j.GPUsPerNode:
		bad("--ntasks-per-node %d: hdet runs one task per GPU, so it must equal --gpus-per-node %d (or be left out)", j.NTasksPerNode, j.GPUsPerNode)
	}
	if j.CPUsPerTask < 0 {
		bad("--cpus-per-task %d: want at least 1", j.CPUsPerTask)
	}
	if j.Launcher != LauncherSrun && j.Launcher != LauncherMpirun {
		bad("--launcher %q: want srun or mpirun", j.Launcher)
	}
	if j.SignalLead < 1 || j.SignalLead > 65535 {
		bad("--signal-lead %d: want 1 to 65535 seconds", j.SignalLead)
	} else if limit > 0 && time.Duration(j.SignalLead)*time.Second >= limit {
		bad("--signal-lead %d: must be shorter than --time %s", j.SignalLead, j.Time)
	}
	for _, w := range []struct{ flag, v string }{{"--job-name", j.JobName}, {"--partition", j.Partition}, {"--account", j.Account}} {
		if w.v != "" && !wordRE.MatchString(w.v) {
			bad("%s %q: use letters, digits and _ . + - only", w.flag, w.v)
		}
	}
	if j.JobName == "" {
		bad("--job-name: must not be empty")
	}
	if j.Sync != "" && j.Sync != SyncLocal && j.Sync != SyncGradients {
		bad("--sync %q: want local or gradients (or leave it out: the config's train.sync)", j.Sync)
	}
	if err := j.checkReplica(); err != nil {
		errs = append(errs, err)
	}
	if j.Hdet == "" || strings.Contains(j.Hdet, "/") && !strings.HasPrefix(j.Hdet, "/") {
		bad("--hdet %q: want an absolute path, or a bare name to look up on the nodes' PATH", j.Hdet)
	}
	if j.Config == "" && len(j.Worker) == 0 {
		bad("CONFIG: a config file is needed unless a worker command follows --worker --")
	}
	for _, p := range []struct{ flag, v string }{{"CONFIG", j.Config}, {"--hdet", j.Hdet}, {"--run-root", j.RunRoot}} {
		if p.flag == "CONFIG" && p.v == "" {
			continue
		}
		if p.flag != "--hdet" && !strings.HasPrefix(p.v, "/") {
			bad("%s %q: must be an absolute path", p.flag, p.v)
		}
		if strings.ContainsAny(p.v, "\n\r") {
			bad("%s: a path with a line break", p.flag)
		}
	}
	return errors.Join(errs...)
}

// checkReplica: the job's tasks must divide into replicas of ReplicaSize,
// each inside one node or over whole nodes.
func (j Job) checkReplica() error {
	g, tpn := j.ReplicaSize, j.tasksPerNode()
	switch {
	case g < 0:
		return fmt.Errorf("%w: --replica-size %d: want 1 or more (ranks per replica)", ErrOption, g)
	case g <= 1 || tpn <= 0 || j.Nodes < 1:
		return nil
	case (j.Nodes*tpn)%g != 0:
		return fmt.Errorf("%w: --replica-size %d does not divide the job's %d tasks (%d nodes x %d tasks per node)", ErrOption, g, j.Nodes*tpn, j.Nodes, tpn)
	case tpn%g != 0 && g%tpn != 0:
		return fmt.Errorf("%w: --replica-size %d: a replica would straddle nodes of %d tasks; want a divisor or a multiple of %d", ErrOption, g, tpn, tpn)
	}
	return nil
}

// DefaultJobName is the job name for a config file: hdet- and the file's
// base name without extension, every character a job name may not hold
// replaced by '-' ("my run.yaml" gives hdet-my-run), at most 64 characters.
func DefaultJobName(config string) string {
	base := filepath.Base(config)
	base = strings.TrimSuffix(base, filepath.Ext(base))
	name := []rune("hdet-")
	for _, c := range base {
		if !wordRE.MatchString(string(c)) {
			c = '-'
		}
		name = append(name, c)
	}
	return string(name[:min(len(name), 64)])
}

// tasksPerNode is one task per GPU, or the given count on CPU clusters.
func (j Job) tasksPerNode() int {
	if j.GPUsPerNode > 0 {
		return j.GPUsPerNode
	}
	return j.NTasksPerNode
}

// quote makes s one shell word.
// what the run trains: the config, then the worker's command, quoted.
func (j Job) what() string {
	var b strings.Builder
	if j.Config != "" {
		b.WriteString(` "$CONFIG"`)
	}
	if len(j.Worker) > 0 {
		b.WriteString(" --worker --")
		for _, a := range j.Worker {
			b.WriteString(" " + quote(a))
		}
	}
	return b.String()
}

func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// scriptWriter builds a script line by line.
type scriptWriter struct{ strings.Builder }

func (b *scriptWriter) w(format string, a ...any) { fmt.Fprintf(&b.Builder, format+"\n", a...) }

// Script returns a ready sbatch script for j, or j's problems.
func Script(j Job) (string, error) {
	if err := j.Validate(); err != nil {
		return "", err
	}
	tpn := j.tasksPerNode()
	var b scriptWriter
	j.header(&b, tpn)
	b.w("")
	j.prelude(&b, tpn)
	b.w("")
	j.launch(&b, tpn)
	b.w("STEP_PID=$!")
	b.w("# wait returns early when a trapped signal arrives: wait again until the step")
	b.w("# has really ended; bash keeps its status for the last wait.")
	b.w(`while kill -0 "$STEP_PID" 2>/dev/null; do wait "$STEP_PID"; done`)
	b.w(`wait "$STEP_PID"`)
	b.w("STATUS=$?")
	b.w(`echo "hdet: step exited with status $STATUS"`)
	b.w(`exit "$STATUS"`)
	return b.String(), nil
}

// header writes the #SBATCH lines.
func (j Job) header(b *scriptWriter, tpn int) {
	b.w("#!/bin/bash")
	b.w("# Written by: %s", strings.Join(strings.Fields(j.Command), " ")) // one line
	b.w("# Submit with: sbatch THIS_FILE")
	b.w("#SBATCH --job-name=%s", j.JobName)
	if j.Partition != "" {
		b.w("#SBATCH --partition=%s", j.Partition)
	}
	if j.Account != "" {
		b.w("#SBATCH --account=%s", j.Account)
	}
	b.w("#SBATCH --time=%s", j.Time)
	b.w("#SBATCH --nodes=%d", j.Nodes)
	b.w("#SBATCH --ntasks-per-node=%d", tpn)
	if j.GPUsPerNode > 0 {
		b.w("#SBATCH --gpus-per-node=%d", j.GPUsPerNode)
	}
	if j.CPUsPerTask > 0 {
		b.w("#SBATCH --cpus-per-task=%d", j.CPUsPerTask)
	}
	b.w("# SIGUSR1 to this script (B:) %d s before the time limit: hdet checkpoints", j.SignalLead)
	b.w("# at its next converge and exits; Slurm may send it earlier than asked.")
	b.w("#SBATCH --signal=B:USR1@%d", j.SignalLead)
	b.w("# A requeued job keeps its id, so it finds its run directory and resumes.")
	if len(j.Worker) > 0 {
		b.w("# The script resumes at hdet's last checkpoint when it gives hdet its state")
		b.w("# (hdet.attach(..., state={...})); else it starts over: docs/pytorch.md#resume.")
	}
	b.w("#SBATCH --requeue")
	b.w("#SBATCH --open-mode=append")
	b.w("# Relative to the directory sbatch was run in; %%j is the job id.")
	b.w("#SBATCH --output=%s-%%j.out", j.JobName)
}

// prelude writes the run directory and the signal forwarding.
func (j Job) prelude(b *scriptWriter, tpn int) {
	b.w("set -u")
	b.w("HDET=%s", quote(j.Hdet))
	if j.Config != "" {
		b.w("CONFIG=%s", quote(j.Config))
	}
	b.w("RUN_DIR=%s/$SLURM_JOB_ID", quote(j.RunRoot))
	b.w(`mkdir -p "$RUN_DIR"`)
	b.w(`echo "hdet: job $SLURM_JOB_ID, restart ${SLURM_RESTART_COUNT:-0}, nodes $SLURM_JOB_NODELIST, run dir $RUN_DIR"`)
	b.w("")
	b.w("# Bash runs a trap only between commands, so the step runs in the background")
	b.w("# and the script waits for it. %s passes SIGUSR1/SIGTERM on to every task.", j.Launcher)
	b.w("STEP_PID=")
	b.w(`forward() {`)
	b.w(`  echo "hdet: SIG$1 at $(date +%%T), passing it to the step" >&2`)
	b.w(`  [ -n "$STEP_PID" ] && kill -s "$1" "$STEP_PID" 2>/dev/null`)
	b.w(`}`)
	b.w("trap 'forward USR1' USR1")
	b.w("trap 'forward TERM' TERM")
	b.w("")
	b.w("# More tasks than cores: MPI ranks busy-wait unless told to yield.")
	b.w(`if [ "$(nproc)" -lt %d ]; then export OMPI_MCA_mpi_yield_when_idle=1; fi`, tpn)
}

// launch starts the job step in the background with the job's launcher.
func (j Job) launch(b *scriptWriter, tpn int) {
	switch j.Launcher {
	case LauncherSrun:
		gpu := ""
		if j.GPUsPerNode > 0 {
			b.w("# Every task sees all of its node's GPUs (CUDA_VISIBLE_DEVICES lists them")
			b.w("# all) so that CUDA peer access between them keeps working; hdet picks its")
			b.w("# own GPU by its local rank (SLURM_LOCALID). Do not add --gpus-per-task or")
			b.w("# --gpu-bind=single (one GPU per task, no peer access); --gpu-bind=none")
			b.w("# leaves CUDA_VISIBLE_DEVICES unset, which on nodes without device")
			b.w("# cgroups exposes other jobs' GPUs too.")
			gpu = fmt.Sprintf(" --gpus-per-node=%d", j.GPUsPerNode)
		}
		cpus := ""
		if j.CPUsPerTask > 0 {
			// srun 22.05 ignores SLURM_CPUS_PER_TASK from sbatch; say it again.
			cpus = fmt.Sprintf(" --cpus-per-task=%d", j.CPUsPerTask)
		}
		b.w("# Open MPI under srun speaks PMIx only. No --kill-on-bad-exit: a rank that")
		b.w("# exits first after a preemption must not kill rank 0 while it checkpoints.")
		dist, set := j.replicaLayout(b)
		set += j.syncMode(b)
		if dist != "" {
			dist = " --distribution=block:block"
		}
		b.w(`srun --mpi=pmix --nodes=%d --ntasks-per-node=%d%s%s%s "$HDET" run --run-dir "$RUN_DIR"%s%s &`, j.Nodes, tpn, dist, cpus, gpu, set, j.what())
	case LauncherMpirun:
		if j.GPUsPerNode > 0 {
			b.w("# Every rank sees all of its node's GPUs (CUDA_VISIBLE_DEVICES of the job) so")
			b.w("# that CUDA peer access between them keeps working; hdet picks its own GPU by")
			b.w("# its local rank.")
		}
		b.w("# mpirun takes the task slots from the allocation. The keepalives end the job")
		b.w("# within about 14 s when a node freezes or loses its link.")
		rank, set := j.replicaLayout(b)
		set += j.syncMode(b)
		if rank != "" {
			rank = " --rank-by slot"
		}
		b.w(`mpirun -np "$SLURM_NTASKS" --map-by ppr:%d:node%s %s "$HDET" run --run-dir "$RUN_DIR"%s%s &`, tpn, rank, MpirunKeepalive, set, j.what())
	}
}

// replicaLayout explains the replica groups' layout in the script and
// returns whether one is asked for ("block" or "") and hdet's --set of
// train.replica_size (or "").
func (j Job) replicaLayout(b *scriptWriter) (layout, set string) {
	g, tpn := j.ReplicaSize, j.tasksPerNode()
	if g <= 1 {
		return "", ""
	}
	b.w("# Replica groups: %d ranks per replica, %d replicas. Consecutive ranks form a", g, j.Nodes*tpn/g)
	if g <= tpn {
		b.w("# replica and fill a node in blocks (%d replica(s) per node), so the per-step", tpn/g)
	} else {
		b.w("# replica and fill %d whole nodes in blocks, so the per-step", g/tpn)
	}
	b.w("# gradient traffic stays inside a replica and only the converge (every")
	b.w("# train.window steps, 1/%d of the parameters per rank) crosses between replicas.", g)
	return "block", fmt.Sprintf(" --set train.replica_size=%d", g)
}

// syncMode explains the sync mode asked for in the script and returns
// hdet's --set of train.sync ("" when the config's stands).
func (j Job) syncMode(b *scriptWriter) string {
	switch j.Sync {
	case SyncGradients:
		b.w("# train.sync gradients: the gradients are all-reduced over every rank every")
		b.w("# step, as DDP does; for links that move 2x the gradients in a small part of")
		b.w("# a step's compute (docs/sync-modes.md).")
	case SyncLocal:
		b.w("# train.sync local: nothing crosses between replicas inside a window; one")
		b.w("# allreduce of the parameters and optimizer state every train.window steps;")
		b.w("# for links too slow for the gradients every step (docs/sync-modes.md).")
	default:
		return ""
	}
	return " --set train.sync=" + j.Sync
}
