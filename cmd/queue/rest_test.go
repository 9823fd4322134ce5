package main

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestRestLoop: the heap is released once requests have stopped for
// restQuiet and it grew, not while they come, not twice for one growth, and
// the loop wakes less and less often at rest.
func TestRestLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var arrivals, held, releases, wakes atomic.Uint64
		held.Store(8 << 20)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go restLoop(ctx, func() uint64 { wakes.Add(1); return arrivals.Load() }, held.Load,
			func() { releases.Add(1); held.Store(9 << 20) })

		// A burst: a request a second for 10 s, the heap growing.
		for range 10 {
			arrivals.Add(1)
			held.Add(4 << 20)
			time.Sleep(time.Second)
		}
		if n := releases.Load(); n != 0 {
			t.Fatalf("%d releases while requests came, want 0", n)
		}
		time.Sleep(2*restQuiet + time.Millisecond)
		synctest.Wait()
		if n := releases.Load(); n != 1 {
			t.Fatalf("%d releases after the burst, want 1", n)
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
		// A trickle that grows nothing costs no release.
		for range 5 {
			arrivals.Add(1)
			time.Sleep(5 * time.Second)
		}
		synctest.Wait()
		if n := releases.Load(); n != 1 {
			t.Errorf("%d releases after a trickle that grew nothing, want 1", n)
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
