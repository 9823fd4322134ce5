package clock

import (
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// kernelLeft reads the timerfd under a (timerfd_gettime): the time left
// to its expiry, or 0 when it is disarmed.
func kernelLeft(t *testing.T, a *Alarm) time.Duration {
	t.Helper()
	var its [4]int64 // struct itimerspec: interval, then value
	if _, _, e := syscall.RawSyscall(syscall.SYS_TIMERFD_GETTIME, a.fd.fd, uintptr(unsafe.Pointer(&its[0])), 0); e != 0 {
		t.Fatalf("timerfd_gettime: %v", e)
	}
	return time.Duration(its[2])*time.Second + time.Duration(its[3])
}

// TestAlarmTimerfd: on Linux NewAlarm runs on a timerfd, and the kernel's
// timer is what the alarm says, so that an idle process is woken for no
// expiry it no longer wants: a Reset arms it for what was asked, a later
// Reset replaces an earlier expiry in the kernel too (no wake-up at the
// replaced one), and Stop disarms it.
func TestAlarmTimerfd(t *testing.T) {
	a := NewAlarm()
	defer a.Close()
	if a.t != nil {
		t.Fatal("NewAlarm fell back to a time.Timer: the timerfd could not be made")
	}
	if got := kernelLeft(t, a); got != 0 {
		t.Errorf("a new alarm's timerfd is armed for %v, want disarmed", got)
	}

	a.Reset(10 * time.Second)
	if got := kernelLeft(t, a); got <= 0 || got > 10*time.Second {
		t.Errorf("after Reset(10s) the timerfd expires in %v, want within (0, 10s]", got)
	}

	a.Reset(10 * time.Millisecond)
	a.Reset(time.Hour)
	if got := kernelLeft(t, a); got <= 59*time.Minute || got > time.Hour {
		t.Errorf("after Reset(10ms) then Reset(1h) the timerfd expires in %v, want about an hour", got)
	}

	a.Stop()
	if got := kernelLeft(t, a); got != 0 {
		t.Errorf("after Stop the timerfd expires in %v, want disarmed", got)
	}
}
