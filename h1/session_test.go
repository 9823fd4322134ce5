package h1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/queue-dev/queue/internal/testnet"
)

// blockingServer serves requests whose handler, for target /block, tells
// entered, waits for release and then makes a round trip to an echo
// socket, as the proxy's handler does to its upstream: while it waits for
// the echo the runtime polls the network, and takes in what came on the
// client's socket meanwhile. Every handler echoes its target, and the body
// it read when there was one (X-Body).
func blockingServer(t *testing.T, entered chan<- struct{}, release <-chan struct{}) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	return startServer(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/block" {
			entered <- struct{}{}
			<-release
			e, err := net.DialTimeout("tcp", ln.Addr().String(), failAfter)
			if err != nil {
				t.Errorf("dial echo: %v", err)
				return
			}
			defer e.Close()
			e.SetDeadline(time.Now().Add(failAfter))
			var b [1]byte
			if _, err := e.Write(b[:]); err != nil {
				t.Errorf("echo: %v", err)
			} else if _, err := io.ReadFull(e, b[:]); err != nil {
				t.Errorf("echo: %v", err)
			}
		}
		w.Header().Set("X-Target", r.URL.Path)
		if b, err := io.ReadAll(r.Body); err != nil || len(b) > 0 {
			w.Header().Set("X-Body", fmt.Sprintf("%q %v", b, err))
		}
	})})
}

// TestSessionBytesDuringHandler: bytes that reach the socket while a
// request without a body, or with a body that came whole with its head, is
// served inside a read session (a pipelined request, the client's
// half-close) are seen after its response, though the session does not
// read before it waits (session.go).
func TestSessionBytesDuringHandler(t *testing.T) {
	t.Parallel()
	for _, block := range []struct{ name, req, body string }{
		{"no body", "GET /block HTTP/1.1\r\nHost: a\r\n\r\n", ""},
		{"held body", "POST /block HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello", `"hello" <nil>`},
	} {
		t.Run(block.name, func(t *testing.T) {
			t.Parallel()
			testSessionBytesDuringHandler(t, block.req, block.body)
		})
	}
}

func testSessionBytesDuringHandler(t *testing.T, blockReq, blockBody string) {
	// blocked answers a first request, so that the next is served in a
	// session that has drained the socket before, then sends blockReq (to
	// /block) and returns once its handler runs; release lets it finish.
	blocked := func(t *testing.T) (c *net.TCPConn, br *bufio.Reader, release func()) {
		entered := make(chan struct{}, 1)
		wait, release := testnet.Releaser(t)
		c = dial(t, blockingServer(t, entered, wait))
		c.SetDeadline(time.Now().Add(failAfter))
		br = bufio.NewReader(c)
		io.WriteString(c, "GET /first HTTP/1.1\r\nHost: a\r\n\r\n")
		if _, err := readReply(br, http.MethodGet); err != nil {
			t.Fatalf("first: %v", err)
		}
		io.WriteString(c, blockReq)
		testnet.Recv(t, entered, failAfter, "/block in its handler")
		return c, br, release
	}
	t.Run("pipelined request", func(t *testing.T) {
		t.Parallel()
		c, br, release := blocked(t)
		io.WriteString(c, "GET /after HTTP/1.1\r\nHost: a\r\n\r\n")
		release()
		for _, want := range []string{"/block", "/after"} {
			x, err := readReply(br, http.MethodGet)
			if err != nil {
				t.Fatalf("response for %s: %v", want, err)
			}
			if got := x.res.Header.Get("X-Target"); got != want {
				t.Errorf("response for %q, want %q", got, want)
			}
			if want == "/block" {
				if got := x.res.Header.Get("X-Body"); got != blockBody {
					t.Errorf("/block read body %s, want %s", got, blockBody)
				}
			}
		}
	})
	t.Run("half-close", func(t *testing.T) {
		t.Parallel()
		c, br, release := blocked(t)
		if err := c.CloseWrite(); err != nil {
			t.Fatal(err)
		}
		release()
		if x, err := readReply(br, http.MethodGet); err != nil || x.res.Header.Get("X-Target") != "/block" || x.res.Header.Get("X-Body") != blockBody {
			t.Fatalf("response: %+v, %v", x.res, err)
		}
		if !closedByPeer(t, c, br) {
			t.Errorf("connection left open after the client's half-close")
		}
	})
}

