// Package metrics defines the records of a run's metrics.jsonl and reads and
// writes them.
package metrics

import (
	"math"
	"strconv"
)

// Record types, the "type" field of each metrics.jsonl line.
const (
	TypeStart  = "start"
	TypeWindow = "window"
	TypeCommit = "commit" // the search pass is over: the committed values
	TypeEnd    = "end"
)

// Float is a float64 that JSON-encodes NaN and ±Inf as null, since a diverged
// replica's loss must not make the whole line unwritable.
type Float float64

func (f Float) MarshalJSON() ([]byte, error) {
	v := float64(f)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, v, 'g', -1, 64), nil
}

func (f *Float) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*f = Float(math.NaN())
		return nil
	}
	v, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return err
	}
	*f = Float(v)
	return nil
}

// Record is one line of metrics.jsonl: a StartRecord, WindowRecord,
// CommitRecord or EndRecord. Each writes the line it always has, with its
// "type" first; Read gives back one of these four.
type Record interface {
	Type() string      // TypeStart, TypeWindow, TypeCommit or TypeEnd
	UnixTime() float64 // when it was written, in unix seconds
	record()           // no other type is a Record
}

// StartRecord opens a run, and a resumed run again: its shape and the
// hyperparameters it explores.
type StartRecord struct {
	Time            float64 `json:"time"` // unix seconds
	Ranks           int     `json:"ranks,omitempty"`
	TotalSteps      int     `json:"total_steps,omitempty"`
	WindowSteps     int     `json:"window_steps,omitempty"`
	SyncMode        string  `json:"sync_mode,omitempty"`
	Hyperparameters []Param `json:"hyperparameters,omitempty"`
	ConfigHash      string  `json:"config_hash,omitempty"`
	ResumedFrom     int     `json:"resumed_from_step,omitempty"`
	// Replica groups (train.replica_size G > 1): Ranks above counts the N
	// replicas, and every per-rank field of a window record is per replica
	// (its G ranks' mean loss and probe; unhealthy events name replicas).
	ReplicaSize int `json:"replica_size,omitempty"`
	WorldSize   int `json:"world_size,omitempty"`
}

// WindowRecord is one window: what every rank trained with and reached,
// what the explorers learned from it, and how long its phases took.
type WindowRecord struct {
	Time float64 `json:"time"` // unix seconds, after the evaluation
	// Pass is 1 for the main pass of a run that committed (docs/design.md
	// §1.2): windows and steps count from 0 again. 0 (absent) is the
	// search pass, or the one pass of a run that never commits.
	Pass            int                `json:"pass,omitempty"`
	Window          int                `json:"window"`
	Step            int                `json:"step"`                   // steps done at the end of this window
	Losses          []Float            `json:"losses,omitempty"`       // per rank, mean over the window
	Healthy         []bool             `json:"healthy,omitempty"`      // per rank
	Values          map[string][]Float `json:"values,omitempty"`       // per hyperparameter, per rank, at the window's last step (as planned: an annealing window's rates end at 0)
	Base            map[string]Float   `json:"base,omitempty"`         // per hyperparameter, base at the window's last step
	BaseSteps       map[string][]Float `json:"base_steps,omitempty"`   // per hyperparameter, the base at each step of the window (a rank's value: its slot's spread of it, clamped)
	NextBase        map[string]Float   `json:"next_base,omitempty"`    // per hyperparameter, base for the next window
	Weights         map[string][]Float `json:"weights,omitempty"`      // per hyperparameter, softmax weight per rank (auto phase)
	Probe           []Float            `json:"probe,omitempty"`        // per rank, the probe loss (docs/design.md §1.1); absent when the window did not probe
	Anneal          bool               `json:"anneal,omitempty"`       // the window annealed its learning rates (no probe, docs/design.md §1.1): losses are its last quarter's
	Estimate        map[string]Float   `json:"estimate,omitempty"`     // per hyperparameter, x*: the estimated best offset from the window's centre (hyperparameter's scale)
	Offset          map[string]Float   `json:"offset,omitempty"`       // per hyperparameter, the learned offset u after this window
	PlanSeconds     float64            `json:"plan_seconds,omitempty"` // rank 0's controller plan + the plan broadcast
	FanoutSeconds   float64            `json:"fanout_seconds,omitempty"`
	ProbeSeconds    float64            `json:"probe_seconds,omitempty"` // the part of fanout_seconds rank 0's probe took (tail average + evaluation); absent when not timed
	ConvergeSeconds float64            `json:"converge_seconds,omitempty"`
	Checksum        string             `json:"checksum,omitempty"` // of the parameters after converge
	Drift           *Float             `json:"drift,omitempty"`    // the healthy replicas' RMS distance to their average before the converge, over the average's norm (0: the converge was skipped, every replica held the same parameters)
	Eval            *Eval              `json:"eval,omitempty"`
	Events          []Event            `json:"events,omitempty"`
	// Timers inside the phases above, rank 0's: the per-step gradient
	// allreduces of the window, part of fanout_seconds (gradients mode, or
	// inside a replica group; absent when there are none), and the test
	// evaluation after the converge (absent when the window did not
	// evaluate).
	AllreduceSeconds float64 `json:"allreduce_seconds,omitempty"`
	EvalSeconds      float64 `json:"eval_seconds,omitempty"`
	// GatherSeconds is the gather (every rank's loss and health), the
	// first part of converge_seconds. HandoverSeconds (a worker run) is
	// where rank 0's hand-over went, by phase: the script's copy into the
	// buffer (copy_out), its DONE's write (send, the previous window's) and
	// trip (socket), its wait from that DONE to this window's PLAN (wait,
	// hdet's converge, observe and plan inside it), the PLAN's trip
	// (plan_socket) and its copy back (load); docs/performance.md.
	GatherSeconds   float64            `json:"gather_seconds,omitempty"`
	HandoverSeconds map[string]float64 `json:"handover_seconds,omitempty"`
}

