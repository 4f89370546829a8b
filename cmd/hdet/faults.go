//go:build faults

package main

import (
	"github.com/hdet-dev/hdet/internal/faults"
	"github.com/hdet-dev/hdet/internal/session"
)

// The fault suite's binary (go build -tags faults) injects the failures that
// HDET_FAULTS names (see package faults); release builds do not link this.
func init() { session.WrapReplica = faults.FromEnv }
