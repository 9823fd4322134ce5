package clock

import (
	"runtime"
	"testing"
	"testing/synctest"
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

// wantNone checks that C holds no value now.
func wantNone(t *testing.T, a *Alarm, what string) {
	t.Helper()
	select {
	case <-a.C:
		t.Errorf("%s: the alarm fired", what)
	default:
	}
}

// armedUntil reports the expiry a holds armed, under its lock.
func armedUntil(a *Alarm) (when time.Time, armed bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.when, a.armed
}

// TestAlarm, on the real clock: an armed alarm fires once, at once for a
// Reset of zero or less, and no sooner than asked; a Reset replaces the
// expiry armed before (an earlier or a later one), Stop disarms it, and
// both take away a value left from an expiry. What must not fire is checked
// without waiting for it not to: C is empty once Reset or Stop returns,
// and the alarm holds the new expiry (or none), which is all fired goes
// by (TestAlarmFired) whatever the timer beneath delivers and whenever.
// TestAlarmFakeClock waits it out on a fake clock; on Linux,
// TestAlarmTimerfd checks the kernel's timer.
func TestAlarm(t *testing.T) {
	for _, k := range alarms {
		t.Run(k.name, func(t *testing.T) {
			a := k.make()
			defer a.Close()

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
			before := time.Now()
			a.Reset(time.Hour)
			wantNone(t, a, "Reset(10ms) then Reset(1h)")
			if when, armed := armedUntil(a); !armed || when.Before(before.Add(time.Hour)) {
				t.Errorf("after Reset(1h): armed %v until %v from now, want an hour", armed, time.Until(when))
			}

			// An earlier one replaces a later one.
			a.Reset(time.Hour)
			a.Reset(time.Millisecond)
			wantFire(t, a, "Reset(1h) then Reset(1ms)")

			// Stop disarms, and takes away a value left from an expiry;
			// so does a Reset.
			a.Reset(10 * time.Millisecond)
			a.Stop()
			wantNone(t, a, "Stop")
			if _, armed := armedUntil(a); armed {
				t.Error("armed after Stop")
			}
			for _, then := range []struct {
				name string
				f    func()
			}{{"Stop", a.Stop}, {"Reset(1h)", func() { a.Reset(time.Hour) }}} {
				a.Reset(0)
				waitArmed(t, a, false) // the expiry's value is on C
				then.f()
				wantNone(t, a, "a value left, then "+then.name)
			}
			a.Stop()
		})
	}
}

// TestAlarmFired: fired, which the timer beneath calls at each of its
// expiries, sends on C only when the alarm is armed and its expiry has
// come; an expiry a Reset pushed back arms the timer again and sends
// nothing; a value left on C is not doubled.
func TestAlarmFired(t *testing.T) {
	for _, k := range alarms {
		t.Run(k.name, func(t *testing.T) {
			a := k.make()
			defer a.Close()

			a.fired() // not armed
			wantNone(t, a, "fired while not armed")

			a.Reset(time.Hour)
			a.fired() // an expiry the Reset pushed back
			wantNone(t, a, "fired an hour before the expiry")
			if _, armed := armedUntil(a); !armed {
				t.Error("disarmed by an early expiry")
			}

			a.mu.Lock()
			a.when = time.Now().Add(-time.Millisecond) // its time has come
			a.mu.Unlock()
			a.fired()
			a.fired() // a second call finds it disarmed
			wantFire(t, a, "fired at the expiry")
			wantNone(t, a, "fired twice")
			if _, armed := armedUntil(a); armed {
				t.Error("still armed after its expiry was delivered")
			}
			a.Stop()
		})
	}
}

// TestAlarmFakeClock: the time.Timer's alarm on testing/synctest's clock,
// where the wait for what must not fire is exact: an alarm fires at its
// expiry and not a nanosecond before; the expiry a Reset replaced and one
// Stop cancelled never come, and Stop takes away a value left on C.
func TestAlarmFakeClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := NewTimerAlarm()
		defer a.Close()

		start := time.Now()
		a.Reset(30 * time.Millisecond)
		time.Sleep(30*time.Millisecond - time.Nanosecond)
		synctest.Wait()
		wantNone(t, a, "a nanosecond before its expiry")
		<-a.C
		if got := time.Since(start); got != 30*time.Millisecond {
			t.Errorf("fired after %v, want 30ms", got)
		}

		a.Reset(10 * time.Millisecond)
		a.Reset(time.Hour)
		time.Sleep(time.Minute)
		synctest.Wait()
		wantNone(t, a, "at the expiry a Reset replaced")
		start = time.Now()
		<-a.C
		if got, want := time.Since(start), time.Hour-time.Minute; got != want {
			t.Errorf("fired %v after the minute, want %v", got, want)
		}

		a.Reset(time.Hour)
		a.Reset(time.Millisecond)
		time.Sleep(time.Millisecond)
		synctest.Wait()
		select {
		case <-a.C:
		default:
			t.Error("Reset(1h) then Reset(1ms): nothing after 1ms")
		}

		a.Reset(10 * time.Millisecond)
		a.Stop()
		time.Sleep(time.Hour)
		synctest.Wait()
		wantNone(t, a, "after Stop")

		a.Reset(0)
		synctest.Wait() // the expiry is delivered: a value is left on C
		a.Stop()
		wantNone(t, a, "a value left, then Stop")
	})
}

// waitArmed waits until a's expiry has been delivered (armed false) or
// not, as want says.
func waitArmed(t *testing.T, a *Alarm, want bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, armed := armedUntil(a)
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
