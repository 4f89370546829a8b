//go:build testhooks

package signals

// hooked: this test binary links the real Pause.
const hooked = true
