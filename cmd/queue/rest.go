package main

import (
	"context"
	"log/slog"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// After a burst of requests the heap the burst grew stays the process's:
// the runtime collects it only when the next allocations call for it, and
// returns the pages to the system only down to the heap goal the burst
// left, so a sidecar at rest keeps the memory of its busiest moment for
// minutes. releaseAtRest gives it back once the process has come to rest:
// when no request has arrived for restQuiet, and the heap holds restGrowth
// more than it did after the last release, it collects the heap and returns
// what is free to the system (two collections, a few milliseconds of CPU
// for a heap of tens of MiB). It looks at arrivals
// every restQuiet while requests come, and less and less often at rest, up
// to restMaxWait: an idle process wakes once a minute for it.
const (
	restQuiet   = 2 * time.Second
	restMaxWait = time.Minute
	// restGrowth is how much more the heap must hold than it held after
	// the last release before another is worth two collections: a trickle
	// of requests, which grows nothing, costs none.
	restGrowth = 4 << 20
)

// releaseAtRest runs until ctx is done; arrivals counts the requests that
// have come (drain.Drainer.Arrivals). Each release is logged at debug.
func releaseAtRest(ctx context.Context, arrivals func() uint64, log *slog.Logger) {
	restLoop(ctx, arrivals, heapHeld, func() {
		before := heapHeld()
		// The buffer pools keep what they hold through one collection
		// (sync.Pool's victim cache): a second one frees it, and
		// FreeOSMemory returns the pages. The executable's pages the burst
		// touched go too, as at start (resident_linux.go).
		runtime.GC()
		debug.FreeOSMemory()
		n, _ := releaseStartupPages()
		if log.Enabled(ctx, slog.LevelDebug) {
			log.LogAttrs(ctx, slog.LevelDebug, "memory released at rest", slog.Uint64("heap_before", before),
				slog.Uint64("heap_after", heapHeld()), slog.Int64("executable_pages", n))
		}
	})
}

// restLoop is releaseAtRest with the heap's measure and its release given.
func restLoop(ctx context.Context, arrivals, held func() uint64, release func()) {
	last := arrivals()
	kept := held()
	wait := restQuiet
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n := arrivals(); n != last {
			last, wait = n, restQuiet
		} else {
			if held() > kept+restGrowth {
				release()
				kept = held()
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
