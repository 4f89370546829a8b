package plugins

import (
	"fmt"
	"io"
	"log"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/rs/zerolog"
)

// zerologHCLog is an hclog.Logger writing to a zerolog.Logger, so go-plugin's
// own messages and the lines explorers log (which go-plugin re-logs on the
// host) land in hdet's log with hdet's format and level.
type zerologHCLog struct {
	zl      zerolog.Logger
	name    string
	implied []any
	level   hclog.Level // NoLevel: follow zl's level
}

// NewHCLogger returns an hclog.Logger that writes to zl.
func NewHCLogger(zl zerolog.Logger) hclog.Logger {
	return &zerologHCLog{zl: zl, level: hclog.NoLevel}
}

var toZerolog = map[hclog.Level]zerolog.Level{
	hclog.Trace: zerolog.TraceLevel,
	hclog.Debug: zerolog.DebugLevel,
	hclog.Info:  zerolog.InfoLevel,
	hclog.Warn:  zerolog.WarnLevel,
	hclog.Error: zerolog.ErrorLevel,
}

func (l *zerologHCLog) Log(level hclog.Level, msg string, args ...any) {
	if !l.enabled(level) {
		return
	}
	zlevel, ok := toZerolog[level]
	if !ok {
		zlevel = zerolog.InfoLevel
	}
	ev := l.zl.WithLevel(zlevel)
	if l.name != "" {
		ev = ev.Str("plugin", l.name)
	}
	all := append(append([]any{}, l.implied...), args...)
	for i := 0; i < len(all); i += 2 {
		if i+1 == len(all) {
			ev = ev.Interface("EXTRA_VALUE_AT_END", all[i])
			break
		}
		key, ok := all[i].(string)
		if !ok {
			key = fmt.Sprint(all[i])
		}
		if err, isErr := all[i+1].(error); isErr {
			ev = ev.AnErr(key, err)
			continue
		}
		ev = ev.Interface(key, all[i+1])
	}
	ev.Msg(msg)
}

func (l *zerologHCLog) enabled(level hclog.Level) bool {
	if level == hclog.Off || level == hclog.NoLevel {
		return false
	}
	return level >= l.GetLevel()
}

func (l *zerologHCLog) Trace(msg string, args ...any) { l.Log(hclog.Trace, msg, args...) }
func (l *zerologHCLog) Debug(msg string, args ...any) { l.Log(hclog.Debug, msg, args...) }
func (l *zerologHCLog) Info(msg string, args ...any)  { l.Log(hclog.Info, msg, args...) }
func (l *zerologHCLog) Warn(msg string, args ...any)  { l.Log(hclog.Warn, msg, args...) }
func (l *zerologHCLog) Error(msg string, args ...any) { l.Log(hclog.Error, msg, args...) }

func (l *zerologHCLog) IsTrace() bool { return l.enabled(hclog.Trace) }
func (l *zerologHCLog) IsDebug() bool { return l.enabled(hclog.Debug) }
func (l *zerologHCLog) IsInfo() bool  { return l.enabled(hclog.Info) }
func (l *zerologHCLog) IsWarn() bool  { return l.enabled(hclog.Warn) }
func (l *zerologHCLog) IsError() bool { return l.enabled(hclog.Error) }

func (l *zerologHCLog) ImpliedArgs() []any { return l.implied }

func (l *zerologHCLog) With(args ...any) hclog.Logger {
	c := *l
	c.implied = append(append([]any{}, l.implied...), args...)
	return &c
}

func (l *zerologHCLog) Name() string { return l.name }

func (l *zerologHCLog) Named(name string) hclog.Logger {
	if l.name != "" {
		name = l.name + "." + name
	}
	return l.ResetNamed(name)
}

func (l *zerologHCLog) ResetNamed(name string) hclog.Logger {
	c := *l
	c.name = name
	return &c
}

func (l *zerologHCLog) SetLevel(level hclog.Level) { l.level = level }

// GetLevel is the explicit level, or the zerolog logger's (and global) level.
func (l *zerologHCLog) GetLevel() hclog.Level {
	if l.level != hclog.NoLevel {
		return l.level
	}
	zlevel := l.zl.GetLevel()
	if g := zerolog.GlobalLevel(); g > zlevel {
		zlevel = g
	}
	switch {
	case zlevel <= zerolog.TraceLevel:
		return hclog.Trace
	case zlevel == zerolog.DebugLevel:
		return hclog.Debug
	case zlevel == zerolog.InfoLevel:
		return hclog.Info
	case zlevel == zerolog.WarnLevel:
		return hclog.Warn
	case zlevel == zerolog.ErrorLevel:
		return hclog.Error
	default:
		return hclog.Off
	}
}

func (l *zerologHCLog) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(l.StandardWriter(opts), "", 0)
}

// StandardWriter logs each line written to it, at opts.ForceLevel or Info.
func (l *zerologHCLog) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	level := hclog.Info
	if opts != nil && opts.ForceLevel != hclog.NoLevel {
		level = opts.ForceLevel
	}
	return lineWriter{l: l, level: level}
}

type lineWriter struct {
	l     *zerologHCLog
	level hclog.Level
}

func (w lineWriter) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		w.l.Log(w.level, line)
	}
	return len(p), nil
}
