//go:build !linux

package probe

// connectNow has no fast path here: the caller dials.
func connectNow(string) (bool, error) { return false, nil }
