package checkpoint

import (
	"bytes"
	"context"
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
	require.NoError(t, s.AfterConverge(ctx, 0, 10, false))
	require.NoError(t, s.AfterConverge(ctx, 1, 20, true), "a forced checkpoint that fails warns too")
	assert.Equal(t, 2, strings.Count(log.String(), "checkpoint failed; the previous one stays valid"))

	s = saverIn(filepath.Join(file, "checkpoints"), time.Minute, &log)
	require.NoError(t, s.AfterConverge(ctx, 0, 10, false), "the first failure starts the clock")
	s.failingAt = s.failingAt.Add(-time.Minute) // as if it had failed for a minute
	err := s.AfterConverge(ctx, 1, 20, false)
	require.Error(t, err)
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
	require.NoError(t, s.AfterConverge(ctx, 0, 10, false))
	s.Dir = filepath.Join(file, "checkpoints") // the disk goes bad
	require.NoError(t, s.AfterConverge(ctx, 1, 20, false))
	assert.False(t, s.failingAt.IsZero())
	s.Dir = good // and recovers
	require.NoError(t, s.AfterConverge(ctx, 2, 30, false))
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
		require.NoError(t, s.AfterConverge(ctx, w, 10*(w+1), false))
	}
	names, err := filepath.Glob(filepath.Join(dir, "ckpt-*.hdet"))
	require.NoError(t, err)
	for i := range names {
		names[i] = filepath.Base(names[i])
	}
	assert.Equal(t, []string{"ckpt-000000000010.hdet", "ckpt-000000000100.hdet"}, names)
}
