package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/queue-dev/queue/h1"
	"golang.org/x/net/http2"
)

// Robustness against hostile clients: request smuggling, slow clients and
// floods. Malformed input goes over raw TCP; the upstream records every
// request it sees, so that a smuggled request cannot go unnoticed.

// hostileSmuggled is pipelined behind an ambiguous request: if the upstream
// ever sees its path, queue parsed the connection differently from the
// client's framing.
const hostileSmuggled = "GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n"

// hostileSeen is one request as the upstream saw it.
type hostileSeen struct {
	method, target, proto string
	header                http.Header
	bodyLen               int64
	bodyErr               error
	done                  bool // the handler has read the body
}

// hostileRecorder is an upstream handler that records every request (on
// arrival, before its body is read) and answers "ok".
type hostileRecorder struct {
	mu   sync.Mutex
	reqs []hostileSeen
	n    atomic.Int64
}

func (rec *hostileRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec.n.Add(1)
	rec.mu.Lock()
	i := len(rec.reqs)
	rec.reqs = append(rec.reqs, hostileSeen{method: r.Method, target: r.RequestURI, proto: r.Proto, header: r.Header.Clone()})
	rec.mu.Unlock()
	n, err := io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
	rec.mu.Lock()
	rec.reqs[i].bodyLen, rec.reqs[i].bodyErr, rec.reqs[i].done = n, err, true
	rec.mu.Unlock()
	io.WriteString(w, "ok")
}

func (rec *hostileRecorder) seen() []hostileSeen {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]hostileSeen(nil), rec.reqs...)
}

// hostileExchange writes raw on a fresh connection to addr and reads until
// the server closes the connection or wait passes. closed reports an EOF or
// a reset, as opposed to the deadline.
func hostileExchange(t *testing.T, addr, raw string, wait time.Duration) (out []byte, closed bool) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(wait))
	// The server may refuse before it has read all of raw; a failed write
	// is not the test's concern, what the server answered is.
	c.Write([]byte(raw))
	out, err = io.ReadAll(c)
	return out, !errors.Is(err, os.ErrDeadlineExceeded)
}

// rcvbufDialer returns a dialer that sets SO_RCVBUF to rcvbuf (0: leaves
// the system's) before the handshake: a buffer shrunk on a connected socket
// drops segments that the window advertised earlier had let in, and the
// sender's retransmission backoff then stalls delivery for seconds.
func rcvbufDialer(rcvbuf int) *net.Dialer {
	d := &net.Dialer{Timeout: 2 * time.Second}
	if rcvbuf > 0 {
		d.Control = func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, rcvbuf)
			})
			return errors.Join(err, serr)
		}
	}
	return d
}

// rcvbufOf returns the socket's SO_RCVBUF (what the kernel may hold,
// bookkeeping included), or 0.
func rcvbufOf(nc net.Conn) int {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return 0
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return 0
	}
	var v int
	rc.Control(func(fd uintptr) { v, _ = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF) })
	return v
}

// hostileReply is the first HTTP/1.1 response in a byte stream and what
// came after it.
type hostileReply struct {
	status int // 0: no parsable response
	proto  string
	header http.Header
	body   string
	extra  int // bytes after the first response: a second response, or junk
}

func hostileParse(b []byte) hostileReply {
	r := bytes.NewReader(b)
	br := bufio.NewReader(r)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		return hostileReply{extra: len(b)}
	}
	body, _ := io.ReadAll(res.Body)
	return hostileReply{status: res.StatusCode, proto: res.Proto, header: res.Header, body: string(body), extra: br.Buffered() + r.Len()}
}

func hostileIsTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

