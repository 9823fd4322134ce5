package h2

import (
	"runtime"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// HoldConns locks the mutex of every connection s serves, so that a test
// can keep their read loops inside a frame they have read; the function
// it returns unlocks them.
func HoldConns(s *Server) (unlock func()) {
	conns := s.conns.List()
	for _, c := range conns {
		c.mu.Lock()
	}
	return func() {
		for _, c := range conns {
			c.mu.Unlock()
		}
	}
}

// SocketStates reports, for each plain TCP connection s serves, the bytes
// its socket holds unread and whether the peer ended it (a FIN or a reset
// came: TCP_CLOSE_WAIT or TCP_CLOSE).
func SocketStates(s *Server) (unread []int, ended []bool) {
	for _, c := range s.conns.List() {
		if c.rd.raw == nil {
			continue
		}
		c.rd.raw.Control(func(fd uintptr) {
			var n int32
			syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&n)))
			var info [104]byte // struct tcp_info; its first byte is the state
			size := uint32(len(info))
			syscall.Syscall6(syscall.SYS_GETSOCKOPT, fd, syscall.IPPROTO_TCP, syscall.TCP_INFO,
				uintptr(unsafe.Pointer(&info[0])), uintptr(unsafe.Pointer(&size)), 0)
			const closeWait, closed = 8, 7 // TCP_CLOSE_WAIT, TCP_CLOSE (include/net/tcp_states.h)
			unread = append(unread, int(n))
			ended = append(ended, info[0] == closeWait || info[0] == closed)
		})
	}
	return unread, ended
}

// EndHeld ends every connection s serves as the writer does when a write
// fails (writer.loopLocked): closed, and its socket shut down. The
// connections' mutexes must be held (HoldConns).
func EndHeld(s *Server) {
	for _, c := range s.conns.List() {
		c.endLocked(errClosed)
		c.rd.shutdown(c.nc)
	}
}

// WatchConns counts, in freed, the connections s serves now as the
// garbage collector frees them.
func WatchConns(s *Server, freed *atomic.Int32) int {
	conns := s.conns.List()
	for _, c := range conns {
		runtime.AddCleanup(c, func(*atomic.Int32) { freed.Add(1) }, freed)
	}
	return len(conns)
}
