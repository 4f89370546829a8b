package bridge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/hparam/builtin"
	"github.com/hdet-dev/hdet/internal/config"
)

// What the script's hdet.attach arguments (hdet.OneCycleLR's hdet_*) and
// explore settings become in the run's configuration. The client checks
// them when the script calls attach; they
// are checked again here because the HELLO is a protocol boundary: a
// setting hdet does not read must be an error, never ignored.

// MaxDefaultWindow is a worker run's longest window when neither the
// script's window nor train.window sets it.
const MaxDefaultWindow = 50

// searchWindows is how many windows hdet's choice of window gives the
// search pass (auto.until's default for a schedule hdet does not know,
// builtin.MaxSearchShare of the run), so that a short run's search has
// as many updates as a long one's: 300 steps get windows of 9 steps.
const searchWindows = 8

// DefaultWindow is hdet's choice of window for a run of steps steps.
func DefaultWindow(steps int) int {
	return max(1, min(MaxDefaultWindow, int(builtin.MaxSearchShare*float64(steps))/searchWindows))
}

// RunWindow is the run's window T: the script's window, else the
// configured train.window (0: not set), else DefaultWindow. When both are
// set they must agree, as train.steps and total_steps must.
func RunWindow(configured, steps int, h Hello) (int, error) {
	switch {
	case h.Window == 0 && configured > 0:
		return configured, nil
	case h.Window == 0:
		return DefaultWindow(steps), nil
	case h.Window < 0 || h.Window > config.MaxWindow || h.Window > steps:
		return 0, fmt.Errorf("%w: the script's window is %d, want an integer in [1, %d] (at most the run's %d steps)",
			ErrSetting, h.Window, min(config.MaxWindow, steps), steps)
	case configured > 0 && configured != h.Window:
		return 0, fmt.Errorf("%w: train.window is %d, but the script's hdet.attach has window %d; remove train.window (hdet follows the script) or make them equal",
			ErrConflict, configured, h.Window)
	}
	return h.Window, nil
}

// options are the script's alpha, spread and auto (hdet_alpha, hdet_spread
// and hdet_auto of hdet.OneCycleLR).
type options struct {
	alpha, spread any
	auto          map[string]any
}

// optionArgs names each HELLO option by the argument that sets it.
var optionArgs = map[string]string{"alpha": "alpha", "spread": "spread", "auto": "auto"}

func parseOptions(h Hello) (options, error) {
	var o options
	for _, k := range slices.Sorted(maps.Keys(h.Options)) {
		if _, ok := optionArgs[k]; !ok {
			return o, fmt.Errorf("%w: the script sent the option %q; this hdet reads alpha, spread and auto (install the hdet Python package of the same release)", ErrSetting, k)
		}
	}
	o.alpha, o.spread = h.Options["alpha"], h.Options["spread"]
	if err := errors.Join(checkAlpha("alpha", o.alpha), checkSpread("spread", o.spread)); err != nil {
		return o, err
	}
	if a, ok := h.Options["auto"]; ok {
		m, ok := a.(map[string]any)
		if !ok {
			return o, fmt.Errorf("%w: auto must be a dict of the lr explorer's auto settings, got %s", ErrSetting, jsonText(a))
		}
		if err := checkAuto(m); err != nil {
			return o, err
		}
		o.auto = m
	}
	return o, nil
}

// exploreKeys are the settings an explore entry may give besides "name".
var exploreKeys = []string{"plugin", "alpha", "spread", "base", "lower", "upper"}

// settingsBlock is explore entry i's part of its explorer's config block:
// spread (the entry's alpha and spread, else the script's alpha and
// spread), bounds, a constant schedule from base, and auto for lr.
func settingsBlock(i int, e map[string]any, o options) (map[string]any, error) {
	name, _ := e["name"].(string)
	arg := fmt.Sprintf("explore[%d] (%q)", i, name)
	for _, k := range slices.Sorted(maps.Keys(e)) {
		if k != "name" && !slices.Contains(exploreKeys, k) {
			return nil, fmt.Errorf("%w: %s has the unknown key %q; allowed: name, %s", ErrSetting, arg, k, strings.Join(exploreKeys, ", "))
		}
	}
	if p, ok := e["plugin"]; ok {
		if s, isStr := p.(string); !isStr || s == "" {
			return nil, fmt.Errorf("%w: %s[\"plugin\"] must be an explorer binary name, got %s", ErrSetting, arg, jsonText(p))
		}
	}
	err := errors.Join(checkAlpha(arg+`["alpha"]`, e["alpha"]), checkSpread(arg+`["spread"]`, e["spread"]),
		checkNumber(arg+`["base"]`, e["base"]), checkNumber(arg+`["lower"]`, e["lower"]), checkNumber(arg+`["upper"]`, e["upper"]))
	if err != nil {
		return nil, err
	}
	b := map[string]any{}
	if sp := spreadBlock(or(e["alpha"], o.alpha), or(e["spread"], o.spread)); sp != nil {
		b["spread"] = sp
	}
	if bounds := setKeys(map[string]any{"lower": e["lower"], "upper": e["upper"]}); len(bounds) > 0 {
		b["bounds"] = bounds
	}
	if base, ok := e["base"]; ok {
		if hparam.IsLR(name) {
			return nil, fmt.Errorf("%w: %s[\"base\"]: a learning rate's base is the script's own rate (hdet explores a multiplier of it); remove base", ErrSetting, arg)
		}
		b["schedule"] = base
	}
	if hparam.IsLR(name) && o.auto != nil {
		b["auto"] = o.auto
	}
	return b, nil
}

