package clock

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestBusy: ticks come every period while work is in flight, none once it
// is over (no timer is left armed), and none after Stop.
func TestBusy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ticks atomic.Int32
		b := NewBusy(100*time.Millisecond, func() { ticks.Add(1) })
		// after lets d pass and wants the ticks so far to be want.
		after := func(d time.Duration, want int32, when string) {
			t.Helper()
			time.Sleep(d)
			synctest.Wait()
			if got := ticks.Load(); got != want {
				t.Fatalf("ticks %s = %d, want %d", when, got, want)
			}
		}
		b.Begin()
		b.Begin()
		after(350*time.Millisecond, 3, "after 350 ms busy")
		b.End()
		if !b.Armed() {
			t.Fatal("not armed with work still in flight")
		}
		b.End()
		if b.Armed() {
			t.Fatal("armed with nothing in flight")
		}
		after(time.Second, 3, "after a second idle")
		b.Begin()
		after(150*time.Millisecond, 4, "150 ms into a new busy spell")
		b.Stop()
		after(time.Second, 4, "a second after Stop")
		if b.Armed() {
			t.Fatal("armed after Stop")
		}
		b.End()
	})
}
