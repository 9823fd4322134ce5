package h1

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
		b.Begin()
		b.Begin()
		time.Sleep(350 * time.Millisecond)
		synctest.Wait()
		if got := ticks.Load(); got != 3 {
			t.Fatalf("ticks after 350 ms busy = %d, want 3", got)
		}
		b.End()
		if !b.Armed() {
			t.Fatal("not armed with work still in flight")
		}
		b.End()
		if b.Armed() {
			t.Fatal("armed with nothing in flight")
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if got := ticks.Load(); got != 3 {
			t.Fatalf("ticks after a second idle = %d, want still 3", got)
		}
		b.Begin()
		time.Sleep(150 * time.Millisecond)
		synctest.Wait()
		if got := ticks.Load(); got != 4 {
			t.Fatalf("ticks 150 ms into a new busy spell = %d, want 4", got)
		}
		b.Stop()
		time.Sleep(time.Second)
		synctest.Wait()
		if got := ticks.Load(); got != 4 || b.Armed() {
			t.Fatalf("after Stop: ticks = %d, armed %v; want 4, false", got, b.Armed())
		}
		b.End()
	})
}
