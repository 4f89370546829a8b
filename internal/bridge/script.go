package bridge

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/internal/config"
)

// What the worker's script says about the run, turned into hdet's run
// shape: its length, the sync mode, the explorers. The script is the source
// of truth; a configuration may add to it, or override it where it says
// `override: true`; any other disagreement is an ErrConflict.

// RunSteps is the run's length: the total_steps the script gave
// hdet.attach. A configured train.steps (0: not set) must agree.
func RunSteps(configured int, h Hello) (int, error) {
	if h.TotalSteps <= 0 {
		return 0, fmt.Errorf("%w: the script's hdet.attach gave total_steps %d; it must be the positive number of optimizer steps the script takes", ErrSetting, h.TotalSteps)
	}
	if configured > 0 && configured != h.TotalSteps {
		return 0, fmt.Errorf("%w: train.steps is %d, but the script's hdet.attach has total_steps %d; remove train.steps (hdet follows the script) or make them equal",
			ErrConflict, configured, h.TotalSteps)
	}
	return h.TotalSteps, nil
}

// Broadcaster is the part of an MPI communicator Agree needs.
type Broadcaster interface {
	Rank() int
	BcastMessage(msg []byte, root int) ([]byte, error)
}

// agreement is what every rank's script must have built the same way.
type agreement struct {
	TotalSteps int              `json:"total_steps"`
	Optimizer  string           `json:"optimizer"`
	SyncMode   string           `json:"sync_mode"`
	ParamCount int              `json:"param_count"`
	Explore    []map[string]any `json:"explore"`
	Probe      bool             `json:"probe"`
	Window     int              `json:"window"`
	Options    map[string]any   `json:"options"`
	Sharded    bool             `json:"sharded"`
}

// Agree checks that this rank's script constructed the same schedule (and
// model size, sync mode, explored names, hdet settings) as rank 0's. Every
// rank must call it; the ranks that differ return an ErrConflict saying how.
func Agree(c Broadcaster, w *Worker) error {
	mine, err := json.Marshal(agreementOf(w))
	if err != nil {
		return err
	}
	root, err := c.BcastMessage(mine, 0)
	if err != nil || string(root) == string(mine) {
		return err
	}
	var r agreement
	if err := json.Unmarshal(root, &r); err != nil {
		return err
	}
	return fmt.Errorf("%w: rank %d's script differs from rank 0's: %s; every rank must build the same model and call hdet.attach with the same arguments",
		ErrConflict, c.Rank(), describeDiff(r, agreementOf(w)))
}

func agreementOf(w *Worker) agreement {
	h := w.Hello()
	n := h.ParamCount
	if h.Sharded {
		n = 0 // shards differ by position; the session compares each position's across replicas
	}
	return agreement{h.TotalSteps, h.Optimizer, w.mode, n, h.Explore, h.Probe, h.Window, h.Options, h.Sharded}
}

func describeDiff(root, mine agreement) string {
	var diffs []string
	add := func(what string, a, b any) {
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		if string(ja) != string(jb) {
			diffs = append(diffs, fmt.Sprintf("%s %s (rank 0: %s)", what, ja, jb))
		}
	}
	add("total_steps", mine.TotalSteps, root.TotalSteps)
	add("optimizer", mine.Optimizer, root.Optimizer)
	add("sync mode", mine.SyncMode, root.SyncMode)
	add("parameters", mine.ParamCount, root.ParamCount)
	add("explore", mine.Explore, root.Explore)
	add("probe", mine.Probe, root.Probe)
	add("window", mine.Window, root.Window)
	add("alpha, spread, auto", mine.Options, root.Options)
	add("sharded parameters (FSDP2)", mine.Sharded, root.Sharded)
	return strings.Join(diffs, "; ")
}

// builtinPlugin names the built-in explorer for what a script may explore
// without a configuration (hparam.Builtins; "lr/KEY" and "weight_decay/KEY"
// are one param group's); "" when there is none.
func builtinPlugin(name string) string {
	if b, ok := hparam.BuiltinOf(name); ok && b.Explorer != "" {
		return "hdet-explorer-" + b.Explorer
	}
	return ""
}

// Explorers merges the explorers the script implies (a multiplier of its
// own learning rate; anything else it asks to explore, with its settings) with the
// configured ones. A configured explorer of the same name adds its settings
// (spread, bounds, auto); where it sets a schedule value the script also
// sets, they must be equal, unless the entry says `override: true`, which
// is reported in notes. notes also warns when nothing is explored.
func Explorers(configured []config.Explorer, h Hello) (out []config.Explorer, notes []string, err error) {
	script, err := scriptExplorers(h)
	if err != nil {
		return nil, nil, err
	}
	used := map[string]bool{}
	for _, s := range script {
		i := slices.IndexFunc(configured, func(e config.Explorer) bool { return e.Name == s.Name })
		if i < 0 {
			out = append(out, s)
			continue
		}
		used[s.Name] = true
		merged, note, err := merge(i, configured[i], s)
		if err != nil {
			return nil, nil, err
		}
		if note != "" {
			notes = append(notes, note)
		}
		out = append(out, merged)
	}
	for _, e := range configured {
		if !used[e.Name] {
			out = append(out, e)
		}
	}
	if len(out) == 0 {
		notes = append(notes, "no explorers: every replica trains with the same values (plain data-parallel training)")
	}
	return out, notes, nil
}

