package hparam

import "strings"

// IsLR reports whether a hyperparameter is a learning rate: "lr" or any
// "lr/GROUP" (a per-group rate such as "lr/hidden" or "lr/backbone").
// Rollbacks halve these, and progress shows one as the base lr.
func IsLR(name string) bool { return name == "lr" || strings.HasPrefix(name, "lr/") }
