// Package python embeds the hdet Python package (python/hdet) so that the
// hdet binary can hand it to a worker script that has not installed it.
package python

import "embed"

// Package holds hdet/*.py.
//
//go:embed hdet/*.py
var Package embed.FS