// TestSmuggling sends ambiguous or malformed HTTP/1.x requests, most with a
// second request pipelined behind them, and checks that queue either
// refuses (4xx/5xx) or closes the connection right after its one response,
// and that the upstream never sees the pipelined request.
func TestSmuggling(t *testing.T) {
	t.Parallel()
	const post = "POST / HTTP/1.1\r\nHost: a\r\n"
	const chunkedHead = post + "Transfer-Encoding: chunked\r\n\r\n"
	// teCL is a request with both framings: RFC 9112 section 6.3 lets a
	// server reject it, and queue does (400, then close).
	teCL := func(te string) string {
		return post + "Content-Length: 4\r\nTransfer-Encoding: " + te + "\r\n\r\n0\r\n\r\n"
	}
	withHeader := func(line string) string {
		return "GET / HTTP/1.1\r\nHost: a\r\n" + line + "\r\n\r\n"
	}
	noUpgradeHeaders := func(t *testing.T, seen []hostileSeen) {
		if len(seen) != 1 {
			t.Fatalf("upstream saw %d requests, want 1", len(seen))
		}
		for _, k := range []string{"Upgrade", "Http2-Settings"} {
			if v, ok := seen[0].header[k]; ok {
				t.Errorf("upstream saw %s: %q (h2c smuggling)", k, v)
			}
		}
		for _, v := range seen[0].header["Connection"] {
			if strings.Contains(strings.ToLower(v), "upgrade") || strings.Contains(strings.ToLower(v), "http2-settings") {
				t.Errorf("upstream saw Connection: %q", v)
			}
		}
		if got, want := seen[0].proto, "HTTP/1.1"; got != want {
			t.Errorf("upstream proto = %q, want %q", got, want)
		}
	}
	noRequest := func(t *testing.T, seen []hostileSeen) {
		if len(seen) != 0 {
			t.Fatalf("upstream saw %d requests, want none", len(seen))
		}
	}
	cases := []struct {
		name     string
		raw      string
		pipeline bool // send hostileSmuggled right behind raw
		// want is the status wanted; 0: any 4xx/5xx, or a lower status
		// after which the connection closes.
		want  int
		check func(t *testing.T, seen []hostileSeen)
	}{
		// Content-Length together with Transfer-Encoding.
		{name: "CL shorter than the chunked body", raw: teCL("chunked"), pipeline: true, want: 400, check: noRequest},
		{name: "CL covering the pipelined request", raw: post + "Content-Length: " + strconv.Itoa(5+len(hostileSmuggled)) + "\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", pipeline: true, want: 400, check: noRequest},
		{name: "TE before CL", raw: post + "Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n", pipeline: true, want: 400, check: noRequest},
		{name: "TE Chunked in another case", raw: teCL("Chunked"), pipeline: true},
		{name: "TE chunked with trailing space", raw: teCL("chunked "), pipeline: true},
		{name: "TE chunked after a tab", raw: post + "Content-Length: 4\r\nTransfer-Encoding:\tchunked\r\n\r\n0\r\n\r\n", pipeline: true},
		{name: "TE chunked with trailing tab", raw: teCL("chunked\t"), pipeline: true},
		{name: "TE chunked with vertical tab", raw: teCL("chunked\x0b"), pipeline: true, want: 400},
		{name: "TE form feed before chunked", raw: teCL("\x0cchunked"), pipeline: true, want: 400},
		{name: "TE chunked obs-folded onto its own line", raw: post + "Content-Length: 4\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n", pipeline: true},
		{name: "TE space before colon", raw: post + "Content-Length: 4\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n", pipeline: true, want: 400},
		{name: "TE tab before colon", raw: post + "Content-Length: 4\r\nTransfer-Encoding\t: chunked\r\n\r\n0\r\n\r\n", pipeline: true, want: 400},
		{name: "TE chunked twice", raw: post + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", pipeline: true},
		{name: "TE chunked, chunked", raw: teCL("chunked, chunked"), pipeline: true},
		{name: "TE gzip, chunked", raw: teCL("gzip, chunked"), pipeline: true},
		{name: "TE chunked, gzip", raw: teCL("chunked, gzip"), pipeline: true},
		{name: "TE xchunked", raw: teCL("xchunked"), pipeline: true},
		{name: "TE chunked with a parameter", raw: teCL("chunked;q=1"), pipeline: true},
		{name: "TE identity", raw: post + "Transfer-Encoding: identity\r\nContent-Length: 3\r\n\r\nabc", pipeline: true},
		// RFC 9112 section 6.1: an HTTP/1.0 message with Transfer-Encoding
		// has faulty framing, "even if a Content-Length is present", and the
		// server MUST close the connection after responding. net/http
		// ignores the Transfer-Encoding of HTTP/1.0 requests and deletes
		// the header before the handler runs. Here a chunk carries the
		// second request as data for whoever frames by Transfer-Encoding;
		// Content-Length ends the body after the chunk-size line.
		{name: "HTTP/1.0 keep-alive, CL ends inside a chunk", raw: "POST / HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n" +
			fmt.Sprintf("%02x\r\n", len(hostileSmuggled)) + hostileSmuggled + "\r\n0\r\n\r\n"},

		// Content-Length alone, but ambiguous.
		{name: "two different CLs", raw: post + "Content-Length: 3\r\nContent-Length: 5\r\n\r\nabcde", pipeline: true, want: 400},
		{name: "CL list", raw: post + "Content-Length: 3, 5\r\n\r\nabcde", pipeline: true, want: 400},
		{name: "CL with plus sign", raw: post + "Content-Length: +3\r\n\r\nabc", pipeline: true, want: 400},
		{name: "CL in hex", raw: post + "Content-Length: 0x3\r\n\r\nabc", pipeline: true, want: 400},
		{name: "CL negative", raw: post + "Content-Length: -1\r\n\r\nabc", pipeline: true, want: 400},

		// Chunk framing.
		{name: "bare LF in chunk framing", raw: chunkedHead + "3\nabc\n0\n\n", pipeline: true, want: 400},
		{name: "CR inside a chunk-size line", raw: chunkedHead + "3\rx\r\nabc\r\n0\r\n\r\n", pipeline: true, want: 400},
		{name: "chunk size overflow", raw: chunkedHead + "fffffffffffffffff\r\nabc\r\n0\r\n\r\n", pipeline: true, want: 400},
		{name: "chunk size negative", raw: chunkedHead + "-1\r\nabc\r\n0\r\n\r\n", pipeline: true, want: 400},
		{name: "chunk size with junk", raw: chunkedHead + "3x\r\nabc\r\n0\r\n\r\n", pipeline: true, want: 400},
		{name: "chunk size with 0x", raw: chunkedHead + "0x3\r\nabc\r\n0\r\n\r\n", pipeline: true, want: 400},
		{name: "chunk data longer than its size", raw: chunkedHead + "3\r\nabcdef\r\n0\r\n\r\n", pipeline: true, want: 400},
		// RFC 9112 section 7.1.1: BWS only around an extension's ";" and
		// "=", a token for its name, a token or quoted-string for its
		// value. A body found malformed in its first chunk line is
		// refused before anything of the request goes upstream.
		{name: "empty chunk extension", raw: chunkedHead + "5;\r\nhello\r\n0\r\n\r\n", pipeline: true, want: 400, check: noRequest},
		{name: "chunk extension without a name", raw: chunkedHead + "5;=x\r\nhello\r\n0\r\n\r\n", pipeline: true, want: 400, check: noRequest},
		{name: "chunk extension name with a space", raw: chunkedHead + "5;a b\r\nhello\r\n0\r\n\r\n", pipeline: true, want: 400, check: noRequest},
		{name: "quoted chunk extension name", raw: chunkedHead + "5;\"x\"\r\nhello\r\n0\r\n\r\n", pipeline: true, want: 400, check: noRequest},
		{name: "chunk extension value not a token", raw: chunkedHead + "5;a=@\r\nhello\r\n0\r\n\r\n", pipeline: true, want: 400, check: noRequest},
		{name: "space after the chunk size", raw: chunkedHead + "5 \r\nhello\r\n0\r\n\r\n", pipeline: true, want: 400, check: noRequest},
		{name: "tab after the chunk size", raw: chunkedHead + "5\t\r\nhello\r\n0\r\n\r\n", pipeline: true, want: 400, check: noRequest},
		{name: "whitespace after a chunk extension", raw: chunkedHead + "5;a=b \r\nhello\r\n0\r\n\r\n", pipeline: true, want: 400, check: noRequest},

		// Header lines.
		// obs-fold: RFC 9112 section 5.2 lets a server reject it or replace
		// it with spaces; queue rejects it, as HAProxy does, so that no
		// parser behind it can read the folded line as a field of its own.
		{name: "obs-fold", raw: "GET / HTTP/1.1\r\nHost: a\r\nX-A: 1\r\n 2\r\nConnection: close\r\n\r\n", want: 400, check: noRequest},
		{name: "obs-fold hiding Transfer-Encoding", raw: post + "Content-Length: 5\r\nX-A: 1\r\n Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n0\r\n\r\n", want: 400, check: noRequest},
		{name: "obs-fold into Host", raw: "GET / HTTP/1.1\r\nHost: a\r\n Transfer-Encoding: chunked\r\n\r\n", pipeline: true, want: 400},
		{name: "NUL in a header value", raw: withHeader("X-A: a\x00b"), pipeline: true, want: 400},
		{name: "SOH in a header value", raw: withHeader("X-A: a\x01b"), pipeline: true, want: 400},
		{name: "ESC in a header value", raw: withHeader("X-A: a\x1bb"), pipeline: true, want: 400},
		{name: "DEL in a header value", raw: withHeader("X-A: a\x7fb"), pipeline: true, want: 400},
		{name: "bare CR in a header value", raw: withHeader("X-A: a\rb"), pipeline: true, want: 400},
		{name: "space in a header name", raw: withHeader("X A: 1"), pipeline: true, want: 400},
		{name: "parenthesis in a header name", raw: withHeader("X(A: 1"), pipeline: true, want: 400},
		{name: "non-ASCII header name", raw: withHeader("X-\xc3\x84: 1"), pipeline: true, want: 400},
		{name: "empty header name", raw: withHeader(": 1"), pipeline: true, want: 400},
		{name: "header line without colon", raw: withHeader("X-A 1"), pipeline: true, want: 400},
		{name: "two Host headers", raw: "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", pipeline: true, want: 400},
		{name: "no Host on HTTP/1.1", raw: "GET / HTTP/1.1\r\n\r\n", pipeline: true, want: 400},
		{name: "empty Host", raw: "GET / HTTP/1.1\r\nHost:\r\n\r\n", pipeline: true, want: 400, check: noRequest},

		// Request lines.
		{name: "absolute-form target", raw: "GET http://evil/ HTTP/1.1\r\nHost: a\r\n\r\n", pipeline: true, want: 400},
		{name: "CONNECT", raw: "CONNECT evil:443 HTTP/1.1\r\nHost: evil:443\r\n\r\n", pipeline: true, want: 400},
		{name: "HTTP/0.9 simple request", raw: "GET /\r\n", pipeline: true},
		{name: "HTTP/0.9 version", raw: "GET / HTTP/0.9\r\nHost: a\r\n\r\n", pipeline: true},
		{name: "HTTP/2.0 in an HTTP/1 request line", raw: "GET / HTTP/2.0\r\nHost: a\r\n\r\n", pipeline: true},
		{name: "request line with an extra field", raw: "GET / HTTP/1.1 x\r\nHost: a\r\n\r\n", pipeline: true, want: 400},
		{name: "request line with tabs", raw: "GET\t/\tHTTP/1.1\r\nHost: a\r\n\r\n", pipeline: true, want: 400},
		{name: "garbage request line", raw: "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", pipeline: true, want: 400},
		{name: "asterisk form of GET", raw: "GET * HTTP/1.1\r\nHost: a\r\n\r\n", pipeline: true, want: 400, check: noRequest},
		{name: "method of 33 bytes", raw: strings.Repeat("M", 33) + " / HTTP/1.1\r\nHost: a\r\n\r\n", pipeline: true, want: 400, check: noRequest},

		// h2c smuggling: an upgrade with a body is served over HTTP/1.1
		// (docs/decisions.md D9), and Upgrade/HTTP2-Settings never reach the
		// upstream. With a Content-Length, the connection may stay open.
		{name: "Upgrade h2c with a body", raw: post + "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\nContent-Length: 5\r\n\r\nhello", want: 200, check: noUpgradeHeaders},
		{name: "Upgrade h2c with a chunked body", raw: post + "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", want: 200, check: noUpgradeHeaders},
	}
	t.Logf("%d hostile request cases", len(cases))
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := &hostileRecorder{}
			up := h1Upstream(t, rec)
			q := startQueue(t, hostPort(up))
			raw := tt.raw
			if tt.pipeline {
				raw += hostileSmuggled
			}
			out, closed := hostileExchange(t, q.addr.Listen, raw, 2*time.Second)
			reply := hostileParse(out)
			seen := rec.seen()
			if reply.status == 0 {
				t.Fatalf("no HTTP response (closed %v): %q", closed, out)
			}
			if reply.extra > 0 {
				t.Errorf("%d bytes after the first response (%d): a second response on the connection: %q",
					reply.extra, reply.status, out)
			}
			if tt.want != 0 && reply.status != tt.want {
				t.Errorf("status = %d, want %d", reply.status, tt.want)
			}
			if tt.pipeline && reply.status < 400 && !closed {
				t.Errorf("status %d and the connection left open: what follows an ambiguous request must not be read", reply.status)
			}
			if reply.status == http.StatusBadRequest && !closed {
				t.Errorf("400 and the connection left open: every 400 closes it")
			}
			if reply.status == http.StatusSwitchingProtocols {
				t.Errorf("101: the connection was upgraded")
			}
			if len(seen) > 1 {
				t.Errorf("upstream saw %d requests, want at most 1", len(seen))
			}
			for _, s := range seen {
				if strings.Contains(s.target, "smuggled") {
					t.Errorf("upstream saw the pipelined request: %s %s", s.method, s.target)
				}
			}
			if tt.check != nil {
				tt.check(t, seen)
			}
			if t.Failed() {
				t.Logf("response (closed %v): %q", closed, out)
			}
		})
	}
}

