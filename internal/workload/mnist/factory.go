package mnist

import (
	"context"
	"errors"
	"fmt"

	"github.com/hdet-dev/hdet/internal/engine"
	"github.com/hdet-dev/hdet/internal/memcheck"
	"github.com/hdet-dev/hdet/internal/workload"
)

var (
	_ workload.Factory   = Factory
	_ workload.Restarter = (*Replica)(nil)
)

// Factory is the built-in workload (workload.kind mnist): this rank's
// replica of the config's MLP on the data of workload.data, and the run's
// length (train.steps, or train.epochs of this rank's shard).
func Factory(_ context.Context, env workload.Env) (engine.Replica, int, error) {
	cfg := env.Config
	ds, err := Load(cfg.Workload.Data)
	if err != nil {
		return nil, 0, &workload.UsageError{Err: fmt.Errorf("workload.data: %w", err)}
	}
	wl := cfg.Workload
	if err := memcheck.Fit(memcheck.MLPBytes(ds.Train.Dim, wl.Hidden, ds.Train.Classes, wl.BatchSize), env.World.LocalSize()); err != nil {
		return nil, 0, &workload.UsageError{Err: fmt.Errorf("workload.hidden %v: %v", wl.Hidden, err)}
	}
	r, err := New(Config{Workload: wl, ProbeExamples: cfg.Train.ProbeExamples, Seed: cfg.Train.Seed,
		Rank: env.World.Rank(), WorldSize: env.World.Size(), Data: ds})
	if err != nil {
		err = fmt.Errorf("workload: %w", err)
		if errors.Is(err, ErrInvalidConfig) {
			return nil, 0, &workload.UsageError{Err: err}
		}
		return nil, 0, err // the machine, not the config: OpenBLAS missing
	}
	steps := cfg.Train.Steps
	if steps == 0 {
		steps = cfg.Train.Epochs * r.StepsPerEpoch()
		if cfg.Train.Window > steps {
			return nil, 0, &workload.UsageError{Err: fmt.Errorf("train.window: got %d, want at most the run's %d steps (%d epochs)", cfg.Train.Window, steps, cfg.Train.Epochs)}
		}
	}
	return r, steps, nil
}

// RestartMainPass is Reset: the parameters drawn from the seed again, to
// which a warm start applies again.
func (r *Replica) RestartMainPass(context.Context) (bool, error) {
	r.Reset()
	return true, nil
}
