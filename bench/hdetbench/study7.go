package main

// Study 7 (issue 33): where local mode pays. The built-in MLP across 3
// hosts of the test bed with every host's egress shaped by tc: plain
// synchronous DP, HDET in gradients mode, HDET in local mode at several
// windows and with a replica per host, per link: time per step and its
// communication share, the bytes each host sent against the ring
// allreduce's count, final accuracy and the wall time to a target accuracy.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// netSettings are study 7's sizes.
type netSettings struct {
	Hosts, Slots int
	Epochs       int
	EvalSteps    int     // steps between test evaluations
	Target       float64 // the test accuracy whose first crossing is timed
	Links        []netLink
	Windows      []int // local mode's T
	GradT        int   // T of HDET in gradients mode and of the replica-group row
}

func netDefaults(quick bool) netSettings {
	s := netSettings{Hosts: 3, Slots: 2, Epochs: 4, EvalSteps: 50, Target: 0.975, Windows: []int{10, 50, 200}, GradT: 50,
		Links: []netLink{
			{Name: "unshaped"},
			{Name: "1 Gbit/s, 0.2 ms", Rate: 1e9, Delay: 200 * time.Microsecond},
			{Name: "100 Mbit/s, 1 ms", Rate: 1e8, Delay: time.Millisecond},
		}}
	if quick {
		s.Epochs, s.Target, s.Windows = 1, 0.95, []int{10, 50}
		s.Links = []netLink{s.Links[0], s.Links[2]}
	}
	return s
}

// netConfig is one row of the study at every link.
type netConfig struct {
	Name, Label string
	Config      string // relative to the repository root
	Sync        string
	T, G        int
}

// configs are the study's rows: plain DP (window = the evaluation interval:
// every rank holds the same parameters, so no window converges), HDET in
// gradients mode, in local mode at each T, and local mode with a replica
// per host (G = slots: the gradients averaged on the host every step, the
// converge across hosts).
func (s netSettings) configs() []netConfig {
	cs := []netConfig{
		{Name: "plain", Label: "plain DP, no explorers", Config: plainConfig, Sync: "gradients", T: s.EvalSteps, G: 1},
		{Name: fmt.Sprintf("grad-T%d", s.GradT), Label: fmt.Sprintf("HDET gradients, T = %d", s.GradT), Config: trioConfig, Sync: "gradients", T: s.GradT, G: 1},
	}
	for _, t := range s.Windows {
		cs = append(cs, netConfig{Name: fmt.Sprintf("local-T%d", t), Label: fmt.Sprintf("HDET local, T = %d", t), Config: trioConfig, Sync: "local", T: t, G: 1})
	}
	return append(cs, netConfig{Name: fmt.Sprintf("groups-T%d", s.GradT), Label: fmt.Sprintf("HDET local, T = %d, G = %d", s.GradT, s.Slots),
		Config: trioConfig, Sync: "local", T: s.GradT, G: s.Slots})
}

func (s netSettings) ranks() int { return s.Hosts * s.Slots }

// sets are a row's --set values; data is the MNIST folder's absolute path.
func (s netSettings) sets(c netConfig, data string) []string {
	return []string{fmt.Sprintf("train.epochs=%d", s.Epochs), "train.steps=0", "train.sync=" + c.Sync,
		fmt.Sprintf("train.window=%d", c.T), fmt.Sprintf("train.eval_every=%d", max(1, s.EvalSteps/c.T)),
		fmt.Sprintf("train.replica_size=%d", c.G), "train.seed=1", "run.checkpoint_every=0", "run.keep=1", "workload.data=" + data}
}

// netResult is one run of the study: the link as measured, the bytes each
// host sent, and what its metrics say.
type netResult struct {
	Link    netLink
	Config  netConfig
	Command string
	Failed  string

	Qdisc        string
	DelayApplied bool
	Check        linkCheck
	Sent         []int64 // eth0 tx_bytes per host during the run
	ThroughQdisc []int64 // bytes the root qdisc sent per host during the run
	netMetrics
}

// studyNet is study 7.
func (b *bench) studyNet(ctx context.Context) (*table, error) {
	s := netDefaults(b.p.Quick)
	t := netTable(s)
	script := filepath.Join("scripts", "testbed.sh")
	if err := bedMissing(script); err != nil {
		return t, err
	}
	data, err := filepath.Abs(filepath.Join("data", "mnist"))
	if err != nil {
		return t, err
	}
	var res []netResult
	for _, l := range s.Links {
		for _, c := range s.configs() {
			r, err := b.netRun(ctx, s, script, data, l, c)
			if err != nil {
				if ctx.Err() != nil || !errors.Is(err, ErrRun) {
					return t, err
				}
				b.rn.log("  FAILED: %v", firstLine(err))
				r.Failed = firstLine(err)
			}
			t.Commands = append(t.Commands, r.Command)
			res = append(res, r)
		}
	}
	b.netTables(t, s, res)
	path := filepath.Join(b.plots, "net-accuracy-time.png")
	if err := plotNet(path, s, res); err != nil {
		return t, err
	}
	rel, err := filepath.Rel(filepath.Dir(b.doc), path)
	if err != nil {
		rel = path
	}
	t.note("![test accuracy against wall time, one panel per link](%s)", filepath.ToSlash(rel))
	return t, nil
}

// netTable is study 7's main table, empty.
func netTable(s netSettings) *table {
	return &table{Title: "Study 7: time to accuracy across hosts on slow links (sync modes, test bed)",
		Header: []string{"link", "run", "steps", "ms/step", "grad allreduce", "converge", "plan", "comm", "final acc", "to " + num(100*s.Target, 1) + "%", "evals"}}
}

