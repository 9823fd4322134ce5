package probe_test

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/queue-dev/queue/probe"
)

// TestWatcherOnReady: OnReady is called once each time the upstream
// becomes ready (the proxy ends an outage of refused connects on it), and
// not for the probes that keep a ready upstream ready: down until 100 ms,
// up until 2 s (one call), down long enough to turn unready, then up again
// (a second call), and probed on for a while (no third).
func TestWatcherOnReady(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		up := func(since time.Duration) bool {
			return since >= 100*time.Millisecond && since < 2*time.Second || since >= 5*time.Second
		}
		s := newScript(func(_ int, since time.Duration) error {
			if up(since) {
				return nil
			}
			return errDown
		})
		var calls atomic.Int32
		w := &probe.Watcher{Prober: s, OnReady: func() { calls.Add(1) }}
		stop := run(t, w)
		defer stop()

		sleepUntil(start, time.Second)
		if got, want := calls.Load(), int32(1); got != want {
			t.Errorf("OnReady called %d times once the upstream was up, want %d", got, want)
		}
		sleepUntil(start, 4500*time.Millisecond)
		if w.Ready() {
			t.Fatal("Ready() = true 2.5 s into an outage, want false")
		}
		sleepUntil(start, 20*time.Second)
		if !w.Ready() {
			t.Fatal("Ready() = false 15 s after the upstream came back, want true")
		}
		if got, want := calls.Load(), int32(2); got != want {
			t.Errorf("OnReady called %d times after two outages ended, want %d", got, want)
		}
	})
}
