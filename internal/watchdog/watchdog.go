// Package watchdog ends a job whose ranks stop progressing. Each rank keeps
// a heartbeat file (DIR/rank-N: where it is in the run, rewritten at every
// phase change and every Period) and a goroutine that, when this rank's
// current phase or collective has lasted longer than the timeout, reads the
// other ranks' heartbeats, names the late ones and calls MPI_Abort. A rank
// stopped with SIGSTOP cannot abort itself: the ranks waiting for it do.
//
// Heartbeats are files because they work the same on one node and across
// nodes sharing the run directory, and because a stopped or hung rank must
// be diagnosable without its cooperation: its file simply stops changing.
package watchdog

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/hdet-dev/hdet/internal/atomicfile"
	"github.com/hdet-dev/hdet/internal/engine"
)

// Beat is one rank's heartbeat: where it is in the run.
type Beat struct {
	Rank   int     `json:"rank"`
	PID    int     `json:"pid"`
	Host   string  `json:"host"`
	Window int     `json:"window"` // -1 during setup
	Step   int     `json:"step"`   // the window's first step (plan, train) or last (after training)
	Phase  string  `json:"phase"`
	Op     string  `json:"op,omitempty"` // the collective in progress, if any
	Ops    int     `json:"ops"`          // collectives completed in this phase
	Since  float64 `json:"since"`        // unix seconds: when Phase or Op last changed
	Time   float64 `json:"time"`         // unix seconds: when the beat was written
}

// phaseOrder ranks the window loop's phases, so a beat can be compared
// with another of the same window.
var phaseOrder = map[string]int{
	engine.PhasePlan: 1, engine.PhaseTrain: 2, engine.PhaseGather: 3, engine.PhaseRollback: 4,
	engine.PhaseConverge: 5, engine.PhaseEvaluate: 6, engine.PhaseObserve: 7, engine.PhaseCheckpoint: 8,
}

// before reports whether a is behind b in the run.
func before(a, b Beat) bool {
	inA, inB := 0, 0
	if a.Op != "" {
		inA = 1
	}
	if b.Op != "" {
		inB = 1
	}
	return cmp.Or(cmp.Compare(a.Window, b.Window), cmp.Compare(phaseOrder[a.Phase], phaseOrder[b.Phase]),
		cmp.Compare(a.Step, b.Step), cmp.Compare(a.Ops, b.Ops), cmp.Compare(inA, inB)) < 0
}

func (b Beat) where() string {
	s := fmt.Sprintf("window %d, step %d, phase %s", b.Window, b.Step, b.Phase)
	if b.Window < 0 {
		s = "phase " + b.Phase
	}
	if b.Ops > 0 {
		s += fmt.Sprintf(" after %d collectives", b.Ops)
	}
	if b.Op != "" {
		s += ", inside " + b.Op
	}
	return s
}

// Options configure a Watchdog.
type Options struct {
	Dir     string        // heartbeat folder every rank can read (RUN_DIR/heartbeats)
	Rank    int           //
	Size    int           // ranks in the job
	Timeout time.Duration // how long a phase or collective may last; 0: never abort
	// Abort ends the whole job (mpi.Abort); it is called at most once.
	Abort func(code int)
	// Exit ends this rank when Abort has not within AbortGrace (default
	// os.Exit, and the package's AbortGrace).
	Exit       func(code int)
	AbortGrace time.Duration
	Log        zerolog.Logger
	// Collectives, when set, logs every collective with its duration.
	Collectives *zerolog.Logger
	// Now is the clock phases are timed by; nil: time.Now (tests inject one).
	Now func() time.Time
}

// Watchdog tracks this rank's phase; see the package comment. Its methods
// are safe for concurrent use, and a nil *Watchdog does nothing.
type Watchdog struct {
	o      Options
	period time.Duration
	host   string
	wake   chan struct{}
	done   chan struct{}
	wg     sync.WaitGroup

	mu      sync.Mutex
	cur     Beat
	since   time.Time
	warned  bool // a heartbeat write failed (warned once)
	stopped bool
}

// SetupTimeout is the least time a setup phase (window < 0: loading data,
// starting a worker process, which can take minutes) may last, whatever the
// timeout: a short watchdog is meant for the window loop. The commit's
// restart (engine.PhaseRestart) gets it too: for a worker run it ends the
// script and starts it again (found by the PyTorch chaos soak: Python and
// torch starting on a loaded node outlasted a 15 s train.watchdog, and the
// run aborted at every commit).
const SetupTimeout = 10 * time.Minute

