package main

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/queue-dev/queue/internal/clock"
)

// TestRestLoop: the heap is released once requests have stopped for
// restQuiet and it grew, not while they come, not twice for one growth, and
// the loop wakes less and less often at rest.
func TestRestLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var arrivals, held, releases, pages, wakes atomic.Uint64
		held.Store(8 << 20)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		// A timer the bubble's fake clock moves, unlike a timerfd.
		go restLoop(ctx, clock.NewTimerAlarm(), func() uint64 { wakes.Add(1); return arrivals.Load() }, held.Load,
			func() { releases.Add(1); held.Store(9 << 20) }, func() { pages.Add(1) })

		// Nothing served yet: the loop looks once a minute.
		time.Sleep(restMaxWait - time.Second)
		synctest.Wait()
		if n := wakes.Load(); n != 1 {
			t.Errorf("%d checks in the minute before the first request, want 1 (at the start)", n)
		}
		// A burst: 20 requests a second for 10 s, the heap growing.
		for range 10 {
			arrivals.Add(20)
			held.Add(4 << 20)
			time.Sleep(time.Second)
		}
		if n, m := releases.Load(), pages.Load(); n != 0 || m != 0 {
			t.Fatalf("%d heap and %d page releases while requests came, want 0", n, m)
		}
		time.Sleep(2*restQuiet + time.Millisecond)
		synctest.Wait()
		if n, m := releases.Load(), pages.Load(); n != 1 || m != 1 {
			t.Fatalf("%d heap and %d page releases after the burst, want 1 and 1", n, m)
		}
		// At rest: no release without growth, and the checks thin out.
		wakes.Store(0)
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		if n := releases.Load(); n != 1 {
			t.Errorf("%d releases at rest, want still 1", n)
		}
		if n := wakes.Load(); n > 15 {
			t.Errorf("%d checks in 10 minutes at rest, want at most 15 (one a minute, once backed off)", n)
		}
		// A few requests (a readiness check) cost no release at all.
		for range 3 {
			arrivals.Add(1)
		}
		time.Sleep(restMaxWait + 2*restQuiet)
		synctest.Wait()
		if n, m := releases.Load(), pages.Load(); n != 1 || m != 1 {
			t.Errorf("%d heap and %d page releases after three requests, want still 1 and 1", n, m)
		}
		// A trickle that grows nothing costs no heap release, and a page
		// release at most every restPagesGap once restPagesMin requests
		// came.
		for range 50 {
			arrivals.Add(5)
			time.Sleep(5 * time.Second)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := releases.Load(); n != 1 {
			t.Errorf("%d heap releases after a trickle that grew nothing, want 1", n)
		}
		m := pages.Load()
		if m != 3 {
			t.Errorf("%d page releases after 250 s of 5 requests every 5 s and a quiet minute, want 3 (2 more: one for each restPagesMin requests)", m)
		}
		// Load, a pause (an upstream restart holding every request),
		// load again, a pause: each pause releases the pages, though the
		// two are less than restPagesGap apart.
		for _, load := range []time.Duration{restMaxWait + time.Second, 10 * time.Second} {
			for range load / time.Second {
				arrivals.Add(200) // 2,000 in 10 s: more than restPagesBurst
				time.Sleep(time.Second)
			}
			time.Sleep(2*restQuiet + time.Millisecond)
			synctest.Wait()
		}
		if got := pages.Load(); got != m+2 {
			t.Errorf("%d page releases in two pauses of load 10 s apart, want 2", got-m)
		}
	})
}

// TestHeapHeld: the measure reads something, and more after a large
// allocation kept alive.
func TestHeapHeld(t *testing.T) {
	before := heapHeld()
	b := make([]byte, 32<<20)
	b[0] = 1
	if after := heapHeld(); after < before+16<<20 || b[0] != 1 {
		t.Errorf("heapHeld = %d before a 32 MiB allocation, %d after: want it to grow by most of it", before, after)
	}
}
