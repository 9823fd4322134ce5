package netio

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// failAfter bounds every wait of these tests: the failure bound only, never
// waited out by a passing test.
const failAfter = 10 * time.Second

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// rawOf returns c's syscall.RawConn.
func rawOf(t *testing.T, c *net.TCPConn) syscall.RawConn {
	t.Helper()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestVecWriter: every byte of many buffers (more than one writev takes,
// empty ones among them) arrives in order through a socket whose send
// buffer is far smaller than the data, so that writes are partial and the
// writer waits for writability in between.
func TestVecWriter(t *testing.T) {
	t.Parallel()
	c, s := tcpPair(t)
	if err := c.SetWriteBuffer(4096); err != nil {
		t.Fatal(err)
	}
	var bufs [][]byte
	var want []byte
	for i := range 21 {
		b := bytes.Repeat([]byte{byte('a' + i)}, 1+i*7919)
		if i%5 == 0 {
			b = nil
		}
		bufs = append(bufs, b)
		want = append(want, b...)
	}
	// The deadlines make a writer or a reader that waits for ever fail.
	c.SetWriteDeadline(time.Now().Add(failAfter))
	s.SetReadDeadline(time.Now().Add(failAfter))
	type read struct {
		b   []byte
		err error
	}
	got := make(chan read, 1)
	go func() {
		b, err := io.ReadAll(s)
		got <- read{b, err}
	}()
	raw := rawOf(t, c)
	var v VecWriter
	v.Reset(raw)
	n, err := v.Writev(bufs)
	if err != nil || n != int64(len(want)) {
		t.Fatalf("Writev: %d, %v; want %d, nil", n, err, len(want))
	}
	if m, err := v.Write([]byte("end")); err != nil || m != 3 {
		t.Fatalf("Write: %d, %v", m, err)
	}
	c.CloseWrite()
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("read: %v", r.err)
		}
		if !bytes.Equal(r.b, append(want, "end"...)) {
			t.Errorf("read %d bytes, want %d in order", len(r.b), len(want)+3)
		}
	case <-time.After(2 * failAfter):
		t.Fatalf("the reader did not end within %v", 2*failAfter)
	}
}

// TestVecWriterErrors: a write past the connection's deadline fails with
// the deadline error and a write to a reset connection with the socket's
// error, as net.Conn's Write would.
func TestVecWriterErrors(t *testing.T) {
	t.Parallel()
	c, s := tcpPair(t)
	raw := rawOf(t, c)
	var v VecWriter
	v.Reset(raw)
	// Nobody reads s: the socket fills, then the deadline ends the wait.
	c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	big := make([]byte, 8<<20)
	if _, err := v.Write(big); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("full socket past its deadline: %v, want a deadline error", err)
	}
	// The socket is still full: the writes below wait until the reset
	// arrives, which the deadline bounds.
	c.SetWriteDeadline(time.Now().Add(failAfter))
	s.SetLinger(0)
	s.Close() // a reset
	var err error
	for range 100 {
		if _, err = v.Write([]byte("x")); err != nil {
			break
		}
	}
	if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
		t.Errorf("write to a reset connection: %v, want ECONNRESET or EPIPE", err)
	}
	c.Close()
	if _, err := v.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Errorf("write to a closed connection: %v, want net.ErrClosed", err)
	}
}

// TestReadFD: bytes, then "again" when nothing is there, then end of file.
func TestReadFD(t *testing.T) {
	t.Parallel()
	c, s := tcpPair(t)
	raw := rawOf(t, s)
	// The waits for readability below fail at the deadline.
	s.SetReadDeadline(time.Now().Add(failAfter))
	read := func() (n int, again bool, err error) {
		buf := make([]byte, 16)
		raw.Control(func(fd uintptr) { n, again, err = ReadFD(fd, buf) })
		return
	}
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	// Wait until the bytes are there, through the netpoller.
	if err := raw.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, _ := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return n > 0
	}); err != nil {
		t.Fatalf("waiting for the bytes: %v", err)
	}
	if n, again, err := read(); n != 5 || again || err != nil {
		t.Errorf("read: %d %v %v, want 5 false nil", n, again, err)
	}
	if n, again, err := read(); n != 0 || !again || err != nil {
		t.Errorf("read of an empty socket: %d %v %v, want 0 true nil", n, again, err)
	}
	c.Close()
	if err := raw.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return n == 0 && err == nil
	}); err != nil {
		t.Fatalf("waiting for the end of file: %v", err)
	}
	if n, again, err := read(); n != 0 || again || err != io.EOF {
		t.Errorf("read at end of file: %d %v %v, want 0 false EOF", n, again, err)
	}
	if n, again, err := ReadFD(0, nil); n != 0 || again || err != nil {
		t.Errorf("empty read: %d %v %v", n, again, err)
	}
}

// TestPeerGoneCloseWait: while the client is there neither reports it
// gone; after its FIN, CloseWait does at once, and PeerGone only once the
// bytes it sent before are read; after a reset, PeerGone does.
func TestPeerGoneCloseWait(t *testing.T) {
	t.Parallel()
	c, s := tcpPair(t)
	raw := rawOf(t, s)
	var buf [1]byte
	lookAt := func(raw syscall.RawConn) (gone, closeWait bool) {
		raw.Control(func(fd uintptr) { gone, closeWait = PeerGone(fd, &buf), CloseWait(fd) })
		return
	}
	look := func() (bool, bool) { return lookAt(raw) }
	// until looks until cond holds: what the client did reaches the
	// server's socket on the kernel's time, within failAfter.
	until := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(failAfter); !cond(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal(what)
			}
		}
	}
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if gone, cw := look(); gone || cw {
		t.Fatalf("client there: PeerGone %v, CloseWait %v; want false, false", gone, cw)
	}
	c.CloseWrite()
	until("the server's socket never reached CLOSE-WAIT", func() bool { _, cw := look(); return cw })
	if gone, _ := look(); gone {
		t.Error("PeerGone with a byte still unread: want false")
	}
	s.SetReadDeadline(time.Now().Add(failAfter))
	if _, err := io.ReadFull(s, buf[:]); err != nil {
		t.Fatal(err)
	}
	if gone, _ := look(); !gone {
		t.Error("PeerGone after the client's FIN, nothing unread: want true")
	}

	c2, s2 := tcpPair(t)
	c2.SetLinger(0)
	c2.Close()
	raw2 := rawOf(t, s2)
	var cw bool
	until("PeerGone never saw the client's reset", func() bool {
		var gone bool
		gone, cw = lookAt(raw2)
		return gone
	})
	if cw {
		t.Error("CloseWait after a reset: want false")
	}
}
