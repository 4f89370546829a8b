package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/engine"
	"github.com/hdet-dev/hdet/internal/logging"
	"github.com/hdet-dev/hdet/internal/session"
	"github.com/hdet-dev/hdet/mpi/reduce"
)

// Every way a run can end maps to one exit code and one way to end MPI.
func TestRunOutcomeMapsEveryEnd(t *testing.T) {
	report := func() error { return nil }
	agreedUsage := agreedErr(t, "train: {steps: 20, window: 0}", 0)
	for name, tc := range map[string]struct {
		out       session.Outcome
		err       error
		code      int
		abort     bool
		after     bool
		stderrHas string
	}{
		"finished":                      {out: session.Outcome{Report: report}, code: ExitOK, after: true},
		"finished, not rank 0":          {code: ExitOK},
		"stopped by a signal":           {err: fmt.Errorf("window 3: %w", engine.ErrStopped), code: ExitPreempted},
		"worker failed after a stop":    {err: errors.Join(engine.ErrStopped, errors.New("worker: exit 1")), code: ExitPreempted},
		"config error, agreed":          {err: agreedUsage, code: ExitUsage, stderrHas: "train.window: got 0"},
		"another rank's config error":   {err: agreedErr(t, okCfg, 2), code: ExitUsage},
		"another rank failed setup":     {err: agreedErr(t, okCfg, 1), code: ExitFailure},
		"failure on one rank mid-run":   {err: errors.New("rank 2, window 4: boom"), code: ExitFailure, abort: true},
		"rank 0 failed writing results": {err: errors.New("writing model.bin: no space left"), code: ExitFailure, abort: true},
		"script failed after the run":   {err: &session.AfterRunError{Err: errors.New("worker: finishing after STOP: exit 1")}, code: ExitFailure},
	} {
		t.Run(name, func(t *testing.T) {
			var stderr bytes.Buffer
			o := runOutcome(Streams{Err: &stderr}, zerolog.Nop(), tc.out, tc.err)
			assert.Equal(t, tc.code, o.Code)
			assert.True(t, o.MPI)
			assert.Equal(t, tc.abort, o.Abort, "abort")
			assert.Equal(t, tc.after, o.After != nil, "report after MPI_Finalize")
			assert.Contains(t, stderr.String(), tc.stderrHas)
		})
	}
}

// agreedErr runs a one-rank session whose setup fails while loading the
// config (bad non-empty) or whose peer fails (peer: the code another rank
// reports when the ranks agree), and returns its error.
func agreedErr(t *testing.T, bad string, peer float64) error {
	t.Helper()
	_, err := session.Run(context.Background(), session.Options{World: peerWorld{peer: peer}, Config: []byte(bad), Log: zerolog.Nop()})
	assert.True(t, session.Agreed(err), "%v", err)
	return err
}

// peerWorld is one rank whose Max reductions see another rank's code.
type peerWorld struct {
	session.World
	peer float64
}

func (p peerWorld) Rank() int      { return 0 }
func (p peerWorld) Size() int      { return 2 }
func (p peerWorld) LocalRank() int { return 0 }
func (p peerWorld) LocalSize() int { return 2 }
func (p peerWorld) AllreduceFloat64(b []float64, op reduce.Op) error {
	if op == reduce.Max {
		b[0] = max(b[0], p.peer)
	}
	return nil
}

const okCfg = "train: {steps: 20, window: 10}\nrun: {progress: none}\n"

// --log-format takes auto, json or console; anything else is a usage
// error (exit 2) that says what is allowed, before MPI starts.
func TestRunLogFormatFlag(t *testing.T) {
	var stderr bytes.Buffer
	s := Streams{Out: io.Discard, Err: &stderr}
	f, err := parseRun(s, []string{"--log-format", "json"})
	require.NoError(t, err)
	assert.Equal(t, logging.JSON, f.logFormat)
	f, err = parseRun(s, nil)
	require.NoError(t, err)
	assert.Equal(t, logging.Format(""), f.logFormat, "auto when not given")

	code := runRun(s, []string{"--log-format", "text"})
	assert.Equal(t, ExitUsage, code.Code)
	assert.Contains(t, stderr.String(), `invalid value "text" for flag -log-format: log format "text": want auto, json or console`)
}
