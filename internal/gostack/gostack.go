// Package gostack grows a goroutine's stack ahead of need.
//
// A goroutine starts with a 2 KiB stack and doubles it whenever a call
// needs more: each growth copies the stack, walking every frame on it and
// reading each frame's stack map from the binary's function table. A
// connection goroutine serving a proxied request, or the readiness
// watcher dialling the upstream, reaches 8 KiB, in two copies made deep in
// the call chain. That costs every new connection CPU, and it reads the
// function table from all over: after start-up it alone mapped much of
// the binary back in (cmd/queue's releaseStartupPages).
package gostack

// Grow grows the calling goroutine's stack to 8 KiB in one copy, made while
// only the caller's frames are on it. Call it first thing in a goroutine
// that will need that much; it costs nothing when the stack is already big
// enough (the runtime starts goroutines with larger stacks once the GC has
// seen that they use them).
//
//go:noinline
func Grow() {
	// With the runtime's stack guard the frame needs more than 4 KiB, so
	// the stack doubles straight to 8 KiB.
	var frame [5 << 10]byte
	if sink {
		for i := range frame {
			frame[i] = byte(i)
		}
		println(frame[len(frame)-1])
	}
}

// sink is never set: it keeps Grow's frame, which is never written.
var sink bool
