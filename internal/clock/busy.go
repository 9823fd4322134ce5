// Package clock holds what queue's engines and proxy share about time,
// none of it HTTP: Busy, a tick that runs only while work is in flight;
// Deadline, deadlines rounded so that consecutive requests share one; and
// the default client-facing timeouts.
package clock

import (
	"sync"
	"sync/atomic"
	"time"
)

// Busy runs a tick every period while work is in flight, and keeps no
// timer at all otherwise: Begin and End count the work in and out, the
// first Begin of a busy spell arms the timer (time.AfterFunc) and the End
// that leaves nothing in flight stops it, so a lone request, over long
// before a period, leaves no tick behind to wake an idle process. The
// HTTP/1.1 engine's client-gone watcher and the proxy's reaper each run
// on one. Ticks run one at a time, under a lock that also guards what the
// tick keeps between runs; Begin and End take that lock only when the
// count touches zero.
type Busy struct {
	period time.Duration
	tick   func()

	n       atomic.Int64
	mu      sync.Mutex
	t       *time.Timer // made at the first Begin
	armed   bool
	stopped bool
}

// NewBusy returns a Busy that calls tick every period while busy.
func NewBusy(period time.Duration, tick func()) *Busy {
	return &Busy{period: period, tick: tick}
}

// Begin counts work in.
func (b *Busy) Begin() {
	if b.n.Add(1) == 1 {
		b.rearm()
	}
}

// End counts work out; every Begin has one.
func (b *Busy) End() {
	if b.n.Add(-1) == 0 {
		b.rearm()
	}
}

// Stop stops the ticks for good.
func (b *Busy) Stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stopped = true
	if b.armed {
		b.t.Stop()
		b.armed = false
	}
}

// Armed reports whether a tick is due.
func (b *Busy) Armed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.armed
}

// rearm arms the timer if work is in flight and stops it if none is. The
// count is read under the lock, so that of a Begin and an End that race,
// the later to lock decides.
func (b *Busy) rearm() {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch busy := b.n.Load() > 0 && !b.stopped; {
	case busy && !b.armed:
		if b.t == nil {
			b.t = time.AfterFunc(b.period, b.run)
		} else {
			b.t.Reset(b.period)
		}
		b.armed = true
	case !busy && b.armed:
		b.t.Stop()
		b.armed = false
	}
}

// run is the timer's function: a tick, then the next if still busy.
func (b *Busy) run() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tick()
	if b.armed = b.n.Load() > 0 && !b.stopped; b.armed {
		b.t.Reset(b.period)
	}
}
