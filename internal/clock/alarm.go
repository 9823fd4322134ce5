package clock

import (
	"sync"
	"time"
)

// Alarm is a one-shot timer for a loop that sleeps most of its life, such
// as the readiness watcher's: Reset arms it, and C receives once when it
// expires. On Linux it runs on a timerfd the netpoller waits on, not on
// the runtime's timer heap. The runtime's monitor thread (sysmon) sleeps
// only until the next runtime timer, so each expiry of a time.Timer in an
// idle process wakes it as well as the thread that runs the timer, and it
// then polls every 20 µs while that thread works: at one expiry a second
// or more (a watcher backing off, or polling while a probe is held), that
// is a third of what an idle sidecar costs (bench/sidecar.sh, rows a and
// b). An expiry the netpoller reports wakes one thread. Elsewhere, and if
// the timerfd cannot be made, it is a time.Timer.
//
// An Alarm is for one goroutine at a time (Reset, Stop and the receive
// from C), and Close ends it.
type Alarm struct {
	// C receives once per expiry; a value left from an expiry before
	// the last Reset or Stop is taken away by it.
	C <-chan struct{}

	c     chan struct{}
	mu    sync.Mutex
	when  time.Time // the expiry armed; guarded by mu
	armed bool      // guarded by mu
	fd    alarmFD   // the timerfd (alarm_linux.go), or none
	t     *time.Timer
}

// NewAlarm returns an Alarm that is not armed.
func NewAlarm() *Alarm { return newAlarm(true) }

// NewTimerAlarm returns an Alarm that is not armed and runs on a
// time.Timer everywhere: for tests under testing/synctest, whose fake
// clock moves the runtime's timers but not a timerfd.
func NewTimerAlarm() *Alarm { return newAlarm(false) }

// newAlarm makes an Alarm on a timerfd if timerfd is true and one can be
// made, else on a time.Timer.
func newAlarm(timerfd bool) *Alarm {
	a := &Alarm{c: make(chan struct{}, 1)}
	a.C = a.c
	if !timerfd || !a.fd.open(a.fired) {
		a.t = time.AfterFunc(time.Hour, a.fired)
		a.t.Stop()
	}
	return a
}

// Reset arms the alarm to expire after d (at once when d <= 0).
func (a *Alarm) Reset(d time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.drain()
	d = max(d, 0)
	a.when, a.armed = time.Now().Add(d), true
	a.set(d)
}

// Stop disarms the alarm.
func (a *Alarm) Stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.drain()
	a.armed = false
	a.set(-1)
}

// Close disarms the alarm for good and releases what it holds.
func (a *Alarm) Close() {
	a.Stop()
	if a.t == nil {
		a.fd.close()
	}
}

// set arms the timer under the alarm to expire after d, or disarms it
// when d < 0; under mu.
func (a *Alarm) set(d time.Duration) {
	switch {
	case a.t == nil:
		a.fd.set(d)
	case d < 0:
		a.t.Stop()
	default:
		a.t.Reset(d)
	}
}

// fired is called when the timer expires: it sends on C if the alarm is
// armed and its time has come. An expiry that a Reset has since pushed
// back, or that came a hair early by the runtime's clock, arms the timer
// again for what is left.
func (a *Alarm) fired() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.armed {
		return
	}
	if left := time.Until(a.when); left > 0 {
		a.set(left)
		return
	}
	a.armed = false
	select {
	case a.c <- struct{}{}:
	default:
	}
}

// drain takes a value left on C.
func (a *Alarm) drain() {
	select {
	case <-a.c:
	default:
	}
}