// TestSlowClients: clients that send or read slowly are cut by queue's
// limits and do not hold others up or make it buffer.
//
// Not parallel: "slow reader" measures the process's heap, so it runs while
// no parallel test does.
func TestSlowClients(t *testing.T) {
	t.Run("slow reader", func(t *testing.T) {
		const size = 32 << 20
		// cut is queue's --timeout, when the response is cut: the heap is
		// sampled before it, while the response is stuck, and the sampling
		// (a second of stillness) has room before it on a slow machine.
		const cut = 4 * time.Second
		type result struct {
			written int
			err     error
			ctxErr  error
		}
		done := make(chan result, 1)
		var written atomic.Int64
		up := h1Upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", strconv.Itoa(size))
			buf := make([]byte, 32<<10)
			var res result
			for res.written < size {
				n, err := w.Write(buf)
				res.written += n
				written.Add(int64(n))
				if err != nil {
					res.err = err
					break
				}
			}
			res.ctxErr = r.Context().Err()
			done <- res
		}))
		q := startQueue(t, hostPort(up), "--timeout", cut.String())
		before := hostileHeap()

		// The receive buffer is made tiny before the handshake (not with
		// SetReadBuffer on the connected socket: see rcvbufDialer).
		c, err := rcvbufDialer(4096).Dial("tcp", q.addr.Listen)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		if _, err := io.WriteString(c, "GET /big HTTP/1.1\r\nHost: a\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		// The client reads nothing: the upstream pushes into queue as fast
		// as queue takes it. The heap is sampled until it and the
		// upstream's writes stand still, which must come before the cut:
		// a sample taken after it would find the response's memory freed.
		peak, still := hostileHeapPeak(written.Load, time.Until(start.Add(cut)))
		sampled := time.Since(start)
		var res result
		ended := false
		select {
		case res = <-done:
			ended = true
		default:
		}
		growth := int64(peak) - int64(before)
		switch {
		case ended && res.err == nil && res.ctxErr == nil:
			t.Errorf("upstream handler wrote all %d bytes without an error to a client that read nothing", res.written)
		case ended:
			t.Fatalf("the response ended (upstream wrote %d bytes; write error %v, context %v) %v after the request, before the heap stood still: its peak of %d KiB over the start says nothing",
				res.written, res.err, res.ctxErr, sampled.Round(time.Millisecond), growth>>10)
		case !still:
			t.Fatalf("the upstream's writes (%d KiB) or the heap in use (%d KiB over the start) still grew at the cut (--timeout %v), with the client not reading",
				written.Load()>>10, growth>>10, cut)
		}
		if growth > 8<<20 {
			t.Errorf("heap in use grew by %d KiB while the response was stuck, want < 8 MiB", growth>>10)
		}
		t.Logf("heap in use grew by %d KiB while the response was stuck; the upstream had written %d KiB; sampled for %v",
			growth>>10, written.Load()>>10, sampled.Round(time.Millisecond))

		// The cut ends the upstream's handler (its write fails or its
		// context ends): the client reads once it has.
		if !ended {
			select {
			case res = <-done:
			case <-time.After(time.Until(start.Add(cut + h2Wait))):
				t.Fatalf("upstream handler still writing %v after the request (--timeout %v): queue keeps reading a response nobody reads", cut+h2Wait, cut)
			}
			if res.err == nil && res.ctxErr == nil {
				t.Errorf("upstream handler wrote all %d bytes without an error", res.written)
			} else {
				t.Logf("upstream wrote %d bytes; write error %v, context %v", res.written, res.err, res.ctxErr)
			}
		}
		c.SetReadDeadline(time.Now().Add(h2Wait))
		n, err := io.Copy(io.Discard, c)
		if hostileIsTimeout(err) {
			t.Errorf("after %d bytes, the connection is still open %v after the request (--timeout %v)", n, time.Since(start).Round(time.Millisecond), cut)
		}
		if n >= size {
			t.Errorf("read %d bytes: the whole response reached a client that read nothing until the cut", n)
		}
		t.Logf("slow reader: %d bytes reached the client before the cut (%v)", n, err)
	})

	t.Run("slowloris", func(t *testing.T) {
		t.Parallel()
		const conns = 20
		// Each stalled connection must be closed within bound of its
		// partial head: the head timeout (300 ms) with room for a slow
		// machine, and well before the trickling ones stop trickling
		// (15 s), so that a timer that each byte restarts shows.
		const bound = h2Wait
		up := h1Upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
		q := startQueueWith(t, nil, func(c *Config) { c.ReadHeaderTimeout = 300 * time.Millisecond }, hostPort(up))

		type slow struct {
			c     net.Conn
			start time.Time
		}
		var stalled []slow
		for i := range conns {
			c, err := net.DialTimeout("tcp", q.addr.Listen, 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			start := time.Now()
			if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n"); err != nil {
				t.Fatal(err)
			}
			if i%2 == 1 {
				// Half trickle one byte of a header every 50 ms, for 15 s
				// unless the connection closes: the header timeout is for
				// the whole head, not between bytes.
				go func() {
					io.WriteString(c, "X-Trickle: ")
					for range 300 {
						time.Sleep(50 * time.Millisecond) // the trickle's pace, not a synchronisation
						if _, err := c.Write([]byte("a")); err != nil {
							return
						}
					}
				}()
			}
			stalled = append(stalled, slow{c, start})
		}

		// Meanwhile, an honest client on a fresh connection is served.
		cl, base := q.client(t, modeH1)
		ctx, cancel := context.WithTimeout(context.Background(), h2Wait)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/", nil)
		res, err := cl.Do(req)
		if err != nil {
			t.Fatalf("honest request while %d clients stall: %v", conns, err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Errorf("honest request: status %d, want 200", res.StatusCode)
		}

		for i, s := range stalled {
			s.c.SetReadDeadline(s.start.Add(bound))
			out, err := io.ReadAll(s.c)
			took := time.Since(s.start)
			switch {
			case hostileIsTimeout(err):
				t.Errorf("conn %d: still open %v after its partial head (ReadHeaderTimeout 300ms)", i, took.Round(time.Millisecond))
			case took < 150*time.Millisecond:
				t.Errorf("conn %d: closed after %v, before the header timeout", i, took)
			}
			if r := hostileParse(out); r.status != 0 && r.status < 400 {
				t.Errorf("conn %d: status %d for a request that never finished its head", i, r.status)
			}
		}
	})

	t.Run("slow body", func(t *testing.T) {
		t.Parallel()
		for _, tt := range []struct {
			name string
			cl   int
		}{
			{"streamed", 100000}, // over 64 KiB: streamed to the upstream
			{"buffered", 1000},   // read whole before the upstream is asked
		} {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				rec := &hostileRecorder{}
				up := h1Upstream(t, rec)
				q := startQueue(t, hostPort(up), "--timeout", "500ms")
				start := time.Now()
				raw := fmt.Sprintf("POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n0123456789", tt.cl)
				out, closed := hostileExchange(t, q.addr.Listen, raw, 5*time.Second)
				took := time.Since(start)
				reply := hostileParse(out)
				switch {
				case reply.status != 0 && reply.status < 400:
					t.Errorf("status %d for a body that never arrived whole (after %v)", reply.status, took.Round(time.Millisecond))
				case !closed && reply.status == 0:
					t.Errorf("neither closed nor answered %v after the body stalled (--timeout 500ms)", took.Round(time.Millisecond))
				}
				t.Logf("%s: after %v: closed %v, response %q", tt.name, took.Round(time.Millisecond), closed, out)
				// The upstream may have the head (streamed); it must see
				// the body end in an error, within a bound.
				deadline := time.Now().Add(h2Wait)
				for {
					seen := rec.seen()
					pending := false
					for _, s := range seen {
						if !s.done {
							pending = true
							continue
						}
						if s.bodyErr == nil && s.bodyLen == int64(tt.cl) {
							t.Errorf("upstream received a complete request: %s %s, %d bytes", s.method, s.target, s.bodyLen)
						}
					}
					if !pending {
						if len(seen) > 0 {
							t.Logf("%s: upstream saw the head; body %d bytes, %v", tt.name, seen[0].bodyLen, seen[0].bodyErr)
						}
						break
					}
					if time.Now().After(deadline) {
						t.Errorf("upstream handler still reading the body %v after the client's connection ended", h2Wait)
						break
					}
					time.Sleep(20 * time.Millisecond) // bounded poll of the upstream's state
				}
			})
		}
	})
}

