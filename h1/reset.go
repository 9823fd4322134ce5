package h1

import (
	"net"
	"os"
	"syscall"

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
	closed := false
	control(nc, func(fd uintptr) { closed = netio.CloseWait(fd) })
	return closed
}

// control runs f on the socket of x, a *net.TCPConn or a *net.TCPListener,
// in its syscall.RawConn's Control; it does nothing for anything else.
func control(x any, f func(fd uintptr)) {
	var sc syscall.Conn
	switch x := x.(type) {
	case *net.TCPConn:
		sc = x
	case *net.TCPListener:
		sc = x
	default:
		return
	}
	if rc, err := sc.SyscallConn(); err == nil {
		rc.Control(f)
	}
}

// acceptLive is the accept while overloaded: it resets, with raw calls
// (netio.AcceptGone), the connections at the head of ln's backlog whose
// clients have already gone, and returns the first live one, or nil when
// the backlog ran empty (or ln is not TCP): the caller's own Accept then
// waits for the next. The connections it resets do not take a turn of the
// accept gate: after the overload they are most of the backlog (4,080 to
// 7,509 after 10 s at 3000 requests a second, docs/decisions.md D27), and
// one gate wait each held the live ones behind them for seconds.
//
// The live connection, accepted raw, becomes a net.Conn through
// net.FileConn, which costs a dup and the lookups of its addresses; that
// is paid only while overloaded, for the connections served.
func acceptLive(ln net.Listener) net.Conn {
	live := -1
	control(ln, func(fd uintptr) { live = netio.AcceptGone(fd) })
	if live < 0 {
		return nil
	}
	f := os.NewFile(uintptr(live), "") // blocking: not given to the poller
	nc, err := net.FileConn(f)
	f.Close()
	if err != nil { // out of descriptors for the dup: the client is dropped
		return nil
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true) // as net's Accept sets it
	}
	return nc
}
