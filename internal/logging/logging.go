// Package logging sets up hdet's zerolog logger: JSON when stderr is not a
// terminal, console format on a terminal, every line tagged with the rank.
package logging

import (
	"io"
	"os"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"
)

// Options choose the logger's shape.
type Options struct {
	Rank        int
	AllRanks    bool // log info-level events on every rank, not only rank 0
	Debug       bool
	ForceJSON   bool // JSON even on a terminal
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
	if f, ok := w.(*os.File); ok && !o.ForceJSON && isatty.IsTerminal(f.Fd()) {
		w = zerolog.ConsoleWriter{Out: f, TimeFormat: time.TimeOnly}
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
