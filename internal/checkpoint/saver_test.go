package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// saverIn returns a rank-0 saver writing into dir after every window.
func saverIn(dir string, maxFailing time.Duration, log *bytes.Buffer) *Saver {
	return &Saver{Dir: dir, Every: 1, Keep: 2, Ranks: 1, ParamCount: 1, MaxFailing: maxFailing,
		Buffer:     func() []float32 { return []float32{1, 2} },
		Controller: func(context.Context) ([]byte, error) { return []byte{7}, nil },
		Log:        zerolog.New(log)}
}

// A directory that cannot be written (here: below a file) only warns, even
// for a forced checkpoint, until MaxFailing has passed.
func TestSaverFailuresWarnUntilMaxFailing(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	var log bytes.Buffer
	s := saverIn(filepath.Join(file, "checkpoints"), time.Hour, &log)
	ctx := context.Background()
	require.NoError(t, s.AfterConverge(ctx, 0, 0, 10, Guard{}, false))
	require.NoError(t, s.AfterConverge(ctx, 0, 1, 20, Guard{}, true), "a forced checkpoint that fails warns too")
	assert.Equal(t, 2, strings.Count(log.String(), "checkpoint failed; the previous one stays valid"))

	s = saverIn(filepath.Join(file, "checkpoints"), time.Minute, &log)
	require.NoError(t, s.AfterConverge(ctx, 0, 0, 10, Guard{}, false), "the first failure starts the clock")
	s.failingAt = s.failingAt.Add(-time.Minute) // as if it had failed for a minute
	err := s.AfterConverge(ctx, 0, 1, 20, Guard{}, false)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "(run.checkpoint_max_failing 1m0s)")
}

// A checkpoint failed elsewhere (a worker's state file refused) counts on
// the same clock as a refused write of the saver's own.
func TestSaverFailedSharesTheClock(t *testing.T) {
	var log bytes.Buffer
	s := saverIn(t.TempDir(), time.Minute, &log)
	refused := errors.New("a rank's script could not write its state")
	require.NoError(t, s.Failed(10, refused), "the first failure warns")
	assert.Contains(t, log.String(), "a rank's script could not write its state")
	s.failingAt = s.failingAt.Add(-time.Minute)
	err := s.Failed(20, refused)
	require.ErrorIs(t, err, refused)
	assert.Contains(t, err.Error(), "checkpoint at step 20")
	assert.Contains(t, err.Error(), "(run.checkpoint_max_failing 1m0s)")
}

// A success after failures resets the failing clock.
func TestSaverRecoversAfterAFailure(t *testing.T) {
	tmp := t.TempDir()
	file := filepath.Join(tmp, "f")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	good := filepath.Join(tmp, "checkpoints")
	var log bytes.Buffer
	s := saverIn(good, time.Minute, &log)
	ctx := context.Background()
	require.NoError(t, s.AfterConverge(ctx, 0, 0, 10, Guard{}, false))
	s.Dir = filepath.Join(file, "checkpoints") // the disk goes bad
	require.NoError(t, s.AfterConverge(ctx, 0, 1, 20, Guard{}, false))
	assert.False(t, s.failingAt.IsZero())
	s.Dir = good // and recovers
	require.NoError(t, s.AfterConverge(ctx, 0, 2, 30, Guard{}, false))
	assert.True(t, s.failingAt.IsZero(), "the clock restarts at the next failure")
	ck, _, skipped, err := Latest(good)
	require.NoError(t, err)
	assert.Empty(t, skipped)
	assert.Equal(t, 30, ck.Step)
}

// The first converge writes whatever the cadence, so an early divergence
// has a checkpoint to roll back to; the cadence then takes over.
func TestSaverFirstConvergeWrites(t *testing.T) {
	dir := t.TempDir()
	var log bytes.Buffer
	s := saverIn(dir, 0, &log)
	s.Every, s.Keep = 10, 5
	ctx := context.Background()
	for w := range 12 {
		require.NoError(t, s.AfterConverge(ctx, 0, w, 10*(w+1), Guard{}, false))
	}
	names, err := filepath.Glob(filepath.Join(dir, "ckpt-*.hdet"))
	require.NoError(t, err)
	for i := range names {
		names[i] = filepath.Base(names[i])
	}
	assert.Equal(t, []string{"ckpt-000000000010.hdet", "ckpt-000000000100.hdet"}, names)
}

// AtStart writes the step-0 checkpoint (window 0, nothing trained) on rank
// 0 only, none when the ranks start apart, and only warns when it cannot;
// the first converge then still writes.
func TestSaverAtStart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	var log bytes.Buffer
	s := saverIn(dir, 0, &log)
	s.Every = 10
	s.AtStart(ctx, 0, Guard{})
	ck, _, _, err := Latest(dir)
	require.NoError(t, err)
	assert.Equal(t, 0, ck.Step)
	assert.Equal(t, 0, ck.Window)
	require.NoError(t, s.AfterConverge(ctx, 0, 0, 10, Guard{}, false))
	ck, _, _, err = Latest(dir)
	require.NoError(t, err)
	assert.Equal(t, 10, ck.Step, "the first converge still writes")

	for name, mod := range map[string]func(*Saver){
		"rank 1":       func(s *Saver) { s.Rank = 1 },
		"starts apart": func(s *Saver) { s.StartsApart = true },
	} {
		empty := t.TempDir()
		s := saverIn(empty, 0, &log)
		mod(s)
		s.AtStart(ctx, 0, Guard{})
		_, _, _, err := Latest(empty)
		assert.ErrorIs(t, err, ErrNone, name)
	}

	file := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	s = saverIn(filepath.Join(file, "checkpoints"), time.Minute, &log)
	s.AtStart(ctx, 0, Guard{})
	assert.Contains(t, log.String(), "the step-0 checkpoint failed")
	assert.True(t, s.failingAt.IsZero(), "a failed step-0 write does not start the failing clock")
}