// netRun takes the bed, shapes it, checks the link, runs one row and
// reads what the hosts sent; the bed is torn down and its lock released
// after every run, so other users of the bed wait at most one run.
func (b *bench) netRun(ctx context.Context, s netSettings, script, data string, l netLink, c netConfig) (netResult, error) {
	r := netResult{Link: l, Config: c}
	bd, err := openBed(ctx, script, s.Hosts, s.Slots, b.rn.log)
	if err != nil {
		return r, err
	}
	defer bd.close()
	if r.Qdisc, r.DelayApplied, err = bd.shape(ctx, l); err != nil {
		return r, err
	}
	if r.Check, err = checkLink(bd.hosts[0], bd.hosts[1], bd.hosts[1], checkBytes(l)); err != nil {
		return r, err
	}
	root, err := filepath.Abs(filepath.Join(b.rn.root, "s7"))
	if err != nil {
		return r, err
	}
	dir := filepath.Join(root, netLinkName(l), c.Name)
	if err := os.RemoveAll(dir); err != nil {
		return r, err
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return r, err
	}
	hf, err := bd.hostfile(filepath.Dir(dir))
	if err != nil {
		return r, err
	}
	tx0, err := bd.counter(ctx, "tx_bytes")
	if err != nil {
		return r, err
	}
	q0, err := bd.qdiscBytes(ctx)
	if err != nil {
		return r, err
	}
	out, err := b.netLaunch(ctx, &r, bd, s, hf, dir, data)
	if err != nil {
		return r, fmt.Errorf("%w: %s: %w\n%s", ErrRun, r.Command, err, tail(out, 2000))
	}
	tx1, err := bd.counter(ctx, "tx_bytes")
	if err != nil {
		return r, err
	}
	q1, err := bd.qdiscBytes(ctx)
	if err != nil {
		return r, err
	}
	r.Sent, r.ThroughQdisc = deltas(tx1, tx0), deltas(q1, q0)
	if r.netMetrics, err = readNetMetrics(dir, c.Sync, s.Target); err != nil {
		return r, fmt.Errorf("%w: %s: %w", ErrRun, r.Command, err)
	}
	b.rn.log("  %s, %s: %d steps, %.1f MB sent per host, accuracy %s", l.Name, c.Label, r.Steps, float64(r.Sent[0])/1e6, num(100*r.Accuracy, 2))
	bedSide := struct { // what the bed measured, for a later look (metrics.jsonl has the rest)
		Link         netLink
		Qdisc        string
		DelayApplied bool
		Check        linkCheck
		Sent         []int64
		ThroughQdisc []int64
		Expected     []float64
	}{l, r.Qdisc, r.DelayApplied, r.Check, r.Sent, r.ThroughQdisc, netExpected(s, c, r.netMetrics)}
	if data, err := json.MarshalIndent(bedSide, "", "  "); err == nil {
		_ = os.WriteFile(filepath.Join(dir, "hdetbench-net.json"), data, 0o644)
	}
	return r, nil
}

// netLaunch runs `mpirun --hostfile ... hdet run` for the row, its
// output into the run directory's hdetbench.log.
func (b *bench) netLaunch(ctx context.Context, r *netResult, bd *bed, s netSettings, hostfile, dir, data string) (string, error) {
	hdet, err := filepath.Abs(b.rn.hdet)
	if err != nil {
		return "", err
	}
	config, err := filepath.Abs(r.Config.Config)
	if err != nil {
		return "", err
	}
	// The ring allreduce is forced so that the bytes on the wire follow
	// its count (Open MPI otherwise picks an algorithm by size and ranks).
	args := []string{"--hostfile", hostfile, "-np", fmt.Sprint(s.ranks()), "--bind-to", "none",
		"--mca", "coll_tuned_use_dynamic_rules", "1", "--mca", "coll_tuned_allreduce_algorithm", "4",
		hdet, "run", config, "--run-dir", dir, "--progress", "none"}
	for _, v := range s.sets(r.Config, data) {
		args = append(args, "--set", v)
	}
	wd, _ := os.Getwd()
	r.Command = strings.ReplaceAll("mpirun "+strings.Join(args, " "), wd+string(filepath.Separator), "")
	b.rn.log("  [%s] %s", r.Link.Name, r.Command)
	ctx, cancel := context.WithTimeout(ctx, time.Hour)
	defer cancel()
	cmd := exec.CommandContext(ctx, "mpirun", args...)
	cmd.Env, cmd.WaitDelay = bd.env, 10*time.Second
	out, err := cmd.CombinedOutput()
	if mkErr := os.MkdirAll(dir, 0o755); mkErr == nil {
		_ = os.WriteFile(filepath.Join(dir, "hdetbench.log"), out, 0o644)
	}
	return string(out), err
}

// checkBytes is the link check's transfer: half a second at the link's
// rate, at least 1 MB; 64 MB unshaped.
func checkBytes(l netLink) int {
	if l.Rate == 0 {
		return 64 << 20
	}
	return max(1<<20, int(l.Rate/8/2))
}

// netLinkName is a link's folder name: unshaped, 100mbit-1000us.
func netLinkName(l netLink) string {
	if !l.shaped() {
		return "unshaped"
	}
	return tcRate(l.Rate) + "-" + tcUsec(l.Delay)
}

// fraction of the time, as a percentage.
func netShare(part, whole float64) string {
	if whole <= 0 || math.IsNaN(part) {
		return "-"
	}
	return num(100*part/whole, 1) + "%"
}
