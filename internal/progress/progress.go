// Package progress prints rank 0's training progress: one line redrawn in
// place on a terminal, or a log line every few windows or seconds otherwise
// (under Slurm, or with output redirected to a file).
package progress

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/hdet-dev/hdet/internal/terminal"
)

// Mode chooses how progress is shown.
type Mode int

const (
	Auto  Mode = iota // Terminal on a terminal, Plain otherwise
	Plain             // a line every Every windows or Interval, whichever first
	None              // nothing
)

// ErrMode is returned by ParseMode for an unknown mode.
var ErrMode = errors.New("progress mode must be auto, plain or none")

// ParseMode parses "auto", "plain" or "none".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "auto":
		return Auto, nil
	case "plain":
		return Plain, nil
	case "none":
		return None, nil
	}
	return 0, fmt.Errorf("%w, got %q", ErrMode, s)
}

func (m Mode) String() string {
	switch m {
	case Auto:
		return "auto"
	case Plain:
		return "plain"
	case None:
		return "none"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Defaults for plain mode.
const (
	DefaultEvery    = 10
	DefaultInterval = 30 * time.Second
)

// Reporter shows progress. Call Update once per window and Done at the end.
// It is not safe for concurrent use; only rank 0's training loop calls it.
type Reporter struct {
	// Every and Interval pace plain mode: a line after Every windows or
	// Interval since the last line, whichever comes first.
	Every    int
	Interval time.Duration

	w         io.Writer
	mode      Mode // Plain or None; Auto becomes Plain, or terminal when w is one
	terminal  bool
	startStep int
	pass      int // the pass of the last update: the ETA restarts with the main pass
	now       func() time.Time
	started   time.Time
	lastLine  time.Time
	sinceLine int  // windows since the last plain line
	pending   bool // a plain update not yet printed, for Done
	last      string
}

// New returns a reporter writing to w. pass and startStep are where
// training starts (a resume's), so the ETA counts only this process's
// speed.
func New(w io.Writer, mode Mode, pass, startStep int) *Reporter {
	r := &Reporter{Every: DefaultEvery, Interval: DefaultInterval, w: w, mode: mode,
		pass: pass, startStep: startStep, now: time.Now}
	if mode == Auto {
		r.terminal = isTerminal(w)
		r.mode = Plain
	}
	r.started = r.now()
	r.lastLine = r.started
	return r
}

// isTerminal reports whether w redraws in place for a person: a terminal
// and, under mpirun, forwarded to one. Open MPI gives each local rank a
// pseudo-terminal as stdout and forwards it, whatever mpirun's own output
// is (a log file, a pipe), so there the launcher's stdout decides.
func isTerminal(w io.Writer) bool {
	return terminal.Is(w) && (!terminal.UnderMPI() || terminal.Launcher(1))
}

// Update reports that step of total steps of pass are done (the search
// pass, or the one pass of a run that does not commit, is 0; the main pass
// is 1), with the mean window loss and the base learning rate (NaN when
// the run explores none).
func (r *Reporter) Update(pass, step, total int, loss, lr float64) {
	if r.mode == None {
		return
	}
	now := r.now()
	if pass != r.pass {
		r.pass, r.startStep, r.started = pass, 0, now
	}
	r.last = r.line(step, total, loss, lr, now)
	if r.terminal {
		// \r and erase-line redraw the same line.
		fmt.Fprintf(r.w, "\r\x1b[K%s", r.last)
		return
	}
	r.sinceLine++
	r.pending = true
	if r.sinceLine >= max(r.Every, 1) || now.Sub(r.lastLine) >= r.Interval || step >= total {
		fmt.Fprintln(r.w, r.last)
		r.sinceLine, r.pending, r.lastLine = 0, false, now
	}
}

// Done ends the progress display: it ends the redrawn line on a terminal and
// prints the last update in plain mode if it was not printed yet.
func (r *Reporter) Done() {
	switch {
	case r.mode == None || r.last == "":
	case r.terminal:
		fmt.Fprintln(r.w)
	case r.pending:
		fmt.Fprintln(r.w, r.last)
		r.pending = false
	}
}

func (r *Reporter) line(step, total int, loss, lr float64, now time.Time) string {
	var b strings.Builder
	if r.pass > 0 {
		b.WriteString("main pass: ")
	}
	fmt.Fprintf(&b, "step %d/%d", step, total)
	if total > 0 {
		fmt.Fprintf(&b, " (%.1f%%)", 100*float64(step)/float64(total))
	}
	fmt.Fprintf(&b, "  loss %.4g", loss)
	if !math.IsNaN(lr) {
		fmt.Fprintf(&b, "  lr %.3g", lr)
	}
	elapsed := now.Sub(r.started)
	fmt.Fprintf(&b, "  elapsed %s", clock(elapsed))
	if done := step - r.startStep; done > 0 && step <= total {
		eta := time.Duration(float64(elapsed) * float64(total-step) / float64(done))
		fmt.Fprintf(&b, "  eta %s", clock(eta))
	}
	return b.String()
}

// clock formats a duration as h:mm:ss or m:ss.
func clock(d time.Duration) string {
	s := int(d.Round(time.Second) / time.Second)
	if s >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
	}
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}
