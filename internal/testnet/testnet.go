// Package testnet holds what the tests of several packages need of the
// network, and a buffer their logs can go to, so that each is written once. It is imported by tests only.
package testnet

import (
	"bytes"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"
)

// ReservePort returns a loopback address nothing listens on, and holds it
// until the test ends: a TCP socket bound to it that does not listen, so
// that a connect there is refused, and that keeps the kernel from giving
// the port to a listener that asks for any port (a bind to port 0 skips
// a port that a socket is bound to). A port merely listened on and closed
// would not be kept: another test's listener may take it meanwhile, and a
// test that expects its connects refused would then reach that listener.
// A test listens on the address itself with net.Listen: the held socket
// and Go's listeners both set SO_REUSEADDR, and the held one does not
// listen.
func ReservePort(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	syscall.CloseOnExec(fd)
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
}

// Junk writes junk to nc from its own goroutine, 4 KiB every 5 ms, for at
// most 3 s, and sends when a write failed (the server closed the
// connection), or the zero time if none did: a client that goes on
// sending whatever the server answered.
func Junk(nc net.Conn) <-chan time.Time {
	failed := make(chan time.Time, 1)
	go func() {
		junk := bytes.Repeat([]byte{0xff}, 4<<10)
		tick := time.NewTicker(5 * time.Millisecond) // a pace for the junk, not a synchronisation
		defer tick.Stop()
		for range 600 {
			if _, err := nc.Write(junk); err != nil {
				failed <- time.Now()
				return
			}
			<-tick.C
		}
		failed <- time.Time{}
	}()
	return failed
}
