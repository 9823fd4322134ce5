package main

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/queue-dev/queue/internal/clock"
)

// pageRelease is a release of the executable's pages that restLoop made:
// when, and the arrivals it had seen.
type pageRelease struct {
	at       time.Time
	arrivals uint64
}

// TestRestLoop: the heap is released once requests have stopped for
// restQuiet and it grew, not while they come, not twice for one growth, and
// the loop wakes less and less often at rest. The executable's pages are
// released at rest only, after restPagesMin requests at least, at most
// once every restPagesGap unless restPagesBurst requests came, and surely
// once restPagesMin requests came and a quiet minute passed. It runs on
// synctest's fake clock.
func TestRestLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var arrivals, held, releases, wakes, seen atomic.Uint64
		var mu sync.Mutex
		var pages []pageRelease
		pageCount := func() int { mu.Lock(); defer mu.Unlock(); return len(pages) }
		held.Store(8 << 20)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		// A timer the bubble's fake clock moves, unlike a timerfd. seen is
		// the count the loop last read, which its decision is made on.
		go restLoop(ctx, clock.NewTimerAlarm(), func() uint64 { wakes.Add(1); n := arrivals.Load(); seen.Store(n); return n }, held.Load,
			func() { releases.Add(1); held.Store(9 << 20) },
			func() { mu.Lock(); pages = append(pages, pageRelease{time.Now(), seen.Load()}); mu.Unlock() })

		// Nothing served yet: the loop looks once a minute, so not once
		// in the minute's first 59 s (but for a look as it starts).
		time.Sleep(restMaxWait - time.Second)
		synctest.Wait()
		if n := wakes.Load(); n > 1 {
			t.Errorf("%d checks in the minute before the first request, want none but at the start", n)
		}
		// A burst: 20 requests a second for 10 s, the heap growing.
		for range 10 {
			arrivals.Add(20)
			held.Add(4 << 20)
			time.Sleep(time.Second)
		}
		if n, m := releases.Load(), pageCount(); n != 0 || m != 0 {
			t.Fatalf("%d heap and %d page releases while requests came, want 0", n, m)
		}
		time.Sleep(2*restQuiet + time.Millisecond)
		synctest.Wait()
		if n, m := releases.Load(), pageCount(); n != 1 || m != 1 {
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
		if n, m := releases.Load(), pageCount(); n != 1 || m != 1 {
			t.Errorf("%d heap and %d page releases after three requests, want still 1 and 1", n, m)
		}
		// A trickle that grows nothing costs no heap release; each page
		// release in it comes at rest (restQuiet after the arrival that
		// brought the count it saw), after restPagesMin requests at least
		// and restPagesGap at least since the one before (the trickle is
		// far below restPagesBurst); and after the quiet minute fewer than
		// restPagesMin requests are left unreleased.
		before := pageCount()
		var reached []pageRelease // when the trickle's arrivals reached each count
		for range 50 {
			reached = append(reached, pageRelease{time.Now(), arrivals.Add(5)})
			time.Sleep(5 * time.Second)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := releases.Load(); n != 1 {
			t.Errorf("%d heap releases after a trickle that grew nothing, want 1", n)
		}
		mu.Lock()
		prev, trickle := pages[before-1], slices.Clone(pages[before:])
		mu.Unlock()
		for _, p := range trickle {
			if n := p.arrivals - prev.arrivals; n < restPagesMin {
				t.Errorf("page release at %v after %d requests, want %d at least", p.at, n, restPagesMin)
			}
			if gap := p.at.Sub(prev.at); gap < restPagesGap {
				t.Errorf("page release at %v, %v after the one before, want %v at least", p.at, gap, restPagesGap)
			}
			if i := slices.IndexFunc(reached, func(r pageRelease) bool { return r.arrivals == p.arrivals }); i < 0 {
				t.Errorf("page release at %v on %d arrivals, a count the trickle never had", p.at, p.arrivals)
			} else if quiet := p.at.Sub(reached[i].at); quiet < restQuiet {
				t.Errorf("page release at %v, %v after a request came, want %v of rest at least", p.at, quiet, restQuiet)
			}
			prev = p
		}
		if n := arrivals.Load() - prev.arrivals; n >= restPagesMin {
			t.Errorf("%d requests came since the last page release and a quiet minute passed, want a release once %d came", n, restPagesMin)
		}
		t.Logf("%d page releases in 250 s of 5 requests every 5 s", len(trickle))
		m := uint64(pageCount())
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
		if got := uint64(pageCount()); got != m+2 {
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
