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
	"github.com/hdet-dev/hdet/internal/config"
)

// What the script's hdet_* arguments and explore settings become in the
// run's configuration. hdet.OneCycleLR checks them at construction; they
// are checked again here because the HELLO is a protocol boundary: a
// setting hdet does not read must be an error, never ignored.

// DefaultWindow is a worker run's window when neither the script's
// hdet_window nor train.window sets it.
const DefaultWindow = 50

// RunWindow is the run's window T: the script's hdet_window, else the
// configured train.window (0: not set), else DefaultWindow. When both are
// set they must agree, as train.steps and total_steps must.
func RunWindow(configured, steps int, h Hello) (int, error) {
	switch {
	case h.Window == 0 && configured > 0:
		return configured, nil
	case h.Window == 0:
		return DefaultWindow, nil
	case h.Window < 0 || h.Window > config.MaxWindow || h.Window > steps:
		return 0, fmt.Errorf("%w: hdet_window is %d, want an integer in [1, %d] (at most the run's %d steps)",
			ErrSetting, h.Window, min(config.MaxWindow, steps), steps)
	case configured > 0 && configured != h.Window:
		return 0, fmt.Errorf("%w: train.window is %d, but the script's hdet.OneCycleLR has hdet_window %d; remove train.window (hdet follows the script) or make them equal",
			ErrConflict, configured, h.Window)
	}
	return h.Window, nil
}

// options are the script's hdet_alpha, hdet_spread and hdet_auto.
type options struct {
	alpha, spread any
	auto          map[string]any
}

// optionArgs names each HELLO option by the argument that sets it.
var optionArgs = map[string]string{"alpha": "hdet_alpha", "spread": "hdet_spread", "auto": "hdet_auto"}

func parseOptions(h Hello) (options, error) {
	var o options
	for _, k := range slices.Sorted(maps.Keys(h.Options)) {
		if _, ok := optionArgs[k]; !ok {
			return o, fmt.Errorf("%w: the script sent the option %q; this hdet reads hdet_alpha, hdet_spread and hdet_auto (install the hdet Python package of the same release)", ErrSetting, k)
		}
	}
	o.alpha, o.spread = h.Options["alpha"], h.Options["spread"]
	if err := errors.Join(checkAlpha("hdet_alpha", o.alpha), checkSpread("hdet_spread", o.spread)); err != nil {
		return o, err
	}
	if a, ok := h.Options["auto"]; ok {
		m, ok := a.(map[string]any)
		if !ok {
			return o, fmt.Errorf("%w: hdet_auto must be a dict of the lr explorer's auto settings, got %s", ErrSetting, jsonText(a))
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
// spread (the entry's alpha and spread, else hdet_alpha and hdet_spread),
// bounds, a constant schedule from base, and hdet_auto for lr.
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
		if name == "lr" {
			return nil, fmt.Errorf("%w: %s[\"base\"]: lr's base is the OneCycleLR schedule (max_lr); remove base", ErrSetting, arg)
		}
		b["schedule"] = base
	}
	if name == "lr" && o.auto != nil {
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

// autoKeys are the built-in explorers' auto keys (hparam.AutoSpec), less
// the removed decay.
func autoKeys() []string {
	t := reflect.TypeFor[hparam.AutoSpec]()
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
			return fmt.Errorf("%w: hdet_auto[\"decay\"] was removed in revision 2: the OneCycleLR's own anneal replaced it; delete the key", ErrSetting)
		case !slices.Contains(keys, k):
			return fmt.Errorf("%w: hdet_auto has the unknown key %q; allowed: %s", ErrSetting, k, strings.Join(keys, ", "))
		}
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("%w: hdet_auto: %v", ErrSetting, err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var spec hparam.AutoSpec
	var te *json.UnmarshalTypeError
	if err := dec.Decode(&spec); errors.As(err, &te) {
		return fmt.Errorf("%w: hdet_auto[%q] must be a JSON %s, got %s", ErrSetting, te.Field, jsonType(te.Type), jsonText(m[te.Field]))
	} else if err != nil {
		return fmt.Errorf("%w: hdet_auto: %v", ErrSetting, err)
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
	return " (the script's hdet.OneCycleLR arguments are part of it: hdet_alpha and hdet_spread set spread.alpha and spread.kind, hdet_auto the lr explorer's auto block, an explore entry's alpha, spread, lower, upper and base its spread, bounds and schedule)"
}