func spreadBlock(alpha, kind any) map[string]any {
	if s := setKeys(map[string]any{"alpha": alpha, "kind": kind}); len(s) > 0 {
		return s
	}
	return nil
}

func or(a, b any) any {
	if a != nil {
		return a
	}
	return b
}

// setKeys drops the keys whose value is nil.
func setKeys(m map[string]any) map[string]any {
	for k, v := range m {
		if v == nil {
			delete(m, k)
		}
	}
	return m
}

func checkNumber(arg string, v any) error {
	if v == nil {
		return nil
	}
	if f, ok := v.(float64); !ok || math.IsNaN(f) || math.IsInf(f, 0) {
		return fmt.Errorf("%w: %s must be a finite number, got %s", ErrSetting, arg, jsonText(v))
	}
	return nil
}

func checkAlpha(arg string, v any) error {
	if f, ok := v.(float64); v != nil && (!ok || !(f >= 0) || math.IsInf(f, 0)) {
		return fmt.Errorf("%w: %s must be a finite number >= 0, got %s", ErrSetting, arg, jsonText(v))
	}
	return nil
}

var spreadKinds = []hparam.SpreadKind{hparam.Multiplicative, hparam.Additive, hparam.Geometric}

func checkSpread(arg string, v any) error {
	if s, ok := v.(string); v != nil && (!ok || !slices.Contains(spreadKinds, hparam.SpreadKind(s))) {
		return fmt.Errorf("%w: %s must be one of %s, %s or %s, got %s", ErrSetting, arg, spreadKinds[0], spreadKinds[1], spreadKinds[2], jsonText(v))
	}
	return nil
}

// autoKeys are the built-in explorers' auto keys (builtin.AutoSpec), less
// the removed decay.
func autoKeys() []string {
	t := reflect.TypeFor[builtin.AutoSpec]()
	var keys []string
	for i := range t.NumField() {
		if k, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); k != "" && k != "decay" {
			keys = append(keys, k)
		}
	}
	return keys
}

// checkAuto refuses unknown keys and values of the wrong JSON type; the
// explorer checks the ranges when it starts.
func checkAuto(m map[string]any) error {
	keys := autoKeys()
	for _, k := range slices.Sorted(maps.Keys(m)) {
		switch {
		case k == "decay":
			return fmt.Errorf("%w: auto[\"decay\"] is no longer a setting: the script's own schedule replaced it; delete the key", ErrSetting)
		case !slices.Contains(keys, k):
			return fmt.Errorf("%w: auto has the unknown key %q; allowed: %s", ErrSetting, k, strings.Join(keys, ", "))
		}
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("%w: auto: %v", ErrSetting, err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var spec builtin.AutoSpec
	var te *json.UnmarshalTypeError
	if err := dec.Decode(&spec); errors.As(err, &te) {
		return fmt.Errorf("%w: auto[%q] must be a JSON %s, got %s", ErrSetting, te.Field, jsonType(te.Type), jsonText(m[te.Field]))
	} else if err != nil {
		return fmt.Errorf("%w: auto: %v", ErrSetting, err)
	}
	return nil
}

func jsonType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int64:
		return "integer"
	case reflect.Float64:
		return "number"
	case reflect.String:
		return "string"
	}
	return t.String()
}

func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// SettingsHint is what to add to an explorer's configuration error when
// the script gave settings: they are part of that configuration.
func SettingsHint(h Hello) string {
	set := len(h.Options) > 0
	for _, e := range h.Explore {
		set = set || len(e) > 1
	}
	if !set {
		return ""
	}
	return " (the script's hdet.attach arguments are part of it: alpha and spread set spread.alpha and spread.kind, auto the lr explorer's auto block, an explore entry's alpha, spread, lower, upper and base its spread, bounds and schedule)"
}
