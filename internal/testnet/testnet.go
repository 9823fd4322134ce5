// Package testnet holds what the tests of several packages need of the
// network, a buffer their logs can go to, and their bounded waits on
// channels, so that each is written once. It is imported by tests only.
package testnet

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
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
	return reserve(t, syscall.AF_INET)
}

// ReservePort6 is ReservePort on the IPv6 loopback address, [::1].
func ReservePort6(t testing.TB) string {
	t.Helper()
	return reserve(t, syscall.AF_INET6)
}

// reserve binds a TCP socket of family (AF_INET or AF_INET6) to a free
// loopback port, holds it until the test ends, and returns its address.
func reserve(t testing.TB, family int) string {
	t.Helper()
	fd, err := syscall.Socket(family, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	syscall.CloseOnExec(fd)
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		t.Fatal(err)
	}
	var sa syscall.Sockaddr = &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}
	if family == syscall.AF_INET6 {
		sa = &syscall.SockaddrInet6{Addr: [16]byte{15: 1}}
	}
	if err := syscall.Bind(fd, sa); err != nil {
		t.Fatal(err)
	}
	bound, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	switch a := bound.(type) {
	case *syscall.SockaddrInet4:
		return fmt.Sprintf("127.0.0.1:%d", a.Port)
	case *syscall.SockaddrInet6:
		return fmt.Sprintf("[::1]:%d", a.Port)
	}
	t.Fatalf("socket bound to %T", bound)
	return ""
}

// Junk writes junk to nc from its own goroutine, 4 KiB every 5 ms, and
// sends when a write failed (the server closed the connection), or the
// zero time if none did within 30 s (a failure bound, far above any
// linger a test waits for, that a passing test never waits out): a client
// that goes on sending whatever the server answered. The writes have a
// deadline, so that a server that neither reads nor closes does not hold
// the goroutine for ever; a write that fails on it counts as none failed.
func Junk(nc net.Conn) <-chan time.Time {
	const bound = 30 * time.Second
	failed := make(chan time.Time, 1)
	go func() {
		junk := bytes.Repeat([]byte{0xff}, 4<<10)
		tick := time.NewTicker(5 * time.Millisecond) // a pace for the junk, not a synchronisation
		defer tick.Stop()
		end := time.Now().Add(bound)
		nc.SetWriteDeadline(end)
		for i := 0; i < int(bound/(5*time.Millisecond)) && time.Now().Before(end); i++ {
			if _, err := nc.Write(junk); err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					break
				}
				failed <- time.Now()
				return
			}
			<-tick.C
		}
		failed <- time.Time{}
	}()
	return failed
}

// Recv returns the next value on ch, and fails the test if none comes
// within bound: the failure bound only, never waited out by a passing
// test. what names the value awaited, for the failure message ("timed out
// after 5s waiting for the handler to return"). Call it from the test's
// own goroutine, as t.Fatal must be.
func Recv[T any](t testing.TB, ch <-chan T, bound time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(bound):
		t.Fatalf("timed out after %v waiting for %s", bound, what)
		panic("unreachable")
	}
}

// Releaser returns a channel for handlers to wait on, and the function
// that closes it, once however often it is called. The test's cleanup
// calls it too, so that a test that fails before releasing leaves no
// handler waiting for ever. That cleanup runs after the cleanups
// registered later (a server's Close, say); a test whose later cleanup
// waits for the handlers registers the function again, after it.
func Releaser(t testing.TB) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(ch) }) }
	t.Cleanup(release)
	return ch, release
}

// WaitPeerClosed waits, up to bound, until the client's FIN has reached
// the server's end of the loopback IPv4 connection c (a client's): that
// end is no longer ESTABLISHED in the kernel's /proc/net/tcp (CLOSE-WAIT,
// or later if the server has closed it too), whether or not the server
// has accepted it. It polls the table, where there is no event to wait on.
func WaitPeerClosed(t testing.TB, c net.Conn, bound time.Duration) {
	t.Helper()
	server := c.RemoteAddr().(*net.TCPAddr).Port
	client := c.LocalAddr().(*net.TCPAddr).Port
	established := fmt.Sprintf("0100007F:%04X 0100007F:%04X 01 ", server, client)
	deadline := time.Now().Add(bound)
	for {
		b, err := os.ReadFile("/proc/net/tcp")
		if err != nil {
			t.Fatalf("read /proc/net/tcp: %v", err)
		}
		if !strings.Contains(string(b), established) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server's end of the connection from port %d stayed ESTABLISHED", client)
		}
		time.Sleep(time.Millisecond)
	}
}
