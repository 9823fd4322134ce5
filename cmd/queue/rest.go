package main

import (
	"context"
	"log/slog"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"time"

	"github.com/queue-dev/queue/internal/clock"
)

// After a burst of requests what the burst grew stays the process's: the
// runtime collects the heap only when the next allocations call for it and
// returns pages to the system only down to the heap goal the burst left,
// and the executable's pages the burst ran stay resident; a sidecar at rest
// keeps the memory of its busiest moment for minutes. releaseAtRest gives
// it back once the process has come to rest, no request having arrived for
// restQuiet: when the heap holds restGrowth more than after the last
// collection of its own, it collects it and returns what is free to the
// system (two collections, a few milliseconds of CPU for a heap of tens of
// MiB); and the executable's pages go as at start (resident_linux.go), at
// most once every restPagesGap unless restPagesBurst requests came since
// the last time, since the next request faults back in what it runs: a
// trickle of requests pays for it at most every restPagesGap, a burst
// that follows a pause in the middle of load (an upstream restart holds
// every request for a moment) gets its pages released all the same; and
// only when restPagesMin requests came since the last release: a few
// requests (a readiness check, a trickle) fault in the code they run, about
// the size of the request path, which the next of them would only fault
// back again. It looks at arrivals every restQuiet while requests come,
// and less and less often at rest, up to restMaxWait: an idle process
// wakes once a minute for it. Until the first request it looks only every
// restMaxWait, as a process that has served nothing has nothing to give
// back: a burst at a cold start is released within a minute of its end.
const (
	restQuiet   = 2 * time.Second
	restMaxWait = time.Minute
	// restGrowth is how much more the heap must hold than it held after
	// the last release before another is worth two collections: a trickle
	// of requests, which grows nothing, costs none.
	restGrowth = 4 << 20
	// restPagesGap spaces the releases of the executable's pages: a
	// trickle of requests pays for one at most this often.
	restPagesGap = 30 * time.Second
	// restPagesBurst is how many requests since the last release of the
	// executable's pages make another worth it sooner than restPagesGap.
	restPagesBurst = 1000
	// restPagesMin is how many requests since the last release of the
	// executable's pages make one worth it at all.
	restPagesMin = 100
)

// releaseAtRest runs until ctx is done; arrivals counts the requests that
// have come (drain.Drainer.Arrivals). Each release is logged at debug.
func releaseAtRest(ctx context.Context, arrivals func() uint64, log *slog.Logger) {
	t := clock.NewAlarm()
	defer t.Close()
	restLoop(ctx, t, arrivals, heapHeld, func() {
		before := heapHeld()
		// The buffer pools keep what they hold through one collection
		// (sync.Pool's victim cache): a second one frees it, and
		// FreeOSMemory returns the pages.
		runtime.GC()
		debug.FreeOSMemory()
		if log.Enabled(ctx, slog.LevelDebug) {
			log.LogAttrs(ctx, slog.LevelDebug, "heap released at rest", slog.Uint64("held_before", before), slog.Uint64("held_after", heapHeld()))
		}
	}, func() {
		n, err := releaseStartupPages()
		if log.Enabled(ctx, slog.LevelDebug) {
			log.LogAttrs(ctx, slog.LevelDebug, "executable pages released at rest", slog.Int64("bytes", n), slog.Any("err", err))
		}
	})
}

// restLoop is releaseAtRest with its alarm (an idle process wakes for
// nothing else: see clock.Alarm), the heap's measure and the two releases
// given.
func restLoop(ctx context.Context, t *clock.Alarm, arrivals, held func() uint64, releaseHeap, releasePages func()) {
	last := arrivals()
	kept := held()
	busy := false         // requests came since the pages were last released
	var pagesAt time.Time // when they were
	pagesArrivals := last // and the arrivals then
	wait := restQuiet
	if last == 0 {
		wait = restMaxWait // nothing served yet
	}
	t.Reset(wait)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n := arrivals(); n != last {
			last, wait, busy = n, restQuiet, true
		} else {
			if held() > kept+restGrowth {
				releaseHeap()
				kept = held()
			}
			if now := time.Now(); busy && last-pagesArrivals >= restPagesMin &&
				(now.Sub(pagesAt) >= restPagesGap || last-pagesArrivals >= restPagesBurst) {
				releasePages()
				busy, pagesAt, pagesArrivals = false, now, last
			}
			wait = min(2*wait, restMaxWait)
		}
		t.Reset(wait)
	}
}

// heapHeld is the memory the heap holds from the system: what the runtime
// mapped for it and has not returned.
func heapHeld() uint64 {
	s := [...]metrics.Sample{{Name: "/memory/classes/heap/free:bytes"}, {Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"}, {Name: "/memory/classes/heap/stacks:bytes"}}
	metrics.Read(s[:])
	var n uint64
	for _, v := range s {
		if v.Value.Kind() == metrics.KindUint64 {
			n += v.Value.Uint64()
		}
	}
	return n
}