// hostileDialH2 is h2Dial with the read loop started, and the deadlines of
// TestFloods' floods: 15 s for the writes, none for the reads, which each
// check bounds by its own wait.
func hostileDialH2(t *testing.T, addr string) *h2Conn {
	t.Helper()
	h := h2Dial(t, addr, h2Opts{})
	h.c.SetReadDeadline(time.Time{})
	h.c.SetWriteDeadline(time.Now().Add(15 * time.Second))
	h.start()
	return h
}

// hostileHeap returns the Go heap in use, after a GC.
func hostileHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// hostileHeapPeak samples the Go heap in use (hostileHeap) every 50 ms
// while a response is stuck, until neither written (what the upstream has
// written of it) nor the heap has grown for a second, and returns the
// highest sample. A growth of the heap by more than a MiB over the highest
// sample so far counts as progress, as a write does: a pause of the
// upstream's writes while queue still takes in what the sockets hold does
// not end the sampling. ok is false when within passed first: the peak
// then says nothing of where the heap would have stopped.
func hostileHeapPeak(written func() int64, within time.Duration) (peak uint64, ok bool) {
	const still = 20 // samples without progress: a second
	deadline := time.Now().Add(within)
	last, quiet := int64(-1), 0
	for quiet < still {
		if time.Now().After(deadline) {
			return peak, false
		}
		time.Sleep(50 * time.Millisecond) // bounded poll: nothing signals that the heap stopped growing
		h, w := hostileHeap(), written()
		if w != last || h > peak+1<<20 {
			quiet = 0
		} else {
			quiet++
		}
		last, peak = w, max(peak, h)
	}
	return peak, true
}

