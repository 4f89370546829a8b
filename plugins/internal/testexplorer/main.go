// Command testexplorer is an explorer for the plugins tests only (never
// installed in bin/plugins): it counts the windows it observed (or plans
// what its config says, from a window on: bad values too), echoes the
// probe signal back (Plan.Probe = Setup.Probe; Feedback.Weights = the probe
// losses it got), and its config makes it crash, fail or hang at a chosen
// window.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strconv"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/plugins/sdk"
)

// config is the explorer's JSON config block.
type config struct {
	FailAt   *int   `json:"fail_at_window"` // nil: never
	FailIn   string `json:"fail_in"`        // "plan" (default) or "observe"
	Mode     string `json:"mode"`           // "exit" (default), "error", "refuse" (hparam.ErrInvalid) or "hang"
	OnceFile string `json:"once_file"`      // when set, fail only the first Times calls (counted in this file), then succeed
	Times    int    `json:"times"`          // with OnceFile: how many times to fail (0 means 1)
	// ChildPIDFile: when set, Init starts a child process (sleep) that the
	// explorer never ends, and writes its pid here; hdet must end it.
	ChildPIDFile string `json:"child_pid_file"`
	// Plan, when set, is what the explorer plans every window instead of
	// the count of observed windows; Bad, from its window on, replaces it.
	Plan *planned `json:"plan"`
	Bad  *planned `json:"bad"`
}

// planned is a constant base within bounds, from window From.
type planned struct {
	From   int        `json:"from"`
	Base   float64    `json:"base"`
	Bounds [2]float64 `json:"bounds"`
}

// state counts observed windows; Feedback.Base reports it so a test can see
// a restart restored it.
type state struct {
	Observed  int     `json:"observed"`
	LossSum   float64 `json:"loss_sum"`  // over finite losses
	Unhealthy int     `json:"unhealthy"` // NaN or Inf losses seen
}

type explorer struct {
	cfg   config
	st    state
	probe bool // Setup.Probe
}

func (x *explorer) Describe(context.Context) (hparam.Descriptor, error) {
	return hparam.Descriptor{
		Name: "test", Version: "0.1.0", Hyperparameter: "test",
		Scale:  hparam.Linear,
		Bounds: hparam.Bounds{Lower: 0, Upper: 100},
		Spread: hparam.Spread{Kind: hparam.Additive, Alpha: 1},
	}, nil
}

func (x *explorer) Init(_ context.Context, s hparam.Setup) error {
	x.cfg, x.st, x.probe = config{}, state{}, s.Probe
	if len(s.Config) > 0 {
		if err := json.Unmarshal(s.Config, &x.cfg); err != nil {
			return fmt.Errorf("config: %w", err)
		}
	}
	if x.cfg.ChildPIDFile != "" {
		child := exec.Command("sleep", "300")
		if err := child.Start(); err != nil {
			return err
		}
		return os.WriteFile(x.cfg.ChildPIDFile, []byte(strconv.Itoa(child.Process.Pid)), 0o644)
	}
	return nil
}

func (x *explorer) maybeFail(ctx context.Context, op string, window int) error {
	in := x.cfg.FailIn
	if in == "" {
		in = "plan"
	}
	if x.cfg.FailAt == nil || window != *x.cfg.FailAt || in != op {
		return nil
	}
	if x.cfg.OnceFile != "" {
		done, _ := os.ReadFile(x.cfg.OnceFile) // a byte per failure so far
		if len(done) >= max(1, x.cfg.Times) {
			return nil
		}
		if err := os.WriteFile(x.cfg.OnceFile, append(done, 'x'), 0o644); err != nil {
			return err
		}
	}
	switch x.cfg.Mode {
	case "error":
		return errors.New("test explorer: failing as configured")
	case "refuse":
		return fmt.Errorf("%w: test explorer: refusing as configured", hparam.ErrInvalid)
	case "hang":
		<-ctx.Done() // gRPC cancels the context when the host's deadline passes
		select {}
	default:
		os.Exit(7)
	}
	return nil
}

func (x *explorer) Plan(ctx context.Context, r hparam.WindowRequest) (hparam.WindowPlan, error) {
	if err := x.maybeFail(ctx, "plan", r.Window); err != nil {
		return hparam.WindowPlan{}, err
	}
	base := make([]float64, r.Steps)
	for i := range base {
		base[i] = float64(x.st.Observed)
	}
	d, _ := x.Describe(ctx)
	wp := hparam.WindowPlan{Base: base, Spread: d.Spread, Bounds: d.Bounds, Probe: x.probe}
	for _, p := range []*planned{x.cfg.Plan, x.cfg.Bad} {
		if p != nil && r.Window >= p.From {
			for i := range wp.Base {
				wp.Base[i] = p.Base
			}
			wp.Bounds = hparam.Bounds{Lower: p.Bounds[0], Upper: p.Bounds[1]}
		}
	}
	return wp, nil
}

func (x *explorer) Observe(ctx context.Context, o hparam.Observation) (hparam.Feedback, error) {
	if err := x.maybeFail(ctx, "observe", o.Window); err != nil {
		return hparam.Feedback{}, err
	}
	x.st.Observed++
	for _, l := range o.Losses {
		if math.IsNaN(l) || math.IsInf(l, 0) {
			x.st.Unhealthy++
			continue
		}
		x.st.LossSum += l
	}
	// Estimate and Offset carry what arrived, so a test sees both fields cross.
	fb := hparam.Feedback{Base: float64(x.st.Observed), Weights: o.Probe, Offset: float64(len(o.Probe))}
	for _, p := range o.Probe {
		if math.IsNaN(p) {
			fb.Estimate++
		}
	}
	return fb, nil
}

// Commit keeps what it plans: it asks for no search pass of its own.
func (x *explorer) Commit(context.Context) (hparam.Commitment, error) {
	return hparam.Commitment{Value: float64(x.st.Observed)}, nil
}

func (x *explorer) SaveState(context.Context) ([]byte, error) { return json.Marshal(x.st) }

func (x *explorer) LoadState(_ context.Context, b []byte) error { return json.Unmarshal(b, &x.st) }

func main() { sdk.Serve(&explorer{}) }
