package probe

import (
	"errors"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestConnectNow: a literal address is probed by the raw fast path, which
// reaches the listener or reports the refusal as the dialer would; a host
// name is left to the dialer.
func TestConnectNow(t *testing.T) {
	// The fast path may step aside when the kernel defers the handshake
	// (a loaded machine): one try in ten must take it.
	connectNow := func(addr string) (bool, error) {
		for range 9 {
			if ok, err := connectNow(addr); ok {
				return ok, err
			}
		}
		return connectNow(addr)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ok, err := connectNow(ln.Addr().String())
	if !ok || err != nil {
		t.Fatalf("connectNow(listening) = %v, %v; want the fast path, no error", ok, err)
	}
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(5 * time.Second))
	c, err := ln.Accept()
	if err != nil {
		t.Fatalf("the listener saw no connection: %v", err)
	}
	c.Close()

	port := ln.Addr().(*net.TCPAddr).Port
	if ok, err := connectNow("localhost:" + strconv.Itoa(port)); ok || err != nil {
		t.Errorf("connectNow(host name) = %v, %v; want the dialer's turn", ok, err)
	}

	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := closed.Addr().String()
	closed.Close()
	ok, err = connectNow(addr)
	var oe *net.OpError
	if !ok || !errors.Is(err, syscall.ECONNREFUSED) || !errors.As(err, &oe) || oe.Op != "dial" {
		t.Errorf("connectNow(closed port) = %v, %v; want the fast path and the dialer's refusal", ok, err)
	}
}
