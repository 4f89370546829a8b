package hparam

// builtinExamples are config blocks each built-in explorer's Init accepts
// (Descriptor.ExampleConfig), so `hdet plugins check` can try a shipped
// explorer without a config.
var builtinExamples = map[string][]byte{
	BuiltinLR:          []byte(`{"schedule":{"max_lr":0.01}}`),
	BuiltinDropout:     []byte(`{"schedule":0.1}`),
	BuiltinWeightDecay: []byte(`{"schedule":0.01}`),
}

// withExample is d with its built-in example config.
func withExample(d Descriptor) Descriptor {
	d.ExampleConfig = builtinExamples[d.Name]
	return d
}
