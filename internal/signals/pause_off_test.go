//go:build !testhooks

package signals

// hooked: this test binary links the no-op Pause.
const hooked = false
