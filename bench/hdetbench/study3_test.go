package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
)

// fakePass is a pass of n windows of T steps, each taking the given
// seconds (probe inside fanout), over wall seconds in all.
func fakePass(n, T int, fanout, probe, conv, plan, wall float64) passTimes {
	p := passTimes{Steps: n * T, FirstTime: 1000, LastTime: 1000 + wall}
	for range n {
		p.Fanout, p.Probe = append(p.Fanout, fanout), append(p.Probe, probe)
		p.Converge, p.Plan = append(p.Converge, conv), append(p.Plan, plan)
		if probe > 0 {
			p.Probed++
		}
	}
	return p
}

func TestStudy3Tables(t *testing.T) {
	b := &bench{p: defaults(true)}
	b.p.Windows = []int{100}
	var pairs []overheadPair
	for _, plainStep := range []float64{0.010, 0.012} {
		plain := result{Steps: 1000, Passes: []passTimes{fakePass(1, 1000, 1000*plainStep, 0, 0, 0, 1000*plainStep)}}
		plain.TrainSeconds = plain.Passes[0].seconds()
		// the main pass: 0.8% slower per step; the search pass: 300 steps,
		// every window but the last probing.
		search := fakePass(3, 100, 100*plainStep*1.2, 0.1, 0.01, 0.005, 3*(100*plainStep*1.2+0.015))
		search.Probe[2], search.Probed = 0, 2
		main := fakePass(10, 100, 100*plainStep*1.008-0.002, 0, 0.001, 0.001, 10*100*plainStep*1.02)
		main.Restart = 0.05
		h := result{Steps: 1000, Passes: []passTimes{search, main}}
		h.TrainSeconds = search.seconds() + main.seconds()
		pairs = append(pairs, overheadPair{plain: plain, hdet: map[int]result{100: h}})
	}
	tb := &table{Title: "Study 3", Header: []string{"run"}}
	b.overheadRows(tb, pairs)
	tb.More = append(tb.More, b.searchCostTable(pairs))
	b.overheadNotes(tb, pairs)
	var md bytes.Buffer
	tb.markdown(&md)
	s := md.String()
	assert.Contains(t, s, "| plain DP, no explorers | - | 11.000 | 10.000..12.000 | - | 11.000 | - | 0.00 | 0.00 | - |")
	assert.Contains(t, s, "| HDET main pass, 3 explorers committed | 100 | 11.088 | 10.080..12.096 | +0.8% (+0.8%..+0.8%) | 11.220 | +2.0% | 1.00 | 1.00 | 50.0 |")
	assert.Contains(t, s, "| 100 | 300 | 3 (2) | 1270.0 | 100.00 | 5.00 | 10.00 | 13.350 | +21.4% |")
	assert.Contains(t, s, "Target met: the main pass at T = 100 is +0.8% per step against plain DP (median of 2 pairs; target: at most +1%)")
	assert.Contains(t, s, "HDET at T = 100 was +9.9% per step and at T = 10 +50%")
}
