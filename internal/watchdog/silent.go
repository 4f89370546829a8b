package watchdog

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// AbortGrace is how long the watchdog lets MPI_Abort end the job before the
// rank exits by itself: with a host frozen (stopped, its link down) the abort
// can hang in the launcher ("abort is already in progress") and keep every
// surviving rank alive with it.
const AbortGrace = 5 * time.Second

// abort calls Options.Abort and, if this rank still runs after the grace
// period, exits it with code (Options.Exit, os.Exit by default) unless the
// watchdog was stopped meanwhile.
func (w *Watchdog) abort(code int) {
	grace, exit := w.o.AbortGrace, w.o.Exit
	if grace <= 0 {
		grace = AbortGrace
	}
	if exit == nil {
		exit = os.Exit
	}
	go w.o.Abort(code)
	select {
	case <-w.done: // stopped: the rank is ending anyway
		return
	case <-time.After(grace):
	}
	w.o.Log.Error().Int("exit_code", code).
		Msgf("watchdog: MPI_Abort has not ended this rank within %s; exiting it locally (the checkpoints already written stay valid)", grace)
	exit(code)
}

// Silent names the ranks among beats that went silent (no heartbeat, or one
// older than stale) grouped by host, e.g. "ranks 4, 5 on hdnode3", or "" when
// every rank still beats. A whole host going silent points at the host or
// its link rather than at hdet.
func Silent(beats []*Beat, now time.Time, stale time.Duration) string {
	byHost := map[string][]int{}
	for r, b := range beats {
		switch {
		case b == nil:
			byHost["an unknown host"] = append(byHost["an unknown host"], r)
		case now.Sub(time.Unix(0, int64(b.Time*1e9))) > stale:
			byHost[b.Host] = append(byHost[b.Host], r)
		}
	}
	// Ranks are visited in order, so each host's list is sorted; hosts come
	// in the order of their first rank.
	hosts := make([]string, 0, len(byHost))
	for h := range byHost {
		hosts = append(hosts, h)
	}
	slices.SortFunc(hosts, func(a, b string) int { return byHost[a][0] - byHost[b][0] })
	parts := make([]string, 0, len(hosts))
	for _, h := range hosts {
		rs := byHost[h]
		word := "rank"
		if len(rs) > 1 {
			word = "ranks"
		}
		parts = append(parts, fmt.Sprintf("%s %s on %s", word, strings.Trim(strings.Join(strings.Fields(fmt.Sprint(rs)), ", "), "[]"), h))
	}
	return strings.Join(parts, "; ")
}
