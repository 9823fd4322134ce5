package h1

import (
	"net"

	"github.com/queue-dev/queue/internal/netio"
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
// already closed its side (netio.CloseWait); false when it cannot be
// asked.
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
	rc.Control(func(fd uintptr) { closed = netio.CloseWait(fd) })
	return closed
}
