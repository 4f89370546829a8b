package report

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"

	"gonum.org/v1/plot/vg"
	"gopkg.in/yaml.v3"

	"github.com/hdet-dev/hdet/internal/metrics"
)

// OffsetPath is what the controller concluded for one hyperparameter: the
// learned offset u over the run (docs/design.md §1.1: the base is the
// schedule combined with u, s(t)*exp(u) on a log scale, s(t)+u on a linear
// one) and, where the run's config names the schedule's peak, the
// effective peak, the peak combined with the final u.
type OffsetPath struct {
	Name, Scale     string
	Final, Min, Max float64
	Peak            float64 // the schedule's peak (config.yaml); NaN when unknown
	PeakField       string  // the schedule field Peak came from: max_lr, peak, value or initial
	Effective       float64 // Peak combined with Final; NaN when Peak is unknown
}

// ConfigFile is the resolved config hdet run writes into the run directory.
const ConfigFile = "config.yaml"

// peakFields are the schedule fields that hold a schedule's highest value,
// in the order they are looked for: OneCycle's max_lr, warm-up schedules'
// peak, a constant's value, a decaying schedule's initial value.
var peakFields = []string{"max_lr", "peak", "value", "initial"}

// schedulePeaks reads each explorer's schedule peak from dir/config.yaml,
// by explorer name. A missing or unreadable file gives no peaks: the
// report then shows the offset without the effective peak.
func schedulePeaks(dir string) map[string]namedValue {
	data, err := os.ReadFile(filepath.Join(dir, ConfigFile))
	if err != nil {
		return nil
	}
	var cfg struct {
		Explorers []struct {
			Name   string `yaml:"name"`
			Config struct {
				Schedule any `yaml:"schedule"` // a map, or a lone value (a constant)
			} `yaml:"config"`
		} `yaml:"explorers"`
	}
	if yaml.Unmarshal(data, &cfg) != nil {
		return nil
	}
	peaks := map[string]namedValue{}
	for _, e := range cfg.Explorers {
		if v, ok := toFloat(e.Config.Schedule); ok && finite(v) {
			peaks[e.Name] = namedValue{"value", v}
			continue
		}
		m, _ := e.Config.Schedule.(map[string]any)
		for _, f := range peakFields {
			if v, ok := toFloat(m[f]); ok && finite(v) {
				peaks[e.Name] = namedValue{f, v}
				break
			}
		}
	}
	return peaks
}

type namedValue struct {
	name  string
	value float64
}

func toFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case int:
		return float64(x), true
	}
	return 0, false
}

// combine applies an offset in the hyperparameter's scale.
func combine(scale string, v, u float64) float64 {
	if scale == "log" {
		return v * math.Exp(u)
	}
	return v + u
}

// offsetPaths lists every hyperparameter whose windows carry an offset.
// Only the search pass (or the one pass) learns u: the main pass of a run
// that committed trains at the committed values.
func offsetPaths(r *Run) []OffsetPath {
	peaks := schedulePeaks(r.Dir)
	var out []OffsetPath
	for _, p := range r.Params {
		op := OffsetPath{Name: p.Name, Scale: p.Scale, Peak: math.NaN(), Effective: math.NaN(), Min: math.Inf(1), Max: math.Inf(-1)}
		found := false
		for _, w := range r.pass(passSearch) {
			u, ok := w.Offset[p.Name]
			if !ok || !finite(float64(u)) {
				continue
			}
			found = true
			op.Final = float64(u)
			op.Min, op.Max = math.Min(op.Min, op.Final), math.Max(op.Max, op.Final)
		}
		if !found {
			continue
		}
		if pk, ok := peaks[p.Name]; ok {
			op.Peak, op.PeakField = pk.value, pk.name
			op.Effective = combine(p.Scale, pk.value, op.Final)
		}
		out = append(out, op)
	}
	return out
}

// effectiveName is how the report calls the effective peak: "effective
// max_lr" for OneCycle, "effective peak" otherwise.
func (o OffsetPath) effectiveName() string {
	if o.PeakField == "max_lr" {
		return "effective max_lr"
	}
	return "effective " + o.PeakField
}

// Conclusion is one sentence on what the controller concluded.
func (o OffsetPath) Conclusion() string {
	rule := "× exp(u)"
	if o.Scale != "log" {
		rule = "+ u"
	}
	if math.IsNaN(o.Effective) {
		return fmt.Sprintf("%s: offset u = %.3g (the base is the schedule %s; the schedule's peak is not in %s)", o.Name, o.Final, rule, ConfigFile)
	}
	return fmt.Sprintf("%s: %s %s = schedule %s %s %s, offset u = %.3g", o.Name, o.effectiveName(), num(o.Effective), o.PeakField, num(o.Peak), rule, o.Final)
}

// plotOffsets draws, per hyperparameter with an offset, u over the run (its
// search pass) and, where the schedule's peak is known, the effective peak
// with the schedule's own as a dashed line.
func plotOffsets(r *Run, add addFunc) error {
	blue := color.RGBA{R: 31, G: 119, B: 180, A: 255}
	search := r.pass(passSearch)
	xs := windowSteps(search)
	xlabel := "step"
	if r.TwoPass() {
		xlabel = "step of the search pass"
	}
	for _, o := range offsetPaths(r) {
		u := column(search, func(w metrics.WindowRecord) (metrics.Float, bool) { v, ok := w.Offset[o.Name]; return v, ok })
		unit := "log of the factor on the schedule"
		if o.Scale != "log" {
			unit = "added to the schedule"
		}
		c := newChart(fmt.Sprintf("%s: learned offset u, final %.3g", o.Name, o.Final), xlabel, "u ("+unit+")", false)
		if err := c.series(xs, u, blue, vg.Points(2), vg.Points(2), false, "offset u"); err != nil {
			return err
		}
		zero := make([]float64, len(xs))
		if err := c.series(xs, zero, black, vg.Points(1), 0, true, "u = 0: the schedule as configured"); err != nil {
			return err
		}
		if err := add(c, "offset-"+fileStem(o.Name), fmt.Sprintf("%s: the controller's learned offset u after each window (%s); final u = %.3g", o.Name, unit, o.Final)); err != nil {
			return err
		}
		if math.IsNaN(o.Peak) {
			continue
		}
		eff := make([]float64, len(u))
		peak := make([]float64, len(u))
		for i := range u {
			eff[i], peak[i] = combine(o.Scale, o.Peak, u[i]), o.Peak
		}
		name := o.effectiveName()
		c = newChart(fmt.Sprintf("%s: %s, what the controller concluded: final %s", o.Name, name, num(o.Effective)), xlabel, name, o.Scale == "log")
		if err := c.series(xs, eff, blue, vg.Points(2), vg.Points(2), false, name); err != nil {
			return err
		}
		if err := c.series(xs, peak, black, vg.Points(1.5), 0, true, "schedule's "+o.PeakField); err != nil {
			return err
		}
		caption := fmt.Sprintf("%s: the schedule's %s (dashed) combined with the offset after each window; final %s", o.Name, o.PeakField, o.Conclusion())
		if err := add(c, "effective-"+fileStem(o.Name), caption); err != nil {
			return err
		}
	}
	return nil
}
