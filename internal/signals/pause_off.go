//go:build !testhooks

package signals

// Pause is a setup point where a test binary (-tags testhooks) may wait for
// a signal (see PauseEnv); in this build it does nothing.
func Pause(string) {}
