// Package panics logs a handler's panic the one way both serving engines
// (h1 and h2) do: with the value and the stack of the goroutine that
// panicked, as net/http's server and x/net/http2's do.
package panics

import (
	"log/slog"
	"runtime"
)

// stackSize bounds the stack logged, as net/http's server bounds its own:
// a stack deeper than that is cut.
const stackSize = 64 << 10

// Log logs v, a handler's panic recovered on the goroutine that ran the
// handler, at warn, with remote (the client's address) and the stack of
// the calling goroutine. Call it from the deferred function that
// recovered, so that the stack still holds the handler's frames.
func Log(l *slog.Logger, remote string, v any) {
	buf := make([]byte, stackSize)
	buf = buf[:runtime.Stack(buf, false)]
	l.Warn("panic serving request", "remote_addr", remote, "err", v, "stack", string(buf))
}