// TestSessionHijack: a handler that hijacks a request without a body or
// with one that came whole, and without Upgrade or CONNECT (one served
// inside a read session), gets an error, not a connection it could never
// read, and the response goes out as usual.
func TestSessionHijack(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, req string }{
		{"no body", "GET / HTTP/1.1\r\nHost: a\r\n\r\n"},
		{"held body", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			testSessionHijack(t, tt.req)
		})
	}
}

func testSessionHijack(t *testing.T, req string) {
	got := make(chan error, 1)
	addr := startServer(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _, err := http.NewResponseController(w).Hijack()
		got <- err
		io.WriteString(w, "not hijacked")
	})})
	c := dial(t, addr)
	c.SetDeadline(time.Now().Add(failAfter))
	io.WriteString(c, req)
	x, err := readReply(bufio.NewReader(c), http.MethodGet)
	if err != nil {
		t.Fatal(err)
	}
	if err := testnet.Recv(t, got, failAfter, "the handler's Hijack"); !errors.Is(err, errHijackInSession) {
		t.Errorf("Hijack = %v, want %v", err, errHijackInSession)
	}
	if !strings.Contains(string(x.body), "not hijacked") {
		t.Errorf("body %q", x.body)
	}
}

// TestHijackKeepAlive: a connection from a listener without TCP
// keep-alive (queue's) gets it once hijacked, when it may carry nothing
// for hours; before that, it has none.
func TestHijackKeepAlive(t *testing.T) {
	t.Parallel()
	lc := net.ListenConfig{KeepAlive: -1}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// keepAlive runs on the handler's goroutine: it reports failures as
	// errors, for the test's goroutine to fail on.
	keepAlive := func(nc net.Conn) (int, error) {
		tc, ok := nc.(*net.TCPConn)
		if cc, isCounted := nc.(*countedConn); isCounted {
			tc, ok = cc.Conn.(*net.TCPConn)
		}
		if !ok {
			return -1, fmt.Errorf("%T is not a TCP connection", nc)
		}
		raw, err := tc.SyscallConn()
		if err != nil {
			return -1, err
		}
		v := -1
		cerr := raw.Control(func(fd uintptr) {
			v, err = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_KEEPALIVE)
		})
		return v, errors.Join(cerr, err)
	}
	type result struct {
		before, after int
		err           error
	}
	got := make(chan result, 1)
	var s *Server
	s = &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var c *conn
		s.mu.Lock()
		for x := range s.conns {
			c = x
		}
		s.mu.Unlock()
		if c == nil {
			got <- result{err: errors.New("the server counts no connection")}
			return
		}
		before, err := keepAlive(c.closer)
		if err != nil {
			got <- result{err: fmt.Errorf("before the hijack: %w", err)}
			return
		}
		nc, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			got <- result{err: fmt.Errorf("hijack: %w", err)}
			return
		}
		defer nc.Close()
		after, err := keepAlive(nc)
		if err != nil {
			err = fmt.Errorf("after the hijack: %w", err)
		}
		got <- result{before, after, err}
	})}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		s.Close()
		select {
		case <-done:
		case <-time.After(failAfter):
			t.Errorf("Serve did not return within %v of Close", failAfter)
		}
	})
	c := dial(t, ln.Addr().String())
	c.SetDeadline(time.Now().Add(failAfter))
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n")
	r := testnet.Recv(t, got, failAfter, "word from the hijacking handler")
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.before != 0 || r.after != 1 {
		t.Errorf("SO_KEEPALIVE before the hijack %d, after %d; want 0, 1", r.before, r.after)
	}
}
