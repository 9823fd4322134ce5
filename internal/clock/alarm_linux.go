package clock

import (
	"os"
	"syscall"
	"time"
	"unsafe"
)

// alarmFD is an Alarm's timerfd, waited on by the netpoller from a
// goroutine of its own. Its system calls are raw: the runtime's
// system-call entry wakes sysmon from its sleep, which is what an Alarm
// is for avoiding.
type alarmFD struct {
	f  *os.File
	fd uintptr
}

// open makes the timerfd and starts the goroutine that calls fired at
// each expiry; false when it cannot.
func (a *alarmFD) open(fired func()) bool {
	fd, _, e := syscall.RawSyscall(syscall.SYS_TIMERFD_CREATE, 1 /* CLOCK_MONOTONIC */, syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if e != 0 {
		return false
	}
	f := os.NewFile(fd, "alarm")
	// SetReadDeadline fails on a file the netpoller does not watch, which
	// Read below could not wait on.
	rc, err := f.SyscallConn()
	if err == nil {
		err = f.SetReadDeadline(time.Time{})
	}
	if err != nil {
		f.Close()
		return false
	}
	a.f, a.fd = f, fd
	// One read of the netpoller for the goroutine's life: each call of
	// the function reads an expiry and tells fired, then returns false to
	// wait for the next, until Close ends the wait. (A new Read would
	// first forget an expiry that came between the two.)
	go rc.Read(func(fd uintptr) bool {
		var n [8]byte
		_, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&n[0])), 8)
		switch e {
		case 0:
			fired()
		case syscall.EAGAIN, syscall.EINTR:
		default:
			return true // not a timerfd's error: give up rather than spin
		}
		return false
	})
	return true
}

// set arms the timerfd to expire after d (at once when d is 0), or
// disarms it when d < 0.
func (a *alarmFD) set(d time.Duration) {
	var its [4]int64 // struct itimerspec: interval, then value
	switch {
	case d < 0:
	case d == 0:
		its[3] = 1 // zero would disarm
	default:
		its[2], its[3] = int64(d/time.Second), int64(d%time.Second)
	}
	syscall.RawSyscall6(syscall.SYS_TIMERFD_SETTIME, a.fd, 0, uintptr(unsafe.Pointer(&its[0])), 0, 0, 0)
}

// close ends the goroutine and closes the timerfd.
func (a *alarmFD) close() { a.f.Close() }
