package probe

import (
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// connectNow tries a TCP probe of a literal IP address with four raw
// system calls: a non-blocking socket, connect twice and close. To a
// listener on this host the kernel completes the handshake, or refuses it,
// within the first connect (see below), so the probe needs no wait in the
// netpoller and none of the dialer's other calls (socket options,
// addresses, SO_ERROR). A raw call
// also skips the runtime's system-call state, whose entry wakes its
// monitor thread (sysmon) from the deep sleep of an idle process: a
// futex wake-up and a run of short polls on another thread, which on an
// idle pod is most of what a probe a second costs. ok is false when the
// fast path does not apply (a host name, an empty host, a connect still in
// progress, any surprise): the caller then dials as usual.
// spares holds a refused socket of each family (IPv4, IPv6) for the next
// probe to connect again, or 0.
var spares [2]atomic.Int64

func connectNow(addr string) (ok bool, err error) {
	ap, perr := netip.ParseAddrPort(addr)
	if perr != nil || ap.Addr().Zone() != "" {
		return false, nil
	}
	var (
		sa4    syscall.RawSockaddrInet4
		sa6    syscall.RawSockaddrInet6
		family uintptr
		sa     unsafe.Pointer
		salen  uintptr
	)
	port := ap.Port()
	if a := ap.Addr().Unmap(); a.Is4() {
		sa4.Family = syscall.AF_INET
		sa4.Addr = a.As4()
		*(*[2]byte)(unsafe.Pointer(&sa4.Port)) = [2]byte{byte(port >> 8), byte(port)}
		family, sa, salen = syscall.AF_INET, unsafe.Pointer(&sa4), unsafe.Sizeof(sa4)
	} else {
		sa6.Family = syscall.AF_INET6
		sa6.Addr = a.As16()
		*(*[2]byte)(unsafe.Pointer(&sa6.Port)) = [2]byte{byte(port >> 8), byte(port)}
		family, sa, salen = syscall.AF_INET6, unsafe.Pointer(&sa6), unsafe.Sizeof(sa6)
	}
	spare := &spares[0]
	if family == syscall.AF_INET6 {
		spare = &spares[1]
	}
	fd := uintptr(spare.Swap(0))
	if fd == 0 {
		var e syscall.Errno
		fd, _, e = syscall.RawSyscall(syscall.SYS_SOCKET, family, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
		if e != 0 {
			return false, nil
		}
	}
	_, _, e := syscall.RawSyscall(syscall.SYS_CONNECT, fd, uintptr(sa), salen)
	if e == syscall.EINPROGRESS {
		// The handshake ran as connect sent the SYN, but the kernel
		// applies the answer to the socket only as connect lets go of
		// it: asked again, connect says how it ended (0, or the refusal),
		// or EALREADY if it has not.
		_, _, e = syscall.RawSyscall(syscall.SYS_CONNECT, fd, uintptr(sa), salen)
	}
	// A refused socket is back where socket left it (unbound, no error
	// pending), and Linux lets it connect again: it is kept for the next
	// probe, which then skips socket and close, a third of what a refused
	// probe costs the kernel.
	if e != syscall.ECONNREFUSED || !spare.CompareAndSwap(0, int64(fd)) {
		syscall.RawSyscall(syscall.SYS_CLOSE, fd, 0, 0)
	}
	switch e {
	case 0:
		return true, nil
	case syscall.ECONNREFUSED, syscall.ENETUNREACH, syscall.EHOSTUNREACH, syscall.EADDRNOTAVAIL:
		// What the dialer would say, in its words.
		return true, &net.OpError{Op: "dial", Net: "tcp", Addr: net.TCPAddrFromAddrPort(ap), Err: os.NewSyscallError("connect", e)}
	}
	return false, nil // EALREADY (not on this host, or the backlog is full), EINTR, ...
}
