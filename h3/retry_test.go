package h3

import (
	"testing"
	"time"
)

// TestRetryGate: within a window the first RetryAbove handshakes go without
// a Retry and every later one gets one; once the window has passed the
// count starts again.
func TestRetryGate(t *testing.T) {
	for _, window := range []time.Duration{0, time.Hour} {
		g := retryGate{window: window}
		for i := range RetryAbove {
			if g.verify(nil) {
				t.Fatalf("window %v: handshake %d asked for a Retry, want none up to %d", window, i+1, RetryAbove)
			}
		}
		for i := range 3 {
			if !g.verify(nil) {
				t.Fatalf("window %v: handshake %d past the threshold without a Retry", window, i+1)
			}
		}
		length := window
		if length == 0 {
			length = time.Second // the default window
		}
		g.start = g.start.Add(-length) // the window has passed
		if g.verify(nil) {
			t.Errorf("window %v: the first handshake of a new window asked for a Retry", window)
		}
	}
}
