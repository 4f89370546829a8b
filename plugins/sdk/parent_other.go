//go:build !linux

package sdk

// armParentDeathSignal has no kernel help outside Linux; watchParent's poll
// covers it.
func armParentDeathSignal(int) {}
