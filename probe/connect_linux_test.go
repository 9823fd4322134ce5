package probe

import (
	"errors"
	"net"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/queue-dev/queue/internal/testnet"
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

	// A port held for the test, that nothing listens on: a port merely
	// closed may be taken meanwhile by another test's listener.
	ok, err = connectNow(testnet.ReservePort(t))
	var oe *net.OpError
	if !ok || !errors.Is(err, syscall.ECONNREFUSED) || !errors.As(err, &oe) || oe.Op != "dial" {
		t.Errorf("connectNow(closed port) = %v, %v; want the fast path and the dialer's refusal", ok, err)
	}
}

// TestConnectNowReusesRefused: the socket of a refused probe is kept and
// connects again, refused again while nothing listens and through to a
// listener; IPv6 keeps its own.
func TestConnectNowReusesRefused(t *testing.T) {
	for _, network := range []string{"tcp4", "tcp6"} {
		t.Run(network, func(t *testing.T) {
			// A port held for the test, that nothing listens on.
			var host, addr string
			var spare *atomic.Int64
			if network == "tcp4" {
				host, addr, spare = "127.0.0.1", testnet.ReservePort(t), &spares[0]
			} else {
				host, addr, spare = "::1", testnet.ReservePort6(t), &spares[1]
			}
			var fds []int64
			for range 3 {
				ok, err := connectNow(addr)
				if ok && !errors.Is(err, syscall.ECONNREFUSED) {
					t.Fatalf("connectNow(closed port) = %v, %v; want the refusal", ok, err)
				}
				if ok {
					fds = append(fds, spare.Load())
				}
			}
			if len(fds) < 2 || fds[0] == 0 || fds[len(fds)-1] != fds[0] {
				t.Fatalf("spare sockets after each refusal: %v; want one socket kept and used again", fds)
			}
			// A listener, on another port.
			ln, err := net.Listen(network, net.JoinHostPort(host, "0"))
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			addr = ln.Addr().String()
			kept := spare.Load()
			for range 10 {
				if ok, err := connectNow(addr); ok {
					if err != nil {
						t.Fatalf("connectNow(listening again) = %v; want through", err)
					}
					break
				}
			}
			if kept == 0 || spare.Load() != 0 {
				t.Errorf("spare before and after connecting: %d, %d; want one taken, none kept", kept, spare.Load())
			}
			ln.(*net.TCPListener).SetDeadline(time.Now().Add(5 * time.Second))
			c, err := ln.Accept()
			if err != nil {
				t.Fatalf("the listener saw no connection from the kept socket: %v", err)
			}
			c.Close()
		})
	}
}