// Period is how often a watchdog with the given timeout refreshes its
// heartbeat and checks its phase: a tenth of the timeout, within [50ms, 10s].
func Period(timeout time.Duration) time.Duration {
	return min(max(timeout/10, 50*time.Millisecond), 10*time.Second)
}

// Start begins watching this rank, in phase "start". With a zero Timeout it
// only times collectives (when Options.Collectives is set) and writes no
// heartbeat.
func Start(o Options) *Watchdog {
	if o.Now == nil {
		o.Now = time.Now
	}
	w := &Watchdog{o: o, period: Period(o.Timeout), wake: make(chan struct{}, 1), done: make(chan struct{})}
	w.host, _ = os.Hostname()
	now := o.Now()
	w.cur = Beat{Rank: o.Rank, PID: os.Getpid(), Host: w.host, Window: -1, Phase: "start"}
	w.since = now
	if o.Timeout > 0 {
		if err := os.MkdirAll(o.Dir, 0o755); err != nil {
			w.warnWrite(err)
		}
		w.write()
		w.wg.Add(2)
		go w.beat()
		go w.check()
	}
	return w
}

// Stop ends the watching; the heartbeat file stays.
func (w *Watchdog) Stop() {
	if w == nil {
		return
	}
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return
	}
	w.stopped = true
	w.mu.Unlock()
	close(w.done)
	w.wg.Wait()
}

// Enter marks the start of a phase of window (-1 during setup) at step.
func (w *Watchdog) Enter(window, step int, phase string) {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.cur.Window, w.cur.Step, w.cur.Phase, w.cur.Op, w.cur.Ops = window, step, phase, "", 0
	w.since = w.o.Now()
	w.mu.Unlock()
	w.notify()
}

// Setup marks a setup phase (before the window loop).
func (w *Watchdog) Setup(phase string) { w.Enter(-1, 0, phase) }

// collective marks the start of a collective and returns the function that
// marks its end.
func (w *Watchdog) collective(op string) func() {
	if w == nil {
		return func() {}
	}
	w.mu.Lock()
	w.cur.Op = op
	start := w.o.Now()
	w.since = start
	w.mu.Unlock()
	return func() {
		now := w.o.Now()
		w.mu.Lock()
		w.cur.Op = ""
		w.cur.Ops++
		w.since = now
		b := w.cur
		w.mu.Unlock()
		if l := w.o.Collectives; l != nil {
			l.Debug().Str("collective", op).Int("window", b.Window).Str("phase", b.Phase).
				Float64("seconds", now.Sub(start).Seconds()).Msg("collective")
		}
	}
}

func (w *Watchdog) notify() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// beat rewrites the heartbeat after every change and every period, off the
// training goroutine, so a slow filesystem never slows or blocks training.
func (w *Watchdog) beat() {
	defer w.wg.Done()
	t := time.NewTicker(w.period)
	defer t.Stop()
	for {
		select {
		case <-w.done:
			w.write()
			return
		case <-t.C:
		case <-w.wake:
		}
		w.write()
	}
}

func (w *Watchdog) snapshot() (Beat, time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	b := w.cur
	b.Since = unix(w.since)
	return b, w.since
}

