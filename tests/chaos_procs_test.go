package tests

import (
	"fmt"
	"sort"
	"syscall"
	"time"
)

// The chaos soak's faults on processes: SIGKILL of a rank or of a host's
// processes, a host frozen (SIGSTOP) and thawed, a signal to mpirun, the
// lr explorer killed; and what a launch must log after one (c.expect).

func armKillRank(c *chaos) func() (*injection, func()) {
	ranks := c.rankPIDs()
	if len(ranks) == 0 {
		return nil
	}
	pids := make([]int, 0, len(ranks))
	for p := range ranks {
		pids = append(pids, p)
	}
	sort.Ints(pids)
	pid := pids[c.rng.IntN(len(pids))]
	return func() (*injection, func()) {
		at := time.Now()
		if syscall.Kill(pid, syscall.SIGKILL) != nil {
			return nil, nil
		}
		return &injection{at: at, detail: ranks[pid]}, nil
	}
}

func armKillHost(c *chaos) func() (*injection, func()) {
	h := c.host()
	pids := c.hostPIDs(h)
	if len(pids) == 0 {
		return nil
	}
	return func() (*injection, func()) {
		at := time.Now()
		signalAll(pids, syscall.SIGKILL)
		return &injection{at: at, detail: fmt.Sprintf("%s: %d processes", h, len(pids))}, nil
	}
}

func signalAll(pids []int, sig syscall.Signal) {
	for _, p := range pids {
		_ = syscall.Kill(p, sig)
	}
}

func armFreezeHost(c *chaos) func() (*injection, func()) {
	h := c.host()
	pids := c.hostPIDs(h)
	if len(pids) == 0 {
		return nil
	}
	d := chaosWatchdog + c.uniform(2*time.Second, 5*time.Second)
	return func() (*injection, func()) {
		at := time.Now()
		signalAll(pids, syscall.SIGSTOP)
		return &injection{at: at, dur: d, detail: fmt.Sprintf("%s: %d processes stopped for %.1f s", h, len(pids), d.Seconds())},
			func() { signalAll(pids, syscall.SIGCONT) }
	}
}

// chaosExpect is what a launch's log must show: launch from's, or (only
// false) that of one launch from it on.
type chaosExpect struct {
	from      int
	only      bool
	text, why string
}

func (c *chaos) expect(from int, only bool, text, why string) {
	c.expects = append(c.expects, chaosExpect{from: from, only: only, text: text, why: why})
}

// armSignal arms SIGUSR1 or SIGTERM to mpirun (it forwards them to every
// rank), once mpirun has started every rank: signalled while it still
// starts them, Open MPI 4.1's mpirun can end with "ORTE does not know how
// to route a message" and exit 0 having run nothing (or drop the signal),
// which is the launcher's doing, not hdet's (docs/chaos.md).
func armSignal(sig syscall.Signal) armer {
	return func(c *chaos) func() (*injection, func()) {
		l := c.cur
		if l.exited() || len(c.rankPIDs()) < c.ranks() {
			return nil
		}
		return func() (*injection, func()) {
			at := time.Now()
			if l.cmd.Process.Signal(sig) != nil {
				return nil, nil
			}
			return &injection{at: at, detail: "to mpirun"}, nil
		}
	}
}

// armSigusr1 is armSignal of SIGUSR1.
var armSigusr1 = armSignal(syscall.SIGUSR1)

func armExplorerKill(c *chaos) func() (*injection, func()) {
	for _, h := range c.tb.hosts {
		if pids := c.pidsOf(h, c.explorer); len(pids) > 0 {
			return func() (*injection, func()) {
				at := time.Now()
				signalAll(pids, syscall.SIGKILL)
				return &injection{at: at, detail: fmt.Sprintf("pid %d on %s", pids[0], h)}, nil
			}
		}
	}
	return nil
}
