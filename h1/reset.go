package h1

import (
	"net"
	"syscall"
)

// reset closes nc with a reset (SO_LINGER 0), not a FIN: the client learns
// at once that nothing will be answered, and no socket is left in
// TIME-WAIT or LAST-ACK on either side.
func reset(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	nc.Close()
}

// peerClosed reports whether the client of a connection just accepted has
// already closed its side: the socket is in CLOSE-WAIT (TCP_INFO's first
// byte). One getsockopt; false when it cannot be asked.
func peerClosed(nc net.Conn) bool {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return false
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return false
	}
	closed := false
	rc.Control(func(fd uintptr) {
		// The kernel copies as much of struct tcp_info as asked for: four
		// bytes, tcpi_state first.
		v, err := syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_INFO)
		closed = err == nil && v&0xff == tcpCloseWait
	})
	return closed
}

// tcpCloseWait is TCP_CLOSE_WAIT of the kernel's tcp_states.h.
const tcpCloseWait = 8