func unix(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

func (w *Watchdog) path(rank int) string {
	return filepath.Join(w.o.Dir, fmt.Sprintf("rank-%d", rank))
}

func (w *Watchdog) write() {
	b, _ := w.snapshot()
	b.Time = unix(w.o.Now())
	data, err := json.Marshal(b)
	if err != nil {
		w.warnWrite(err)
		return
	}
	if err := atomicfile.WriteVolatile(w.path(w.o.Rank), data); err != nil {
		w.warnWrite(err)
	}
}

// warnWrite warns once: without heartbeats the watchdog still aborts, but
// cannot name the late rank.
func (w *Watchdog) warnWrite(err error) {
	w.mu.Lock()
	first := !w.warned
	w.warned = true
	w.mu.Unlock()
	if first {
		w.o.Log.Warn().Err(err).Msg("watchdog: cannot write this rank's heartbeat; a hang will still abort the job, without naming the late rank")
	}
}

// check aborts the job when this rank's phase or collective has lasted
// longer than the timeout.
func (w *Watchdog) check() {
	defer w.wg.Done()
	t := time.NewTicker(w.period)
	defer t.Stop()
	for {
		select {
		case <-w.done:
			return
		case <-t.C:
		}
		self, waited, what, over := w.overdue()
		if !over {
			continue
		}
		late, silent, detail := w.diagnose(self)
		if silent != "" {
			silent = "silent: " + silent + "; "
		}
		w.o.Log.Error().Ints("late_ranks", late).Str("waiting_in", self.where()).Dur("waited_ms", waited).
			Msgf("watchdog: this rank has waited %.1fs in %s, longer than %s; %s%s; aborting the job",
				waited.Seconds(), self.where(), what, silent, detail)
		w.abort(1)
		return
	}
}

// overdue reports whether this rank's current phase or collective has
// lasted longer than its limit (what names the limit), and for how long.
func (w *Watchdog) overdue() (self Beat, waited time.Duration, what string, over bool) {
	self, since := w.snapshot()
	waited = w.o.Now().Sub(since)
	limit, what := w.o.Timeout, fmt.Sprintf("train.watchdog (%s)", w.o.Timeout)
	if (self.Window < 0 || self.Phase == engine.PhaseRestart) && limit < SetupTimeout {
		limit, what = SetupTimeout, fmt.Sprintf("the setup limit (%s)", SetupTimeout)
	}
	return self, waited, what, waited > limit
}

// readTimeout bounds reading the heartbeats: a hung shared filesystem must
// not stop the watchdog from aborting.
const readTimeout = 10 * time.Second

// diagnose reads every rank's heartbeat and names the late ranks: those
// whose heartbeat is missing or stale (stopped, dead or hung in a way that
// also stops their heartbeat goroutine, the silent ones) and those behind
// the furthest rank.
func (w *Watchdog) diagnose(self Beat) (late []int, silent, detail string) {
	type result struct {
		beats []*Beat
		errs  []error
	}
	ch := make(chan result, 1)
	go func() {
		r := result{beats: make([]*Beat, w.o.Size), errs: make([]error, w.o.Size)}
		for i := range w.o.Size {
			if i == w.o.Rank {
				s := self
				s.Time = unix(w.o.Now())
				r.beats[i] = &s
				continue
			}
			r.beats[i], r.errs[i] = ReadBeat(w.path(i))
		}
		ch <- r
	}()
	select {
	case r := <-ch:
		now, stale := w.o.Now(), 3*w.period+time.Second
		late, detail = Late(r.beats, r.errs, now, stale)
		return late, Silent(r.beats, now, stale), detail
	case <-time.After(readTimeout):
		return nil, "", fmt.Sprintf("the heartbeats in %s could not be read within %s", w.o.Dir, readTimeout)
	}
}

// ReadBeat reads one heartbeat file.
func ReadBeat(path string) (*Beat, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var b Beat
	if err := json.Unmarshal(data, &b); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &b, nil
}

// Late names the late ranks among beats (nil where errs says why there is
// none) at time now, a beat older than stale counting as a rank that stopped
// responding, and describes each.
func Late(beats []*Beat, errs []error, now time.Time, stale time.Duration) ([]int, string) {
	var front *Beat
	for _, b := range beats {
		if b != nil && (front == nil || before(*front, *b)) {
			front = b
		}
	}
	var late []int
	var why []string
	for r, b := range beats {
		if b == nil {
			late = append(late, r)
			why = append(why, fmt.Sprintf("rank %d: no heartbeat (%v)", r, errs[r]))
			continue
		}
		switch age := now.Sub(time.Unix(0, int64(b.Time*1e9))); {
		case age > stale:
			late = append(late, r)
			why = append(why, fmt.Sprintf("rank %d (pid %d on %s): not responding, last heartbeat %.1fs ago, last at %s",
				r, b.PID, b.Host, age.Seconds(), b.where()))
		case before(*b, *front):
			late = append(late, r)
			why = append(why, fmt.Sprintf("rank %d (pid %d on %s): behind, at %s for %.1fs",
				r, b.PID, b.Host, b.where(), b.Time-b.Since))
		}
	}
	if len(late) == 0 {
		where := "an unknown place"
		if front != nil {
			where = front.where()
		}
		return nil, fmt.Sprintf("no rank is behind (all at %s): a collective that never completes points at the network or MPI", where)
	}
	slices.Sort(late)
	return late, "late: " + strings.Join(why, "; ")
}
