// Package logging sets up hdet's zerolog logger: lines for people (console
// format) where stderr reaches a terminal, JSON lines for tools otherwise
// or when asked, every line tagged with the rank.
package logging

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/rs/zerolog"

	"github.com/hdet-dev/hdet/internal/terminal"
)

// Format is how log lines are written.
type Format string

const (
	Auto    Format = "auto"    // Console where the lines reach a terminal, else JSON
	JSON    Format = "json"    // one JSON object a line, for tools
	Console Format = "console" // zerolog's ConsoleWriter, for people
)

// ParseFormat reads --log-format's value; empty is Auto.
func ParseFormat(s string) (Format, error) {
	switch f := Format(s); f {
	case "":
		return Auto, nil
	case Auto, JSON, Console:
		return f, nil
	}
	return "", fmt.Errorf("log format %q: want auto, json or console", s)
}

// Options choose the logger's shape.
type Options struct {
	Rank        int
	AllRanks    bool // log info-level events on every rank, not only rank 0
	Debug       bool
	Format      Format // "" is Auto
	Destination io.Writer
}

// New returns a logger for one rank. Rank 0 logs the run's events; other ranks
// log only their own warnings and errors unless AllRanks is set, so N ranks
// do not print every line N times.
func New(o Options) zerolog.Logger {
	w := o.Destination
	if w == nil {
		w = os.Stderr
	}
	tty := reachesTerminal(w)
	if o.Format == Console || (o.Format != JSON && tty) {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly, NoColor: !tty}
	}
	level := zerolog.InfoLevel
	if o.Debug {
		level = zerolog.DebugLevel
	}
	if o.Rank != 0 && !o.AllRanks && level < zerolog.WarnLevel {
		level = zerolog.WarnLevel
	}
	return zerolog.New(w).Level(level).With().Timestamp().Int("rank", o.Rank).Logger()
}

// reachesTerminal reports whether w's lines reach a person's terminal: w is
// one, or, under mpirun, which forwards a rank's stderr through a pipe, the
// launcher writes that descriptor to one.
func reachesTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if ok && terminal.UnderMPI() {
		return terminal.Launcher(f.Fd())
	}
	return terminal.Is(w)
}