// hostileHealthy checks that queue serves a fresh request in each client
// mode, within a bound.
func hostileHealthy(t *testing.T, q *testQueue, path string) {
	t.Helper()
	for _, mode := range []string{modeH1, modeH2C} {
		c, base := q.client(t, mode)
		ctx, cancel := context.WithTimeout(context.Background(), h2Wait)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		res, err := c.Do(req)
		if err != nil {
			cancel()
			t.Errorf("%s: fresh request afterwards: %v", mode, err)
			continue
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		cancel()
		c.CloseIdleConnections()
		if res.StatusCode != 200 {
			t.Errorf("%s: fresh request afterwards: status %d, want 200", mode, res.StatusCode)
		}
	}
}

// TestFloods: connection, stream and header floods leave queue serving and
// with its resources back where they were.
//
// Not parallel: "rapid reset" counts the process's goroutines, so it runs
// while no parallel test does.
func TestFloods(t *testing.T) {
	t.Run("max connections", func(t *testing.T) {
		t.Parallel()
		const limit = 20
		up := h1Upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
		// The head timeout is made long, so that a connection over the
		// limit that queue had taken in would stay open for the whole of
		// the wait below, however slow the machine.
		q := startQueueWith(t, nil, func(c *Config) { c.ReadHeaderTimeout = time.Minute }, hostPort(up), "--max-connections", strconv.Itoa(limit))

		// open dials and sends one request; it reports whether queue
		// answered it, and keeps the connection open if it did. A refused
		// connection is closed by queue before any byte is read.
		open := func(wait time.Duration) (net.Conn, bool) {
			c, err := net.DialTimeout("tcp", q.addr.Listen, 2*time.Second)
			if errors.Is(err, syscall.ECONNRESET) {
				// Refused so fast that the reset beat the end of the
				// dial: the same answer as a reset on the first read.
				return nil, false
			}
			if err != nil {
				t.Fatal(err)
			}
			c.SetDeadline(time.Now().Add(wait))
			io.WriteString(c, "GET /held HTTP/1.1\r\nHost: a\r\n\r\n")
			res, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				c.Close()
				if hostileIsTimeout(err) {
					t.Fatalf("no answer and no close within %v: %v", wait, err)
				}
				return nil, false
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			c.SetDeadline(time.Time{})
			if res.StatusCode != 200 {
				t.Fatalf("held connection: status %d", res.StatusCode)
			}
			return c, true
		}
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for i := range limit {
			c, ok := open(h2Wait)
			if !ok {
				t.Fatalf("connection %d of %d refused", i+1, limit)
			}
			held = append(held, c)
		}

		// One over the limit: closed at once, nothing written. Nothing is
		// sent, so an accepted connection would stay open for the head
		// timeout, a minute: far past the deadline, which leaves a slow
		// machine room for "at once".
		start := time.Now()
		extra, err := net.DialTimeout("tcp", q.addr.Listen, 2*time.Second)
		var n int
		switch {
		case errors.Is(err, syscall.ECONNRESET):
			// Reset so fast that it beat the end of the dial: closed at
			// once, as wanted.
		case err != nil:
			t.Fatal(err)
		default:
			extra.SetReadDeadline(time.Now().Add(h2Wait))
			n, err = extra.Read(make([]byte, 512))
			extra.Close()
		}
		switch {
		case n > 0:
			t.Errorf("connection %d: got %d response bytes, want none", limit+1, n)
		case hostileIsTimeout(err):
			t.Errorf("connection %d: still open after %v, want closed at once", limit+1, h2Wait)
		case err == nil:
			t.Errorf("connection %d: read returned no error", limit+1)
		}
		t.Logf("connection %d: %v after %v", limit+1, err, time.Since(start).Round(time.Microsecond))

		// Close 5: 5 new connections are accepted (queue notices the
		// closes asynchronously: bounded poll), then the limit holds again.
		for _, c := range held[:5] {
			c.Close()
		}
		held = held[5:]
		deadline := time.Now().Add(h2Wait)
		refused := 0
		for len(held) < limit {
			if time.Now().After(deadline) {
				t.Fatalf("only %d connections open %v after closing 5 of %d (%d refused)", len(held), h2Wait, limit, refused)
			}
			if c, ok := open(h2Wait); ok {
				held = append(held, c)
				continue
			}
			refused++
			time.Sleep(10 * time.Millisecond) // bounded poll of an asynchronous close
		}
		if _, ok := open(h2Wait); ok {
			t.Errorf("connection %d accepted after re-filling to %d", limit+1, limit)
		}
		t.Logf("re-filled 5 slots (%d attempts refused while queue noticed the closes)", refused)
	})

	t.Run("header sizes", func(t *testing.T) {
		t.Parallel()
		rec := &hostileRecorder{}
		up := h1Upstream(t, rec)
		q := startQueue(t, hostPort(up))

		var many strings.Builder
		many.WriteString("GET /many HTTP/1.1\r\nHost: a\r\nConnection: close\r\n")
		for i := range 1000 {
			fmt.Fprintf(&many, "X-H-%04d: %s\r\n", i, strings.Repeat("v", 48)) // 60 bytes a line
		}
		many.WriteString("\r\n")
		big := "GET /big HTTP/1.1\r\nHost: a\r\nConnection: close\r\nX-Big: " + strings.Repeat("b", 70<<10) + "\r\n\r\n"

		for _, tt := range []struct {
			name string
			raw  string
			ok   []int
		}{
			{"1000 headers of 60 bytes", many.String(), []int{200, 431}},
			{"one 70 KiB header line", big, []int{431}},
		} {
			out, _ := hostileExchange(t, q.addr.Listen, tt.raw, 5*time.Second)
			r := hostileParse(out)
			found := false
			for _, s := range tt.ok {
				found = found || r.status == s
			}
			if !found {
				t.Errorf("%s: status %d, want one of %v (response %.200q)", tt.name, r.status, tt.ok, out)
			}
			if strings.Contains(r.body, "vvvv") || strings.Contains(r.body, "bbbb") {
				t.Errorf("%s: the error body echoes the request", tt.name)
			}
			t.Logf("%s: %d", tt.name, r.status)
		}
		for _, s := range rec.seen() {
			if s.target == "/big" {
				t.Errorf("upstream saw the request with a 70 KiB header")
			}
			if s.target == "/many" {
				n := 0
				for k := range s.header {
					if strings.HasPrefix(k, "X-H-") {
						n++
					}
				}
				if n != 1000 {
					t.Errorf("upstream saw %d of the 1000 headers", n)
				}
			}
		}
		hostileHealthy(t, q, "/after-headers")
	})

	// CVE-2023-44487: streams opened and reset at once, faster than
	// handlers finish.
	t.Run("h2 rapid reset", func(t *testing.T) {
		const streams = 2000
		rec := &hostileRecorder{}
		up := h1Upstream(t, rec)
		q := startQueue(t, hostPort(up))
		// The baseline is taken with queue serving: after a request in
		// each mode, with the clients' and the upstream's connections
		// closed.
		hostileHealthy(t, q, "/warm-up")
		up.CloseClientConnections()
		baseline := runtime.NumGoroutine()

		h := hostileDialH2(t, q.addr.Listen)
		start := time.Now()
		limit := start.Add(10 * time.Second)
		sent := 0
		var werr error
		for i := range streams {
			if time.Now().After(limit) {
				break
			}
			id := uint32(2*i + 1)
			werr = h.write(i%100 == 99, func(fr *http2.Framer) error {
				if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.encode(h2Req("GET", "/rr")...), EndStream: true, EndHeaders: true}); err != nil {
					return err
				}
				return fr.WriteRSTStream(id, http2.ErrCodeCancel)
			})
			if werr != nil {
				break
			}
			sent++
		}
		if werr == nil {
			werr = h.write(true, func(*http2.Framer) error { return nil })
		}
		flood := time.Since(start)

		// Either the server gave up on the connection, or it still
		// answers a well-behaved stream on it.
		next := uint32(2*sent + 1)
		after := h.write(true, func(fr *http2.Framer) error {
			return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: next, BlockFragment: h.encode(h2Req("GET", "/after")...), EndStream: true, EndHeaders: true})
		})
		answered := h.waitFor(h2Wait, func() bool { return h.stream(next).status != "" || h.goAway != nil })
		h.mu.Lock()
		goAway, readErr, status := h.goAway, h.readErr, h.stream(next).status
		h.mu.Unlock()
		responses := h.count(func(s *h2Stream) bool { return s.status != "" })
		resets := h.count(func(s *h2Stream) bool { return s.reset })
		switch {
		case goAway != nil:
			t.Logf("rapid reset: GOAWAY %v (last stream %d, %q) after %d of %d HEADERS+RST pairs in %v",
				goAway.code, goAway.last, goAway.debug, sent, streams, flood.Round(time.Millisecond))
		case !answered:
			t.Errorf("rapid reset: no GOAWAY and stream %d unanswered %v after the flood (write %v, read %v)", next, h2Wait, after, readErr)
		case status != "200":
			t.Errorf("rapid reset: stream %d after the flood: :status %q, want 200", next, status)
		default:
			t.Logf("rapid reset: connection kept working: %d pairs in %v, stream %d answered 200", sent, flood.Round(time.Millisecond), next)
		}
		t.Logf("rapid reset: write error %v; %d response heads, %d streams reset by the server; upstream saw %d of %d requests",
			werr, responses, resets, rec.n.Load(), sent)
		h.c.Close()
		<-h.done

		hostileHealthy(t, q, "/after-rapid-reset")
		// Idle upstream keep-alive connections (queue pools up to 1024,
		// each with a goroutine in the in-process upstream server) are not
		// a leak; close them so that only leaked goroutines remain.
		deadline := time.Now().Add(h2Wait)
		for {
			up.CloseClientConnections()
			n := runtime.NumGoroutine()
			if n <= baseline+20 {
				t.Logf("goroutines: %d before the flood, %d after", baseline, n)
				break
			}
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				t.Errorf("goroutines: %d before the flood, still %d %v after it\n%s", baseline, n, h2Wait, buf[:runtime.Stack(buf, true)])
				break
			}
			time.Sleep(50 * time.Millisecond) // bounded poll
		}
	})

	// CVE-2023-45288: a header block that never ends, in CONTINUATION
	// frames.
	t.Run("h2 continuation flood", func(t *testing.T) {
		const total = 2 << 20
		// h2Literals is valid HPACK, so that only a size limit stops it;
		// garbage is not HPACK.
		garbage := bytes.Repeat([]byte{0xff, 0xfe, 0x7f, 0x3f}, 4<<10)
		for _, tt := range []h2Frag{
			{"hpack literals", h2Literals()},
			{"garbage", garbage},
		} {
			t.Run(tt.name, func(t *testing.T) {
				rec := &hostileRecorder{}
				up := h1Upstream(t, rec)
				q := startQueue(t, hostPort(up))
				h := hostileDialH2(t, q.addr.Listen)
				h.c.(*net.TCPConn).SetWriteBuffer(32 << 10)

				_, werr := h.openBlock(1, "/cont")
				sent := 0
				for werr == nil && sent < total {
					werr = h.write(true, func(fr *http2.Framer) error { return fr.WriteContinuation(1, false, tt.frag) })
					if werr == nil {
						sent += len(tt.frag)
					}
				}
				// END_HEADERS is never sent: a server that kept reading
				// would wait here for ever.
				ended := h.waitFor(h2Wait, func() bool { return h.goAway != nil || h.readErr != nil })
				h.mu.Lock()
				goAway, readErr, at, status := h.goAway, h.readErr, h.writtenAtGoAway, h.stream(1).status
				h.mu.Unlock()
				if !ended {
					t.Errorf("%d bytes of CONTINUATION sent (write error %v): no GOAWAY and the connection open %v later", sent, werr, h2Wait)
				}
				if status != "" {
					t.Errorf("stream 1 answered %s", status)
				}
				for _, s := range rec.seen() {
					if s.target == "/cont" {
						t.Errorf("upstream saw the flooded request")
					}
				}
				switch {
				case goAway != nil:
					t.Logf("%s: GOAWAY %v (%q) with %d KiB written; %d KiB of CONTINUATION accepted by the socket; write error %v; read %v",
						tt.name, goAway.code, goAway.debug, at>>10, sent>>10, werr, readErr)
				default:
					t.Logf("%s: connection ended (%v) with %d KiB written, no GOAWAY; write error %v", tt.name, readErr, at>>10, werr)
				}
				h.c.Close()
				hostileHealthy(t, q, "/after-continuation")
			})
		}
	})
}

