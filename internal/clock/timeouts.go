package clock

import "time"

// The defaults of the client-facing timeouts, which queue's HTTP/1.1 and
// HTTP/2 engines (h1, h2) and package ingress share.
const (
	// DefaultReadHeaderTimeout cuts a client that sends its request head
	// slowly (slowloris).
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultIdleTimeout closes connections idle this long. It is above the
	// 90 s that Go's and Envoy's clients keep idle connections, so that the
	// client, not queue, closes first and no request races a close.
	DefaultIdleTimeout = 120 * time.Second
)
