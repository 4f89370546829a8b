// Package python embeds the hdet Python package (python/hdet) and its
// start-up hook (python/boot) so that the hdet binary can hand them to a
// worker script that has not installed them.
package python

import "embed"

// Package holds hdet/*.py, the integrations' hdet/integrations/*.py and
// boot/sitecustomize.py.
//
//go:embed hdet/*.py hdet/integrations/*.py boot/sitecustomize.py
var Package embed.FS
