package clock

import (
	"runtime"
	"testing"
	"time"
)

// alarms are both kinds of Alarm: the timerfd's (on Linux) and the
// time.Timer's.
var alarms = []struct {
	name string
	make func() *Alarm
}{{"NewAlarm", NewAlarm}, {"NewTimerAlarm", NewTimerAlarm}}

// wantFire waits (up to a bound far above any timer's lateness) for a to
// fire.
func wantFire(t *testing.T, a *Alarm, what string) {
	t.Helper()
	select {
	case <-a.C:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: the alarm did not fire", what)
	}
}

// TestAlarm: an armed alarm fires once, at once for a Reset of zero or
// less, and no sooner than asked; a Reset replaces the expiry armed before
// (an earlier or a later one), and Stop disarms it. What must not fire is
// checked against a witness alarm armed to expire after it would have.
func TestAlarm(t *testing.T) {
	for _, k := range alarms {
		t.Run(k.name, func(t *testing.T) {
			a, witness := k.make(), k.make()
			defer a.Close()
			defer witness.Close()

			for _, d := range []time.Duration{0, -time.Second} {
				a.Reset(d)
				wantFire(t, a, "Reset(0)")
			}

			start := time.Now()
			a.Reset(30 * time.Millisecond)
			wantFire(t, a, "Reset(30ms)")
			if got := time.Since(start); got < 30*time.Millisecond {
				t.Errorf("fired after %v, before the 30 ms asked", got)
			}

			// A later expiry replaces an earlier one.
			a.Reset(10 * time.Millisecond)
			a.Reset(time.Hour)
			witness.Reset(60 * time.Millisecond)
			wantFire(t, witness, "witness")
			select {
			case <-a.C:
				t.Fatal("fired at the expiry a Reset replaced")
			default:
			}

			// An earlier one replaces a later one.
			a.Reset(time.Hour)
			a.Reset(time.Millisecond)
			wantFire(t, a, "Reset(1h) then Reset(1ms)")

			// Stop disarms; a value left from an expiry is taken away.
			a.Reset(0)
			waitArmed(t, a, false)
			a.Reset(10 * time.Millisecond)
			a.Stop()
			witness.Reset(60 * time.Millisecond)
			wantFire(t, witness, "witness")
			select {
			case <-a.C:
				t.Fatal("fired after Stop")
			default:
			}
		})
	}
}

// waitArmed waits until a's expiry has been delivered (armed false) or
// not, as want says.
func waitArmed(t *testing.T, a *Alarm, want bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		a.mu.Lock()
		armed := a.armed
		a.mu.Unlock()
		if armed == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("armed stayed %v", armed)
		}
		runtime.Gosched()
	}
}

// TestAlarmClose: Close ends the goroutine that waits on the timerfd.
func TestAlarmClose(t *testing.T) {
	before := runtime.NumGoroutine()
	as := make([]*Alarm, 20)
	for i := range as {
		as[i] = NewAlarm()
		as[i].Reset(time.Hour)
	}
	for _, a := range as {
		a.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after Close, %d before the alarms", runtime.NumGoroutine(), before)
		}
		runtime.Gosched()
	}
}
