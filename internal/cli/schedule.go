package cli

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/hparam/schedule"
)

// specFlag sets one field of a schedule.Spec from the command line;
// the field stays nil (its default) unless the flag is given.
type specFlag struct {
	field reflect.Value // a pointer field of the spec
}

func (f specFlag) String() string {
	if !f.field.IsValid() || f.field.IsNil() {
		return ""
	}
	return fmt.Sprint(f.field.Elem().Interface())
}

func (f specFlag) Set(s string) error {
	var v any
	var err error
	switch f.field.Type().Elem().Kind() {
	case reflect.Float64:
		v, err = strconv.ParseFloat(s, 64)
	case reflect.Int:
		v, err = strconv.Atoi(s)
	case reflect.Bool:
		v, err = strconv.ParseBool(s)
	default:
		v = s
	}
	if err != nil {
		return errors.New("not a valid " + f.field.Type().Elem().Kind().String())
	}
	p := reflect.New(f.field.Type().Elem())
	p.Elem().Set(reflect.ValueOf(v))
	f.field.Set(p)
	return nil
}

func (f specFlag) IsBoolFlag() bool {
	return f.field.IsValid() && f.field.Type().Elem().Kind() == reflect.Bool
}

// scheduleFlagHelp is the help line of each schedule parameter.
var scheduleFlagHelp = map[string]string{
	"total_steps":      "number of steps (OneCycleLR: total_steps)",
	"value":            "the constant value",
	"max_lr":           "peak learning rate",
	"epochs":           "with steps_per_epoch, total_steps = epochs*steps_per_epoch",
	"steps_per_epoch":  "steps in an epoch",
	"pct_start":        "fraction of the steps spent increasing the rate (default 0.3)",
	"anneal_strategy":  "cos or linear (default cos)",
	"cycle_momentum":   "cycle the momentum inversely to the rate (default true)",
	"base_momentum":    "lowest momentum (default 0.85)",
	"max_momentum":     "highest momentum (default 0.95)",
	"div_factor":       "initial_lr = max_lr/div_factor (default 25)",
	"final_div_factor": "min_lr = initial_lr/final_div_factor (default 1e4)",
	"three_phase":      "use the three-phase schedule (default false)",
	"momentum":         "the optimizer's momentum, printed when cycle_momentum is false (default 0.9)",
	"initial":          "value at step 0 (cosine, linear: default 0)",
	"peak":             "value at the end of the warm-up",
	"final":            "value at the last step (default 0)",
	"warmup_steps":     "steps of linear warm-up (default 0)",
	"step_size":        "multiply by gamma every step_size steps",
	"gamma":            "decay factor (default 0.1)",
}

func flagName(key string) string { return strings.ReplaceAll(key, "_", "-") }

// runSchedule prints a schedule's values step by step: `hdet schedule
// onecycle --max-lr 0.1 --total-steps 100` prints what PyTorch's OneCycleLR
// would set at steps 0..99.
func runSchedule(s Streams, args []string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			fmt.Fprintf(s.Err, "usage: hdet schedule KIND [flags]   (KIND: %s; hdet schedule KIND -h for its flags)\n", strings.Join(schedule.Kinds, ", "))
			return flag.ErrHelp
		}
		return Usagef("schedule needs a kind first: one of %s", strings.Join(schedule.Kinds, ", "))
	}
	kind := args[0]
	if !slices.Contains(schedule.Kinds, kind) {
		return Usagef("unknown schedule kind %q: want one of %s", kind, strings.Join(schedule.Kinds, ", "))
	}
	spec := schedule.Spec{Kind: &kind}
	fs := newFlagSet(s, "schedule "+kind)
	format := fs.String("format", "json", "output format: json or csv")
	// One flag per parameter the kind takes, named as OneCycleLR's
	// arguments with dashes, the underscore spelling accepted too.
	fields := map[string]reflect.Value{}
	sv := reflect.ValueOf(&spec).Elem()
	for i := range sv.NumField() {
		fields[strings.Split(sv.Type().Field(i).Tag.Get("json"), ",")[0]] = sv.Field(i)
	}
	for _, key := range schedule.KindKeys(kind) {
		f := specFlag{field: fields[key]}
		fs.Var(f, flagName(key), scheduleFlagHelp[key])
		if flagName(key) != key {
			fs.Var(f, key, "same as --"+flagName(key))
		}
	}
	fs.Usage = func() {
		fmt.Fprintf(s.Err, "usage: hdet schedule %s [flags]\n\nflags (underscore spellings such as --max_lr work too; booleans take --flag=false):\n", kind)
		fs.VisitAll(func(f *flag.Flag) {
			if !strings.Contains(f.Name, "_") {
				fmt.Fprintf(s.Err, "  --%-18s %s\n", f.Name, f.Usage)
			}
		})
	}
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return Usagef("unexpected arguments %q", fs.Args())
	}
	if *format != "json" && *format != "csv" {
		return Usagef("--format: must be json or csv, got %q", *format)
	}
	sched, err := spec.Build(kind, 0)
	if err != nil {
		var fe *hparam.FieldError
		if errors.As(err, &fe) {
			return Usagef("--%s: %s", flagName(fe.Field), fe.Msg)
		}
		return err
	}
	if sched.Steps() > maxPrintedSteps {
		return Usagef("--total-steps: got %d, want at most %d (hdet schedule prints every step)", sched.Steps(), maxPrintedSteps)
	}
	oc, _ := sched.(*schedule.OneCycle)
	return writeSchedule(s, sched, oc, *format)
}

// maxPrintedSteps bounds what hdet schedule prints (about 250 MB of JSON).
const maxPrintedSteps = 10_000_000

// writeSchedule prints every step's value (and OneCycle's momentum) with
// full float64 precision.
func writeSchedule(s Streams, sched schedule.Schedule, oc *schedule.OneCycle, format string) error {
	w := bufio.NewWriter(s.Out)
	series := []struct {
		key string
		at  func(int) (float64, error)
	}{{"lr", sched.At}}
	if oc != nil {
		series = append(series, struct {
			key string
			at  func(int) (float64, error)
		}{"momentum", oc.Momentum})
	}
	var buf []byte
	if format == "csv" {
		w.WriteString("step")
		for _, sr := range series {
			w.WriteString("," + sr.key)
		}
		w.WriteString("\n")
		for step := range sched.Steps() {
			buf = strconv.AppendInt(buf[:0], int64(step), 10)
			for _, sr := range series {
				v, err := sr.at(step)
				if err != nil {
					return err
				}
				buf = strconv.AppendFloat(append(buf, ','), v, 'g', -1, 64)
			}
			w.Write(append(buf, '\n'))
		}
		return w.Flush()
	}
	w.WriteString("{")
	for i, sr := range series {
		if i > 0 {
			w.WriteString(",")
		}
		w.WriteString(strconv.Quote(sr.key) + ":[")
		for step := range sched.Steps() {
			v, err := sr.at(step)
			if err != nil {
				return err
			}
			buf = buf[:0]
			if step > 0 {
				buf = append(buf, ',')
			}
			w.Write(strconv.AppendFloat(buf, v, 'g', -1, 64))
		}
		w.WriteString("]")
	}
	w.WriteString("}\n")
	return w.Flush()
}
