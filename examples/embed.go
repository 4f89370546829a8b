// Package examples holds hdet's example configurations; mnist.yaml is
// embedded in the hdet binary as the default run.
package examples

import _ "embed"

// MNIST is examples/mnist.yaml, what `hdet run` runs without a config.
//
//go:embed mnist.yaml
var MNIST []byte
