package hparam

import "strings"

// Builtin is a hyperparameter hdet knows by name: the values it admits,
// the built-in explorer that explores it, if any, and where the two
// workloads hdet ships apply it. Builtins is the one table of them; every
// place that needs one of these facts reads it (CONTRIBUTING.md, "Add a
// built-in hyperparameter").
type Builtin struct {
	// Name is the hyperparameter's name; "NAME/KEY" names the same
	// hyperparameter for one part of the model ("lr/hidden": the hidden
	// layers' rate; a PyTorch param group's "lr/KEY").
	Name   string
	Admits Range // what a value, a bound or a schedule of it may be
	// Explorer is the kind of its built-in explorer (hparam/builtin; the
	// plugin hdet-explorer-<Explorer>), "" when there is none; Scale,
	// Bounds and Spread are that explorer's defaults.
	Explorer string
	Scale    Scale
	Bounds   Bounds
	Spread   Spread
	// Where a value is applied, "" where it is not: by the built-in MNIST
	// workload (internal/workload/mnist) and by the PyTorch client
	// (python/hdet/_values.py). Tests check both workloads against these.
	MNIST, PyTorch string
}

// Builtins is every hyperparameter hdet knows, the explored ones first in
// the order of `hdet run`'s default explorers.
var Builtins = []Builtin{
	{Name: "lr", Admits: positive, Explorer: "lr", Scale: Log, Bounds: Bounds{Lower: 1e-8, Upper: 10},
		Spread:  Spread{Kind: Multiplicative, Alpha: 0.5},
		MNIST:   `the step size of every layer ("lr/hidden", "lr/output": of those layers)`,
		PyTorch: `a multiplier of every param group's "lr" ("lr/KEY": of one group's)`},
	{Name: "dropout", Admits: fraction, Explorer: "dropout", Scale: Linear, Bounds: Bounds{Lower: 0, Upper: 0.9},
		Spread:  Spread{Kind: Additive, Alpha: 1.0 / 9},
		MNIST:   "the probability of zeroing a hidden unit in training",
		PyTorch: "the p of every nn.Dropout in the module given as dropout= (or the function given)"},
	{Name: "weight_decay", Admits: nonNegative, Explorer: "weight-decay", Scale: Log, Bounds: Bounds{Lower: 0, Upper: 1},
		Spread:  Spread{Kind: Geometric, Alpha: 1.0 / 9},
		MNIST:   "AdamW's decoupled decay, SGD's L2 term, of the weights (not the biases)",
		PyTorch: `the "weight_decay" of the param groups that decay ("weight_decay/KEY": of one group's)`},
	{Name: "momentum", Admits: fraction,
		MNIST:   "SGD's momentum, or AdamW's beta1",
		PyTorch: `every param group's "momentum", or the first of its "betas"`},
	{Name: "label_smoothing", Admits: fraction, MNIST: "the cross-entropy's label smoothing"},
	{Name: "beta1", Admits: fraction},
	{Name: "beta2", Admits: fraction},
	{Name: "eps", Admits: positive},
}

// BuiltinOf is the built-in hyperparameter that name is (by its part
// before any "/", so "lr/hidden" is an lr).
func BuiltinOf(name string) (Builtin, bool) {
	group, _, _ := strings.Cut(name, "/")
	for _, b := range Builtins {
		if b.Name == group {
			return b, true
		}
	}
	return Builtin{}, false
}

// BuiltinExplored is the hyperparameter the built-in explorer of kind
// explores.
func BuiltinExplored(kind string) (Builtin, bool) {
	for _, b := range Builtins {
		if b.Explorer != "" && b.Explorer == kind {
			return b, true
		}
	}
	return Builtin{}, false
}

// Explored is the names of the built-in hyperparameters that have a
// built-in explorer, in the table's order.
func Explored() []string {
	var out []string
	for _, b := range Builtins {
		if b.Explorer != "" {
			out = append(out, b.Name)
		}
	}
	return out
}
