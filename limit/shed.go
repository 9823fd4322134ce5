package limit

import "time"

// Shedding: a fixed limit lowered for a while, from outside, by the owner
// of a signal the limiter cannot see (package overload: the CPU quota
// binding). While shed, the limit is at most what Shed set and the waiters
// get their slots newest first, as Facebook's adaptive LIFO serves a queue
// under overload: the requests served are the ones whose clients are
// still there. Newest first alone leaves waiting, until their clients give
// up, as many requests as arrive beyond what the slots serve, even when
// that is a few in a hundred for a few seconds: so one slot in OldShare
// goes to the oldest waiter that has waited under OldAge. A load a little
// over capacity is then served whole, late by what it is over; one far over
// it still serves the newest first with three slots in four, and the
// requests older than OldAge wait until their clients give up. Restore
// ends it. An adaptive limiter is never shed: its controller already
// lowers the limit when the round trip grows.

// FreshWait is the wait, while shed, under which AcquireWaited reports
// none: one period of a CPU quota (100 ms, Kubernetes' CFS period).
const FreshWait = 100 * time.Millisecond

// OldShare and OldAge: while shed, one slot in OldShare goes to the
// oldest waiter that has waited under OldAge, the others to the newest.
const (
	OldShare = 4
	OldAge   = 3 * time.Second
)

// Shed lowers the limit to n, or leaves it where it is if it is lower
// already, and hands slots to the newest waiters first (but for
// OldShare's), until Restore. A limit that falls under the slots held
// frees none of them: releases make it good (Release). It reports false,
// and does nothing, for an adaptive limiter or an n < 1.
func (l *Limiter) Shed(n int) bool {
	if l.ctl != nil || n < 1 {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.newest = true
	l.setCapacity(min(uint64(n), l.base))
	return true
}

// Raise raises a shed limit by n, up to the one New set; the new slots go
// to the waiters first. It is for slots held by requests that do not end
// soon (a long poll, a stream), which a shed limit would otherwise leave
// the rest waiting behind. It does nothing when the limiter is not shed.
func (l *Limiter) Raise(n int) {
	if n < 1 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.newest {
		return
	}
	l.setCapacity(min(l.capacity.Load()+uint64(n), l.base))
}

// Restore ends Shed: the limit New set again, the oldest waiter first,
// and the slots that frees handed to the waiters at once.
func (l *Limiter) Restore() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.newest {
		return
	}
	l.newest = false
	l.setCapacity(l.base)
}

// Shedding reports whether the limiter is shed.
func (l *Limiter) Shedding() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.newest
}

// Held returns the number of slots held now. It is one atomic load.
func (l *Limiter) Held() int {
	held, _ := unpack(l.state.Load())
	return int(held)
}

// Handoffs returns the number of slots handed to waiters so far. While
// requests wait, slots come free only as handoffs, or as a held count
// falling to a limit lowered under it: neither moving means no slot is
// coming free.
func (l *Limiter) Handoffs() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.handoffs
}

// Drained receives a value after the queue empties. A value may be left
// from an earlier time: look at Waiting after each. nil for an adaptive
// limiter.
func (l *Limiter) Drained() <-chan struct{} { return l.drained }

// setCapacity sets a fixed limiter's capacity and hands the slots a rise
// frees to the waiters. l.mu must be held.
func (l *Limiter) setCapacity(n uint64) {
	l.capacity.Store(n)
	for l.head != nil {
		s := l.state.Load()
		if held, _ := unpack(s); held >= n {
			break
		}
		l.handFree(s)
	}
}
