package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// netTables fills study 7's table (time and accuracy) and adds the bytes
// table and the links table under it.
func (b *bench) netTables(t *table, s netSettings, res []netResult) {
	bytesT := &table{Title: "Study 7: bytes sent per step per host, measured (eth0 tx_bytes) vs the ring allreduce's count",
		Header: []string{"link", "run", "measured MB/step (host 1 / 2 / 3)", "expected MB/step", "measured / expected", "through the qdisc", "link-bound ms/step"}}
	for _, r := range res {
		if r.Failed != "" {
			t.add(r.Link.Name, r.Config.Label, "FAILED: "+r.Failed)
			continue
		}
		t.add(r.Link.Name, r.Config.Label, netSteps(r.netMetrics), num(1000*r.perStep(), 1),
			netShare(r.Allreduce, r.Wall), netShare(r.Converge, r.Wall), netShare(r.Plan, r.Wall),
			netShare(r.Allreduce+r.Converge+r.Plan, r.Wall), num(100*r.Accuracy, 2)+"%", netSeconds(r.ToTarget),
			fmt.Sprintf("%d (%s s)", r.Evals, num(r.EvalSecs, 1)))
		bytesT.add(netBytesRow(s, r)...)
	}
	t.More = append(t.More, bytesT, netLinksTable(s, res))
	netNotes(t, bytesT, s)
	for _, l := range s.Links {
		if netDelayMissing(l, res) {
			t.note("%s: the delay was NOT applied, the link was rate-limited only (tbf): this kernel has no sch_netem (netem); the links table says what was measured.", l.Name)
		}
	}
}

// netDelayMissing says whether a run at link l asked for a delay that the
// kernel could not apply.
func netDelayMissing(l netLink, res []netResult) bool {
	for _, r := range res {
		if r.Link == l && l.Delay > 0 && r.Check.Bytes > 0 && !r.DelayApplied {
			return true
		}
	}
	return false
}

// netSteps is the steps trained, with the search pass's share.
func netSteps(m netMetrics) string {
	if m.SearchSteps == 0 {
		return fmt.Sprint(m.Steps)
	}
	return fmt.Sprintf("%d (%d + %d)", m.Steps, m.SearchSteps, m.Steps-m.SearchSteps)
}

func netSeconds(v float64) string {
	if v != v { // NaN
		return "not reached"
	}
	return num(v, 1) + " s"
}

// netBytesRow is one run's row of the bytes table.
func netBytesRow(s netSettings, r netResult) []string {
	exp := netExpected(s, r.Config, r.netMetrics)
	steps := float64(max(r.Steps, 1))
	var meas []string
	var sumM, sumE, worst float64
	for h := range r.Sent {
		meas = append(meas, num(float64(r.Sent[h])/steps/1e6, 3))
		sumM, sumE = sumM+float64(r.Sent[h]), sumE+exp[h]
		worst = max(worst, exp[h])
	}
	var es []string
	for _, e := range exp {
		es = append(es, num(e/steps/1e6, 3))
	}
	if slices.Equal(es, slices.Repeat(es[:1], len(es))) {
		es = es[:1]
	}
	ratio, qd, bound := "-", "-", "-"
	if sumE > 0 {
		ratio = num(sumM/sumE, 3)
	}
	if r.Link.shaped() {
		var q int64
		for _, v := range r.ThroughQdisc {
			q += v
		}
		qd = netShare(float64(q), sumM)
		bound = num(1000*worst/steps*8/r.Link.Rate, 1)
	}
	return []string{r.Link.Name, r.Config.Label, strings.Join(meas, " / "), strings.Join(es, " / "), ratio, qd, bound}
}

// netLinksTable says how each link was shaped and what a timed transfer
// and TCP connects measured on it (median over the runs).
func netLinksTable(s netSettings, res []netResult) *table {
	t := &table{Title: "Study 7: the links as shaped and checked before every run",
		Header: []string{"link", "qdisc on every host's eth0 (tc qdisc show)", "delay applied", "transfer host 1 -> host 2 (Mbit/s)", "TCP connect (ms)", "runs"}}
	for _, l := range s.Links {
		var mbits, rtts []float64
		var qdisc, delay string
		for _, r := range res {
			if r.Link != l || r.Check.Bytes == 0 {
				continue
			}
			qdisc, delay = r.Qdisc, yesNo(r.DelayApplied)
			if l.Delay == 0 {
				delay = "-"
			} else if !r.DelayApplied {
				delay = "no: no sch_netem in this kernel"
			}
			mbits, rtts = append(mbits, r.Check.Mbits), append(rtts, float64(r.Check.RTT)/float64(time.Millisecond))
		}
		if len(mbits) == 0 {
			continue
		}
		t.add(l.Name, qdisc, delay, fmt.Sprintf("%s (%s..%s)", num(median(mbits), 0), num(slices.Min(mbits), 0), num(slices.Max(mbits), 0)),
			fmt.Sprintf("%s (%s..%s)", num(median(rtts), 3), num(slices.Min(rtts), 3), num(slices.Max(rtts), 3)), fmt.Sprint(len(mbits)))
	}
	return t
}