func scriptExplorers(h Hello) ([]config.Explorer, error) {
	o, err := parseOptions(h)
	if err != nil {
		return nil, err
	}
	var out []config.Explorer
	for i, e := range h.Explore {
		name, _ := e["name"].(string)
		block, err := settingsBlock(i, e, o)
		if err != nil {
			return nil, err
		}
		if hparam.IsLR(name) {
			multiplierBlock(block)
		}
		plugin := builtinPlugin(name)
		if p, ok := e["plugin"].(string); ok {
			plugin = p
		}
		if plugin == "" {
			return nil, fmt.Errorf("%w: the script explores %q, which has no built-in explorer; give it a \"plugin\" or an explorers entry in the configuration", ErrConflict, name)
		}
		out = append(out, config.Explorer{Name: name, Plugin: plugin, Timeout: config.Duration(config.DefaultExplorerTimeout), Config: block})
	}
	if o.auto != nil && !slices.ContainsFunc(out, func(e config.Explorer) bool { return e.Name == "lr" }) {
		return nil, fmt.Errorf("%w: auto sets the lr explorer's auto block, but the script does not explore lr; add \"lr\" to explore or remove auto", ErrSetting)
	}
	return out, nil
}

// The lr explorer of a script explores a multiplier of the script's own
// rate, whatever its schedule: the base is 1, and the bounds are those of a
// multiplier unless the script's explore entry gives its own.
const (
	multiplierLower = 1e-4
	multiplierUpper = 1e4
)

func multiplierBlock(b map[string]any) {
	b["schedule"] = 1.0
	bounds, _ := b["bounds"].(map[string]any)
	if bounds == nil {
		bounds = map[string]any{}
	}
	if _, ok := bounds["lower"]; !ok {
		bounds["lower"] = multiplierLower
	}
	if _, ok := bounds["upper"]; !ok {
		bounds["upper"] = multiplierUpper
	}
	b["bounds"] = bounds
}

// merge lays configured entry i over the script's explorer s, block by
// block and key by key: the config adds what the script leaves out; a value
// both set differently is an ErrConflict, unless the entry says `override:
// true`, which makes the config's win and is reported in the note.
func merge(i int, c, s config.Explorer) (config.Explorer, string, error) {
	out := c
	out.Config = maps.Clone(s.Config)
	if out.Config == nil {
		out.Config = map[string]any{}
	}
	var sched, other []string
	for _, k := range slices.Sorted(maps.Keys(c.Config)) {
		v, diffs := mergeBlock(k, c.Config[k], s.Config[k])
		out.Config[k] = v
		if k == "schedule" {
			sched = append(sched, diffs...)
		} else {
			other = append(other, diffs...)
		}
	}
	all := strings.Join(append(slices.Clone(sched), other...), "; ")
	switch {
	case all == "":
		return out, "", nil
	case c.Override:
		return out, fmt.Sprintf("explorers[%d] (%s) overrides the script's hdet.attach settings (override: true): %s", i, c.Name, all), nil
	}
	var what []string
	if len(sched) > 0 {
		what = append(what, fmt.Sprintf("schedule disagrees with the script's (%s)", strings.Join(sched, "; ")))
	}
	if len(other) > 0 {
		what = append(what, fmt.Sprintf("settings disagree with the script's hdet.attach arguments (%s)", strings.Join(other, "; ")))
	}
	return config.Explorer{}, "", fmt.Errorf("%w: explorers[%d] (%s) %s; remove it from the config (hdet follows the script), or add `override: true` to the entry to use the config's",
		ErrConflict, i, c.Name, strings.Join(what, ", and its "))
}

// mergeBlock lays the config's block cv over the script's sv and lists
// the keys they set differently (a schedule's keys unprefixed).
func mergeBlock(name string, cv, sv any) (any, []string) {
	if sv == nil {
		return cv, nil
	}
	_, cIsMap := cv.(map[string]any)
	_, sIsMap := sv.(map[string]any)
	cm, cok := blockMap(name, cv)
	sm, sok := blockMap(name, sv)
	if !cIsMap && !sIsMap || !cok || !sok { // scalars, or a map and a non-number
		if same(cv, sv) {
			return cv, nil
		}
		return cv, []string{fmt.Sprintf("%s: %v in the config, %v in the script", name, cv, sv)}
	}
	m := maps.Clone(sm)
	var diffs []string
	for _, k := range slices.Sorted(maps.Keys(cm)) {
		if v, ok := sm[k]; ok && !same(cm[k], v) {
			label := name + "." + k
			if name == "schedule" {
				label = k
			}
			diffs = append(diffs, fmt.Sprintf("%s: %v in the config, %v in the script", label, cm[k], v))
		}
		m[k] = cm[k]
	}
	return m, diffs
}

// blockMap is a block as a map; a bare-number schedule is the constant
// schedule {value: n}, so that it compares with a written-out one.
func blockMap(name string, v any) (map[string]any, bool) {
	if m, ok := v.(map[string]any); ok {
		return m, true
	}
	if _, ok := number(v); ok && name == "schedule" {
		return map[string]any{"value": v}, true
	}
	return nil, false
}

// same compares a YAML-decoded config value with the script's.
func same(a, b any) bool {
	fa, aok := number(a)
	fb, bok := number(b)
	if aok && bok {
		return fa == fb || math.Abs(fa-fb) <= 1e-12*math.Max(math.Abs(fa), math.Abs(fb))
	}
	return fmt.Sprint(a) == fmt.Sprint(b)
}

func number(v any) (float64, bool) {
	switch x := v.(type) {
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	case uint64:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}
