package checkpoint

import (
	"context"
	"fmt"
	"time"

	"github.com/rs/zerolog"
)

// Saver writes checkpoints on a cadence after converges; it implements
// engine.Checkpointer. Only rank 0 writes: after a converge every rank holds
// the same buffer.
type Saver struct {
	Dir        string
	Every      int           // windows between checkpoints; 0: no window cadence
	Interval   time.Duration // time between checkpoints; 0: no time cadence
	Keep       int
	MaxFailing time.Duration // stop the run when no checkpoint could be written for this long; 0: never
	Rank       int
	Ranks      int
	Config     []byte
	ParamCount int
	Buffer     func() []float32                          // parameters then optimizer state
	Controller func(ctx context.Context) ([]byte, error) // rank 0's controller state
	// BeforeWrite, when set, runs before each checkpoint: the metrics
	// writer's Sync, so the windows a checkpoint covers are on disk.
	BeforeWrite func() error
	// StartsApart: the ranks do not start from rank 0's buffer (a warm
	// noisy start), so there is no step-0 checkpoint (AtStart).
	StartsApart bool
	Log         zerolog.Logger

	last      time.Time // last successful write (or the start)
	failingAt time.Time // first failure since the last success
}

// AtStart writes a pass's step-0 checkpoint (a fresh run's, or the main
// pass's after the commit), the state every rank starts from, so that a
// learning rate that diverges in the first window rolls back to the start
// (halved) instead of stopping the run. A failed write only warns; the
// first converge's checkpoint stays due.
func (s *Saver) AtStart(ctx context.Context, pass int, g Guard) {
	if s.Rank != 0 || s.StartsApart {
		return
	}
	path, err := s.write(ctx, pass, -1, 0, g)
	if err != nil {
		s.Log.Warn().Err(err).Msg("the step-0 checkpoint failed: a run that diverges in its first window will stop")
		return
	}
	s.Log.Info().Int("step", 0).Str("path", path).Msg("checkpoint written")
}

// AfterConverge writes a checkpoint when one is due (or force is set). A
// failed write (full or read-only disk) leaves the previous checkpoint as it
// was and only warns, even when forced (at the end, or on a signal: the run
// is then resumable from the previous one); the next cadence retries. It
// returns an error only once writes have failed for MaxFailing. The
// session's first converge is always due: a run that diverges before its
// first cadence (a learning rate too high in the warm-up) then has a
// checkpoint to roll back to instead of stopping.
func (s *Saver) AfterConverge(ctx context.Context, pass, window, step int, g Guard, force bool) error {
	if s.Rank != 0 || !s.Due(window, force) {
		return nil
	}
	_, err := s.Save(ctx, pass, window, step, g)
	return err
}

// Due (rank 0) reports whether a checkpoint is due after window: forced,
// the session's first converge, or the window or time cadence.
func (s *Saver) Due(window int, force bool) bool {
	first := s.last.IsZero()
	if first {
		s.last = time.Now()
	}
	return force || first || (s.Every > 0 && (window+1)%s.Every == 0) || (s.Interval > 0 && time.Since(s.last) >= s.Interval)
}

// Save (rank 0) writes the checkpoint Due asked for and reports whether it
// is written; a failure is handled as AfterConverge says.
func (s *Saver) Save(ctx context.Context, pass, window, step int, g Guard) (bool, error) {
	path, err := s.write(ctx, pass, window, step, g)
	if err == nil {
		s.last, s.failingAt = time.Now(), time.Time{}
		s.Log.Info().Int("step", step).Str("path", path).Msg("checkpoint written")
		return true, nil
	}
	return false, s.Failed(step, err)
}

// Failed (rank 0) counts the checkpoint Due asked for at step as not
// written, for err (a write of hdet's own, or a state file a replica could
// not write beside it), as AfterConverge says: a warning, or an error once
// checkpoints have failed for MaxFailing.
func (s *Saver) Failed(step int, err error) error {
	if s.failingAt.IsZero() {
		s.failingAt = time.Now()
	}
	if s.MaxFailing > 0 && time.Since(s.failingAt) >= s.MaxFailing {
		return fmt.Errorf("checkpoint at step %d: %w; no checkpoint could be written for %s (run.checkpoint_max_failing %s); none written since %s, the previous checkpoint stays valid",
			step, err, time.Since(s.failingAt).Round(time.Millisecond), s.MaxFailing, s.last.Format(time.RFC3339))
	}
	s.Log.Warn().Err(err).Int("step", step).Msg("checkpoint failed; the previous one stays valid; retrying at the next cadence")
	return nil
}

func (s *Saver) write(ctx context.Context, pass, window, step int, g Guard) (string, error) {
	if s.BeforeWrite != nil {
		if err := s.BeforeWrite(); err != nil {
			return "", err
		}
	}
	ctrl, err := s.Controller(ctx)
	if err != nil {
		return "", fmt.Errorf("controller state: %w", err)
	}
	return Write(s.Dir, &State{Config: s.Config, Pass: pass, Guard: g, Step: step, Window: window + 1, Ranks: s.Ranks,
		ParamCount: s.ParamCount, Buffer: s.Buffer(), Controller: ctrl}, s.Keep)
}