// TestH1Glitches: an HTTP/1.1 connection whose requests queue refuses
// itself with a 4xx that keeps the connection (a K-Network-Probe value the
// probe handler does not know) is closed past h1.MaxGlitches: the response
// that goes past it carries "Connection: close". The metric moves.
func TestH1Glitches(t *testing.T) {
	t.Parallel()
	up := h1Upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	q := startQueue(t, hostPort(up))
	c, err := net.DialTimeout("tcp", q.addr.Listen, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(h2Wait))
	br := bufio.NewReader(c)
	for i := range h1.MaxGlitches + 1 {
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\nK-Network-Probe: bogus\r\n\r\n"); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusBadRequest {
			t.Fatalf("response %d: status %d, want 400", i, res.StatusCode)
		}
		if want := i == h1.MaxGlitches; res.Close != want {
			t.Fatalf("response %d: Connection: close %v, want %v", i, res.Close, want)
		}
	}
	if b, err := br.ReadByte(); err == nil {
		t.Errorf("queue sent %q after Connection: close", b)
	} else if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("after Connection: close: %v, want the connection closed", err)
	}
	if n := h2dMetric(t, q, "queue_glitches_total", "http1"); n != h1.MaxGlitches+1 {
		t.Errorf("queue_glitches_total{protocol=\"http1\"} = %v, want %d", n, h1.MaxGlitches+1)
	}
	if n := h2dMetric(t, q, "queue_glitch_closes_total", "http1"); n != 1 {
		t.Errorf("queue_glitch_closes_total{protocol=\"http1\"} = %v, want 1", n)
	}
}
