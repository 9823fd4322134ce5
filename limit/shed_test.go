package limit

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestShed: a shed limit lets the slots held over it run out before it
// hands any to a waiter, then serves the newest waiter first; Restore
// hands the slots it frees to the waiters, the oldest first; the queue
// emptying is signalled.
func TestShed(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, Config{Capacity: 4, QueueDepth: 10})
		for range 4 {
			if err := l.Acquire(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		if !l.Shed(2) || !l.Shedding() || l.Limit() != 2 {
			t.Fatalf("Shed(2): shedding %v, limit %d; want true, 2", l.Shedding(), l.Limit())
		}
		got := queueWaiters(t, l, 3)
		for range 2 { // 4 held under a limit of 2: two releases free their slots
			l.Release()
			if i := woken(got); i != -1 {
				t.Fatalf("a release over the shed limit woke waiter %d", i)
			}
		}
		if n := l.Held(); n != 2 {
			t.Fatalf("Held() = %d, want 2", n)
		}
		l.Release()
		if i := woken(got); i != 2 {
			t.Fatalf("first slot under the shed limit went to waiter %d, want the newest, 2", i)
		}
		if n := l.Handoffs(); n != 1 {
			t.Errorf("Handoffs() = %d, want 1", n)
		}
		select {
		case <-l.Drained():
			t.Fatal("Drained while two wait")
		default:
		}
		l.Restore() // limit 4 again, 2 held: both waiters get a slot, 0 first
		if i, j := woken(got), woken(got); min(i, j) != 0 || max(i, j) != 1 {
			t.Fatalf("Restore woke %d and %d, want 0 and 1", i, j)
		}
		if l.Shedding() || l.Limit() != 4 || l.Held() != 4 || l.Waiting() != 0 {
			t.Errorf("after Restore: shedding %v, limit %d, held %d, waiting %d; want false, 4, 4, 0",
				l.Shedding(), l.Limit(), l.Held(), l.Waiting())
		}
		select {
		case <-l.Drained():
		default:
			t.Error("the queue emptied and Drained has nothing")
		}
		for range 4 {
			l.Release()
		}
		checkIdle(t, l)
	})
}

// TestRaise: Raise adds slots to a shed limit, up to the configured one,
// and hands them to the waiters; it does nothing to a limit not shed.
func TestRaise(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, Config{Capacity: 4, QueueDepth: 10})
		l.Raise(2)
		if l.Limit() != 4 {
			t.Fatalf("Raise on a limit not shed: limit %d, want 4", l.Limit())
		}
		l.Shed(1)
		if err := l.Acquire(t.Context()); err != nil {
			t.Fatal(err)
		}
		got := queueWaiters(t, l, 2)
		l.Raise(1)
		if i := woken(got); i != 1 || l.Limit() != 2 {
			t.Fatalf("Raise(1) woke %d with limit %d, want the newest, 1, and 2", i, l.Limit())
		}
		l.Raise(10)
		if i := woken(got); i != 0 || l.Limit() != 4 {
			t.Fatalf("Raise(10) woke %d with limit %d, want 0 and the configured 4", i, l.Limit())
		}
		for range 3 {
			l.Release()
		}
		l.Restore()
		checkIdle(t, l)
	})
}

// TestShedAdaptive: an adaptive limiter is never shed.
func TestShedAdaptive(t *testing.T) {
	l := mustNew(t, Config{Adaptive: true})
	if l.Shed(1) || l.Shedding() {
		t.Errorf("Shed on an adaptive limiter: %v, shedding %v; want false, false", l.Shed(1), l.Shedding())
	}
	if f := mustNew(t, Config{Capacity: 2}); f.Shed(0) || f.Limit() != 2 {
		t.Errorf("Shed(0) on a fixed limiter: limit %d; want no change, 2", f.Limit())
	}
}

// TestShedFreshWait: while shed, a request that got its slot within
// FreshWait reports no wait to AcquireWaited, one that waited longer
// does; first come first served, every wait counts.
func TestShedFreshWait(t *testing.T) {
	t.Parallel()
	for _, shed := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			l := mustNew(t, Config{Capacity: 1, QueueDepth: 2})
			if shed {
				l.Shed(1)
			}
			if err := l.Acquire(t.Context()); err != nil {
				t.Fatal(err)
			}
			for _, wait := range []time.Duration{FreshWait - time.Millisecond, FreshWait} {
				got := make(chan bool, 1)
				go func() {
					waited, err := l.AcquireWaited(t.Context())
					if err != nil {
						t.Error(err)
					}
					got <- waited
				}()
				synctest.Wait()
				time.Sleep(wait)
				l.Release()
				want := !shed || wait >= FreshWait
				if waited := <-got; waited != want {
					t.Errorf("shed %v, slot after %v: waited %v, want %v", shed, wait, waited, want)
				}
			}
			l.Release()
			checkIdle(t, l)
		})
	}
}

// TestShedOldShare: while shed, one slot in OldShare goes to the oldest
// waiter that has waited under OldAge; the waiters past it are left to
// newest first.
func TestShedOldShare(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, Config{Capacity: 1, QueueDepth: 10})
		l.Shed(1)
		if err := l.Acquire(t.Context()); err != nil {
			t.Fatal(err)
		}
		got := make(chan int, 7)
		queueMore(t, l, got, 0, 2)
		time.Sleep(OldAge + OldAge/2) // 0 and 1 have waited past OldAge
		queueMore(t, l, got, 2, 7)
		want := []int{6, 5, 4, 2, 3, 1, 0} // the fourth to 2, the oldest under OldAge
		for n, w := range want {
			l.Release()
			if i := woken(got); i != w {
				t.Fatalf("slot %d went to waiter %d, want %d (order %v)", n+1, i, w, want)
			}
		}
		l.Release()
		checkIdle(t, l)
	})
}