// netNotes says how the study was made and how to read it.
func netNotes(t, bytesT *table, s netSettings) {
	t.note("%d fake hosts of scripts/testbed.sh (network namespaces on one bridge, TCP only), %d ranks each (hostfile slots=%d, mpirun's --map-by slot: ranks %d..%d on host 1, and so on), W = %d; the MNIST MLP (784-256-256-10, %d parameters), AdamW, batch 64 per rank, %d epoch(s) per pass, evaluation every %d steps (every window for T > %d). Open MPI's ring allreduce is forced (coll_tuned_allreduce_algorithm 4). One run per cell, seed 1.",
		s.Hosts, s.Slots, s.Slots, 0, s.Slots-1, s.ranks(), modelFloats, s.Epochs, s.EvalSteps, s.EvalSteps)
	t.note("Rows: plain DP = bench/configs/plain.yaml (no explorers, constant lr 0.001, gradients all-reduced every step, window = the evaluation interval: the ranks hold the same parameters, so no window converges); HDET = examples/mnist.yaml (lr, dropout, weight decay explored; a search pass, then the main pass at the committed values) with train.sync and train.window set; G = %d: train.replica_size, a replica per host (gradients averaged on the host every step, the converge across hosts, each rank 1/G of the buffer).", s.Slots)
	t.note("Times from metrics.jsonl, rank 0's timers summed over both passes' windows: grad allreduce = the per-step gradient allreduces inside the fan-out (allreduce_seconds); converge = gather + converge allreduce; plan = controller + plan broadcast; comm = the three. ms/step = training wall time (start record to the last window, evaluations taken out: eval_seconds) / steps trained. To target: training wall time from the start record to the first evaluation at or above %s%% in the pass that gives the model (for HDET the main pass; the search pass's time counts). evals: how many, and their time, taken out of every time here.", num(100*s.Target, 1))
	t.note("Shaping: tc on eth0 inside each host's namespace (the host's egress into the bridge; traffic between the ranks of one host stays on its loopback, unshaped). The links table: the qdisc, a timed TCP transfer host 1 -> host 2 and the median of 9 TCP connects (one round trip) before every run.")
	t.note("The PyTorch ConvNet example was not run in this study (the built-in MLP only; replica groups need the built-in workload).")
	bytesT.note("Measured: the growth of each host's eth0 tx_bytes over the run (launch included) / steps trained. Expected: Open MPI's ring, in which rank i sends 2(P-1)/P of the buffer to rank i+1 of its communicator; only the ranks whose successor sits on another host use the link. With %d ranks per host in blocks that is one rank per host for an allreduce over all ranks (2(W-1)/W x the buffer per host, not x the ranks per host), and with G = %d every rank of the host (each 1/G of the buffer over the N = W/G replicas: 2(N-1)/N x the buffer per host). Per step in gradients mode: the gradients, %d floats (%.2f MB); per converge: the sync buffer, the parameters (gradients mode, only in windows with a spread) or the parameters and AdamW's moments (local mode, 3x: %.2f MB). Left out of the count: the gradient contributor count, the plan broadcast, the loss gather, the evaluation's sums, TCP/IP headers and the launch.",
		s.Slots, s.Slots, modelFloats, float64(4*modelFloats)/1e6, float64(12*modelFloats)/1e6)
	bytesT.note("through the qdisc: bytes the shaping qdisc sent (tc -s) / tx_bytes, which shows the run's traffic was shaped (a little over 100%%: the qdisc counts the headers of every segment of a GSO packet as it splits it). link-bound ms/step: the busiest host's expected bytes per step at the link's rate, the least time per step the link allows.")
	t.note("Load average at the end of the study: %s.", loadAvg())
}