// CommitRecord ends the search pass: each hyperparameter's committed value.
type CommitRecord struct {
	Time      float64           `json:"time"`
	Committed map[string]Commit `json:"committed,omitempty"`
	Step      int               `json:"step"` // where the search pass ended
}

// EndRecord closes a finished run.
type EndRecord struct {
	Time        float64 `json:"time"`
	Step        int     `json:"step"`               // steps of the last pass
	Checksum    string  `json:"checksum,omitempty"` // of model.bin's parameters
	Eval        *Eval   `json:"eval,omitempty"`
	WallSeconds float64 `json:"wall_seconds,omitempty"`
}

func (StartRecord) Type() string  { return TypeStart }
func (WindowRecord) Type() string { return TypeWindow }
func (CommitRecord) Type() string { return TypeCommit }
func (EndRecord) Type() string    { return TypeEnd }

func (r StartRecord) UnixTime() float64  { return r.Time }
func (r WindowRecord) UnixTime() float64 { return r.Time }
func (r CommitRecord) UnixTime() float64 { return r.Time }
func (r EndRecord) UnixTime() float64    { return r.Time }

func (StartRecord) record()  {}
func (WindowRecord) record() {}
func (CommitRecord) record() {}
func (EndRecord) record()    {}

// Commit is one hyperparameter's committed value: the offset u in its
// scale and what a config would say to train at it (OneCycle's max_lr).
type Commit struct {
	Offset Float `json:"offset"`
	Value  Float `json:"value"`
	Frozen bool  `json:"frozen,omitempty"` // its explorer had failed: its frozen base
	// A worker script's learning rate is a multiplier (Value) of the
	// script's own rate: ScriptPeakLR is the highest rate the script set in
	// the search pass, PeakLR = Value x ScriptPeakLR the rate the commit
	// implies there, the number to write into the script.
	ScriptPeakLR Float `json:"script_peak_lr,omitempty"`
	PeakLR       Float `json:"peak_lr,omitempty"`
}

// Param describes an explored hyperparameter in the start record.
type Param struct {
	Name   string  `json:"name"`
	Scale  string  `json:"scale"`
	Spread string  `json:"spread"`
	Alpha  float64 `json:"alpha"`
	Lower  float64 `json:"lower"`
	Upper  float64 `json:"upper"`
}

// Eval is a test-set evaluation.
type Eval struct {
	Loss     Float `json:"loss"`
	Accuracy Float `json:"accuracy"`
}

// Event kinds.
const (
	EventUnhealthy  = "unhealthy" // a rank left out of the average
	EventFrozen     = "frozen"    // an explorer failed twice; its hyperparameter is frozen
	EventRestarted  = "restarted" // an explorer was restarted
	EventClamped    = "clamped"   // a base value hit its bounds
	EventRollback   = "rollback"
	EventCheckpoint = "checkpoint"
	EventSameData   = "same_data" // local mode: every replica trained on the same batches
)

// Event is something the run logged and recorded.
type Event struct {
	Kind    string `json:"kind"`
	Rank    *int   `json:"rank,omitempty"`
	Param   string `json:"param,omitempty"`
	Message string `json:"message"`
}
