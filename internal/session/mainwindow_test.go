package session

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/hdet-dev/hdet/internal/config"
	"github.com/hdet-dev/hdet/internal/engine"
)

// The main pass's window is the replica's (workload.MainWindower: a worker
// script in gradients mode, bridge's TestMainWindow), found through a
// wrapper; a replica without one, the built-in workload's, keeps T (0).
func TestMainWindow(t *testing.T) {
	cfg := config.Default()
	s := &session{cfg: &cfg, steps: 300}
	s.replica = plain{}
	assert.Equal(t, 0, s.mainWindow())
	s.replica = wrapped{longWindows{}}
	assert.Equal(t, 300, s.mainWindow())
}

// plain is a replica that can do nothing beyond engine.Replica.
type plain struct{ engine.Replica }

// longWindows trains the main pass in one window.
type longWindows struct{ plain }

func (longWindows) MainWindow(_ *config.Config, steps int) int { return steps }

// wrapped hides the replica it wraps but for Unwrap, as the fault suite's
// injector does.
type wrapped struct{ engine.Replica }

func (w wrapped) Unwrap() engine.Replica { return w.Replica }
