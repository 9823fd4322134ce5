package h1

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
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(s)
		got <- b
	}()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
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
	if b := <-got; !bytes.Equal(b, append(want, "end"...)) {
		t.Errorf("read %d bytes, want %d in order", len(b), len(want)+3)
	}
}

// TestVecWriterErrors: a write past the connection's deadline fails with
// the deadline error and a write to a reset connection with the socket's
// error, as net.Conn's Write would.
func TestVecWriterErrors(t *testing.T) {
	t.Parallel()
	c, s := tcpPair(t)
	raw, _ := c.SyscallConn()
	var v VecWriter
	v.Reset(raw)
	// Nobody reads s: the socket fills, then the deadline ends the wait.
	c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	big := make([]byte, 8<<20)
	if _, err := v.Write(big); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("full socket past its deadline: %v, want a deadline error", err)
	}
	c.SetWriteDeadline(time.Time{})
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
	raw, _ := s.SyscallConn()
	read := func() (n int, again bool, err error) {
		buf := make([]byte, 16)
		raw.Control(func(fd uintptr) { n, again, err = ReadFD(fd, buf) })
		return
	}
	c.Write([]byte("hello"))
	// Wait until the bytes are there, through the netpoller.
	raw.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, _ := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return n > 0
	})
	if n, again, err := read(); n != 5 || again || err != nil {
		t.Errorf("read: %d %v %v, want 5 false nil", n, again, err)
	}
	if n, again, err := read(); n != 0 || !again || err != nil {
		t.Errorf("read of an empty socket: %d %v %v, want 0 true nil", n, again, err)
	}
	c.Close()
	raw.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return n == 0 && err == nil
	})
	if n, again, err := read(); n != 0 || again || err != io.EOF {
		t.Errorf("read at end of file: %d %v %v, want 0 false EOF", n, again, err)
	}
	if n, again, err := ReadFD(0, nil); n != 0 || again || err != nil {
		t.Errorf("empty read: %d %v %v", n, again, err)
	}
}

// TestDeadline: a deadline is at least d away, at most d plus its grain
// (a 16th of d, from a millisecond to a second), on the grain, and the
// same for two times within one grain, so that setting it again is
// skipped.
func TestDeadline(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 11, 25, 21, 0, 0, 123456789, time.UTC)
	for _, d := range []time.Duration{time.Millisecond, 10 * time.Millisecond, 10 * time.Second, 5 * time.Minute} {
		g := min(max(d/16, time.Millisecond), time.Second)
		for _, off := range []time.Duration{0, 1, g / 3, g - 1, g, 7*g + 5} {
			now := base.Add(off)
			got := Deadline(now, d)
			if got.Before(now.Add(d)) || got.After(now.Add(d+g)) {
				t.Errorf("Deadline(%v, %v) = %v, want within [now+d, now+d+%v]", now, d, got, g)
			}
			if got.UnixNano()%int64(g) != 0 {
				t.Errorf("Deadline(%v, %v) = %v, not on a %v grain", now, d, got, g)
			}
		}
		start := time.Unix(0, base.UnixNano()/int64(g)*int64(g)) // a grain's start
		a := Deadline(start, d)
		if b := Deadline(start.Add(g-1), d); a != b {
			t.Errorf("Deadline(%v): %v and %v within one grain", d, a, b)
		}
	}
}
