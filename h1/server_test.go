package h1

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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/queue-dev/queue/internal/engine"
	"github.com/queue-dev/queue/internal/testnet"
)

// failAfter bounds every wait on the network in these tests: it is the
// failure bound only, never waited out by a passing test.
const failAfter = 5 * time.Second

// startServer serves s on a loopback port and returns its address. The
// server is closed when the test ends, and Serve must then return
// ErrServerClosed.
func startServer(t *testing.T, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	return serveOn(t, s, ln)
}

// serveOn is startServer on a listener of the test's.
func serveOn(t *testing.T, s *Server, ln net.Listener) string {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		s.Close()
		select {
		case err := <-done:
			if !errors.Is(err, ErrServerClosed) {
				t.Errorf("Serve returned %v, want ErrServerClosed", err)
			}
		case <-time.After(failAfter):
			t.Errorf("Serve did not return within %v of Close", failAfter)
		}
	})
	return ln.Addr().String()
}

func dial(t *testing.T, addr string) *net.TCPConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, failAfter)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

// seen is a request as the handler saw it, copied: the request's strings
// are valid only while the handler runs.
type seen struct {
	method, target, host, proto string
	header, trailer             http.Header
	contentLength               int64
	body                        string
	bodyErr                     error
}

// summary is what the rule table compares: "METHOD target host".
func (s seen) summary() string { return s.method + " " + s.target + " " + s.host }

// recorder is a handler that records each request and answers by path:
//
//	/204, /304       that status, no body
//	/103             a 103 Early Hints, then 200 "ok"
//	/cl10            10 bytes without a Content-Length
//	/big             100 KiB without a Content-Length
//	/hello           "hello" with a Content-Length (for HEAD)
//	/noread          200 "ok" without reading the body
//	anything else    the request body echoed, or 400 if reading it failed
//
// Every response carries X-Target, the request target.
type recorder struct {
	mu   sync.Mutex
	reqs []seen
}

func cloneHeader(h http.Header) http.Header {
	if h == nil {
		return nil
	}
	c := make(http.Header, len(h))
	for k, vv := range h {
		for _, v := range vv {
			c[strings.Clone(k)] = append(c[strings.Clone(k)], strings.Clone(v))
		}
	}
	return c
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s := seen{
		method:        strings.Clone(r.Method),
		target:        strings.Clone(r.RequestURI),
		host:          strings.Clone(r.Host),
		proto:         r.Proto,
		header:        cloneHeader(r.Header),
		contentLength: r.ContentLength,
	}
	w.Header().Set("X-Target", s.target)
	var body []byte
	if r.URL.Path != "/noread" {
		body, s.bodyErr = io.ReadAll(r.Body)
		s.body = string(body)
		s.trailer = cloneHeader(r.Trailer)
	}
	rec.mu.Lock()
	rec.reqs = append(rec.reqs, s)
	rec.mu.Unlock()

	switch r.URL.Path {
	case "/204":
		w.WriteHeader(http.StatusNoContent)
	case "/304":
		w.WriteHeader(http.StatusNotModified)
	case "/103":
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		io.WriteString(w, "ok")
	case "/cl10":
		io.WriteString(w, "0123456789")
	case "/big":
		chunk := bytes.Repeat([]byte("x"), 1<<10)
		for range 100 {
			w.Write(chunk)
		}
	case "/hello":
		w.Header().Set("Content-Length", "5")
		io.WriteString(w, "hello")
	case "/noread":
		io.WriteString(w, "ok")
	default:
		if s.bodyErr != nil {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		w.Write(body)
	}
}

func (rec *recorder) seen() []seen {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]seen(nil), rec.reqs...)
}

// reply is a response as the client read it.
type reply struct {
	info []int // 1xx statuses before the final response
	res  *http.Response
	body []byte
}

// readReply reads one final response, and the 1xx before it, for a
// request of the given method.
func readReply(br *bufio.Reader, method string) (reply, error) {
	var x reply
	for {
		res, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			return x, fmt.Errorf("read response: %w", err)
		}
		if res.StatusCode < 200 {
			x.info = append(x.info, res.StatusCode)
			continue
		}
		x.res = res
		x.body, err = io.ReadAll(res.Body)
		if err != nil {
			return x, fmt.Errorf("read response body: %w", err)
		}
		return x, nil
	}
}

// closedByPeer reads from c, bounded by failAfter, and reports whether the
// server closed the connection (EOF or reset) with nothing more sent.
func closedByPeer(t *testing.T, c net.Conn, br *bufio.Reader) bool {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(failAfter))
	b, err := br.ReadByte()
	switch {
	case err == nil:
		rest, _ := br.Peek(br.Buffered())
		t.Errorf("server sent more after the response: %q", append([]byte{b}, rest...))
		return false
	case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET):
		return true
	case errors.Is(err, os.ErrDeadlineExceeded):
		return false
	}
	t.Errorf("read after the response: %v", err)
	return false
}

// smuggled is pipelined behind every request the rule table expects to
// close the connection: if the handler ever sees its target, the engine
// read on after a request it should have stopped at.
const smuggled = "GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n"

// next is sent after every request the rule table expects to keep the
// connection open, and must be answered.
const next = "GET /next HTTP/1.1\r\nHost: a\r\n\r\n"

// TestServeRules is the RFC 9112 table: each case is bytes in, the status
// out, what the handler saw and whether the connection closed. Closing
// cases have a request pipelined behind them that must never be served;
// keep-alive cases are followed by a request that must be.
func TestServeRules(t *testing.T) {
	t.Parallel()
	const (
		get  = "GET / HTTP/1.1\r\nHost: a\r\n"
		post = "POST / HTTP/1.1\r\nHost: a\r\n"
		te   = post + "Transfer-Encoding: chunked\r\n\r\n"
	)
	teCL := func(te string) string {
		return post + "Content-Length: 4\r\nTransfer-Encoding: " + te + "\r\n\r\n0\r\n\r\n"
	}
	withField := func(line string) string { return get + line + "\r\n\r\n" }
	// The server's limits are small, so that over-limit heads fit in one
	// read: the server reads all the client sent before it refuses, and
	// its close is a FIN, not a reset that could discard the response.
	lim := Limits{MaxHeadBytes: 2 << 10, MaxTargetBytes: 512}

	type exchangeCheck func(t *testing.T, x reply)
	hasHeader := func(k, v string) exchangeCheck {
		return func(t *testing.T, x reply) {
			t.Helper()
			if got, want := x.res.Header.Get(k), v; got != want {
				t.Errorf("response %s = %q, want %q", k, got, want)
			}
		}
	}
	hasNoHeader := func(k string) exchangeCheck {
		return func(t *testing.T, x reply) {
			t.Helper()
			if v, ok := x.res.Header[k]; ok {
				t.Errorf("response has %s: %q, want none", k, v)
			}
		}
	}
	bodyIs := func(want string) exchangeCheck {
		return func(t *testing.T, x reply) {
			t.Helper()
			if got := string(x.body); got != want {
				t.Errorf("response body = %q, want %q", got, want)
			}
		}
	}
	// ReadResponse takes "Connection: close" out of the header into Close.
	announcesClose := func(t *testing.T, x reply) {
		t.Helper()
		if !x.res.Close {
			t.Errorf("response without Connection: close")
		}
	}
	infoIs := func(want ...int) exchangeCheck {
		return func(t *testing.T, x reply) {
			t.Helper()
			if got := fmt.Sprint(x.info); got != fmt.Sprint(want) {
				t.Errorf("1xx responses = %v, want %v", got, want)
			}
		}
	}
	all := func(cc ...exchangeCheck) exchangeCheck {
		return func(t *testing.T, x reply) {
			t.Helper()
			for _, c := range cc {
				c(t, x)
			}
		}
	}

	cases := []struct {
		name   string
		in     string
		status int
		// saw is "METHOD target host" as the handler saw it; "" means the
		// handler was not called.
		saw     string
		header  http.Header // fields the handler must have seen
		body    string      // the body the handler must have read
		bodyErr bool        // the handler's body read must fail
		closed  bool
		check   exchangeCheck
	}{
		// Well-formed requests.
		{name: "GET", in: get + "\r\n", status: 200, saw: "GET / a", check: hasHeader("Content-Length", "0")},
		{name: "POST with Content-Length", in: post + "Content-Length: 5\r\n\r\nhello", status: 200, saw: "POST / a", body: "hello", check: bodyIs("hello")},
		{name: "leading empty line", in: "\r\n" + get + "\r\n", status: 200, saw: "GET / a"},
		{name: "leading empty lines", in: "\r\n\r\n\r\n" + get + "\r\n", status: 200, saw: "GET / a"},
		{name: "absolute-form target", in: "GET http://b/x?y HTTP/1.1\r\nHost: a\r\n\r\n", status: 200, saw: "GET http://b/x?y b"},
		{name: "name with underscore", in: withField("x_a: 1"), status: 200, saw: "GET / a", header: http.Header{"X_a": {"1"}}},
		{name: "obs-text in a value", in: withField("X-A: caf\xe9"), status: 200, saw: "GET / a", header: http.Header{"X-A": {"caf\xe9"}}},
		{name: "tab in a value", in: withField("X-A: a\tb"), status: 200, saw: "GET / a", header: http.Header{"X-A": {"a\tb"}}},
		{name: "long field within the limit", in: withField("X-A: " + strings.Repeat("a", 1500)), status: 200, saw: "GET / a"},

		// Request line and version.
		{name: "HTTP/1.2", in: "GET / HTTP/1.2\r\nHost: a\r\n\r\n", status: 505, closed: true},
		{name: "HTTP/2.0 request line", in: "GET / HTTP/2.0\r\nHost: a\r\n\r\n", status: 505, closed: true},
		{name: "preface request line, not the preface", in: "PRI * HTTP/2.0\r\n\r\nXM\r\n\r\n", status: 505, closed: true},
		{name: "HTTP/0.9 simple request", in: "GET /\r\n\r\n", status: 400, closed: true},
		{name: "request line with an extra field", in: "GET / HTTP/1.1 x\r\nHost: a\r\n\r\n", status: 400, closed: true},
		{name: "request line with tabs", in: "GET\t/\tHTTP/1.1\r\nHost: a\r\n\r\n", status: 400, closed: true},
		{name: "garbage request line", in: "GARBAGE\r\n\r\n", status: 400, closed: true},
		{name: "asterisk form of GET", in: "GET * HTTP/1.1\r\nHost: a\r\n\r\n", status: 400, closed: true},
		{name: "asterisk form of OPTIONS", in: "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", status: 200, saw: "OPTIONS * a"},
		{name: "method at the limit", in: strings.Repeat("M", maxMethod) + " / HTTP/1.1\r\nHost: a\r\n\r\n", status: 200, saw: strings.Repeat("M", maxMethod) + " / a"},
		{name: "method over the limit", in: strings.Repeat("M", maxMethod+1) + " / HTTP/1.1\r\nHost: a\r\n\r\n", status: 400, closed: true},
		{name: "TLS record", in: "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", status: 400, closed: true},
		{name: "target over the limit", in: "GET /" + strings.Repeat("a", 600) + " HTTP/1.1\r\nHost: a\r\n\r\n", status: 414, closed: true},
		{name: "head over the limit", in: withField("X-A: " + strings.Repeat("a", 3000)), status: 431, closed: true},
		{name: "too many fields", in: get + strings.Repeat("X-N: 1\r\n", 100) + "\r\n", status: 431, closed: true},

		// Line ends and field syntax.
		{name: "bare LF ending the request line", in: "GET / HTTP/1.1\nHost: a\r\n\r\n", status: 400, closed: true},
		{name: "bare LF ending a field", in: get + "X-A: 1\n\r\n", status: 400, closed: true},
		{name: "bare LF ending the head", in: "GET / HTTP/1.1\nHost: a\n\n", status: 400, closed: true},
		{name: "bare CR in a value", in: withField("X-A: a\rb"), status: 400, closed: true},
		{name: "space before colon", in: withField("X-A : 1"), status: 400, closed: true},
		{name: "tab before colon", in: withField("X-A\t: 1"), status: 400, closed: true},
		{name: "obs-fold", in: get + "X-A: 1\r\n 2\r\n\r\n", status: 400, closed: true},
		{name: "obs-fold into Host", in: "GET / HTTP/1.1\r\nHost: a\r\n Transfer-Encoding: chunked\r\n\r\n", status: 400, closed: true},
		{name: "NUL in a value", in: withField("X-A: a\x00b"), status: 400, closed: true},
		{name: "SOH in a value", in: withField("X-A: a\x01b"), status: 400, closed: true},
		{name: "ESC in a value", in: withField("X-A: a\x1bb"), status: 400, closed: true},
		{name: "DEL in a value", in: withField("X-A: a\x7fb"), status: 400, closed: true},
		{name: "space in a name", in: withField("X A: 1"), status: 400, closed: true},
		{name: "parenthesis in a name", in: withField("X(A: 1"), status: 400, closed: true},
		{name: "non-ASCII name", in: withField("X-\xc3\x84: 1"), status: 400, closed: true},
		{name: "empty name", in: withField(": 1"), status: 400, closed: true},
		{name: "line without colon", in: withField("X-A 1"), status: 400, closed: true},

		// Host.
		{name: "no Host on HTTP/1.1", in: "GET / HTTP/1.1\r\n\r\n", status: 400, closed: true},
		{name: "two Host lines", in: get + "Host: b\r\n\r\n", status: 400, closed: true},
		{name: "two equal Host lines", in: get + "Host: a\r\n\r\n", status: 400, closed: true},
		{name: "Host with a space", in: "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", status: 400, closed: true},
		{name: "empty Host", in: "GET / HTTP/1.1\r\nHost:\r\n\r\n", status: 400, closed: true},
		{name: "empty Host, asterisk form", in: "OPTIONS * HTTP/1.1\r\nHost:\r\n\r\n", status: 400, closed: true},
		{name: "HTTP/1.0 without Host", in: "GET / HTTP/1.0\r\n\r\n", status: 200, saw: "GET / ", closed: true},

		// Content-Length.
		{name: "CL list of equal values", in: post + "Content-Length: 5, 5\r\n\r\nhello", status: 200, saw: "POST / a", body: "hello"},
		{name: "CL repeated, equal", in: post + "Content-Length: 5\r\nContent-Length: 5\r\n\r\nhello", status: 200, saw: "POST / a", body: "hello", header: http.Header{"Content-Length": {"5"}}},
		{name: "two different CLs", in: post + "Content-Length: 3\r\nContent-Length: 5\r\n\r\nabcde", status: 400, closed: true},
		{name: "CL list of differing values", in: post + "Content-Length: 5, 6\r\n\r\nhello", status: 400, closed: true},
		{name: "CL with a trailing comma", in: post + "Content-Length: 5,\r\n\r\nhello", status: 400, closed: true},
		{name: "CL with plus sign", in: post + "Content-Length: +5\r\n\r\nhello", status: 400, closed: true},
		{name: "CL in hex", in: post + "Content-Length: 0x3\r\n\r\nabc", status: 400, closed: true},
		{name: "CL negative", in: post + "Content-Length: -1\r\n\r\nabc", status: 400, closed: true},
		{name: "CL empty", in: post + "Content-Length:\r\n\r\n", status: 400, closed: true},
		{name: "CL of 19 digits", in: post + "Content-Length: 1000000000000000000\r\n\r\n", status: 400, closed: true},

		// Transfer-Encoding.
		{name: "chunked with extensions and trailers", in: te + "5;ext=1\r\nhello\r\n6 ; a=\"b\"\r\n world\r\n0\r\nX-T: 1\r\nx-u:  2 \r\n\r\n", status: 200, saw: "POST / a", body: "hello world", check: bodyIs("hello world")},
		{name: "TE Chunked in another case", in: post + "Transfer-Encoding: Chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", status: 200, saw: "POST / a", body: "abc"},
		{name: "CL with TE", in: teCL("chunked"), status: 400, closed: true},
		{name: "TE before CL", in: post + "Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n", status: 400, closed: true},
		{name: "CL 0 with TE", in: post + "Content-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", status: 400, closed: true},
		{name: "TE with trailing space and CL", in: teCL("chunked "), status: 400, closed: true},
		{name: "TE with vertical tab", in: teCL("chunked\x0b"), status: 400, closed: true},
		{name: "TE gzip, chunked", in: post + "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", status: 501, closed: true},
		{name: "TE chunked, chunked", in: post + "Transfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n", status: 400, closed: true},
		{name: "TE chunked on two lines", in: post + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", status: 400, closed: true},
		{name: "TE chunked, gzip", in: post + "Transfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n", status: 400, closed: true},
		{name: "TE xchunked", in: post + "Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n", status: 400, closed: true},
		{name: "TE chunked with a parameter", in: post + "Transfer-Encoding: chunked;q=1\r\n\r\n0\r\n\r\n", status: 400, closed: true},
		{name: "TE identity", in: post + "Transfer-Encoding: identity\r\n\r\nabc", status: 400, closed: true},
		{name: "TE on HTTP/1.0", in: "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", status: 400, closed: true},
		{name: "HTTP/1.0 keep-alive, CL ends inside a chunk", in: "POST / HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n" +
			fmt.Sprintf("%02x\r\n", len(smuggled)) + smuggled + "\r\n0\r\n\r\n", status: 400, closed: true},

		// Chunk framing: the body read fails, and the handler answers 400.
		{name: "chunk size of 16 hex digits", in: te + "0000000000000003\r\nabc\r\n0\r\n\r\n", status: 400, saw: "POST / a", bodyErr: true, closed: true},
		{name: "chunk size overflow", in: te + "fffffffffffffffff\r\nabc\r\n0\r\n\r\n", status: 400, saw: "POST / a", bodyErr: true, closed: true},
		{name: "chunk size negative", in: te + "-1\r\nabc\r\n0\r\n\r\n", status: 400, saw: "POST / a", bodyErr: true, closed: true},
		{name: "chunk size with junk", in: te + "3x\r\nabc\r\n0\r\n\r\n", status: 400, saw: "POST / a", bodyErr: true, closed: true},
		{name: "bare LF in a chunk line", in: te + "3\nabc\r\n0\r\n\r\n", status: 400, saw: "POST / a", bodyErr: true, closed: true},
		{name: "CR inside a chunk-size line", in: te + "3\rx\r\nabc\r\n0\r\n\r\n", status: 400, saw: "POST / a", bodyErr: true, closed: true},
		{name: "chunk data longer than its size", in: te + "3\r\nabcdef\r\n0\r\n\r\n", status: 400, saw: "POST / a", bodyErr: true, closed: true},
		{name: "control character in a trailer", in: te + "0\r\nX-T: a\x00\r\n\r\n", status: 400, saw: "POST / a", bodyErr: true, closed: true},
		// RFC 9112 section 7.1.1: chunk-ext = *( BWS ";" BWS name [ BWS
		// "=" BWS value ] ), name a token, value a token or a
		// quoted-string; BWS nowhere else.
		{name: "chunk extensions with BWS around ; and =", in: te + "5 ;\ta = \"x;y\" ; b\r\nhello\r\n0\r\n\r\n", status: 200, saw: "POST / a", body: "hello"},
		{name: "empty chunk extension", in: te + "5;\r\nhello\r\n0\r\n\r\n", status: 400, saw: "POST / a", bodyErr: true, closed: true},
		{name: "chunk extension without a name", in: te + "5;=x\r\nhello\r\n0\r\n\r\n", status: 400, saw: "POST / a", bodyErr: true, closed: true},
		{name: "chunk extension name with a space", in: te + "5;a b\r\nhello\r\n0\r\n\r\n", status: 400, saw: "POST / a", bodyErr: true, closed: true},
		{name: "quoted chunk extension name", in: te + "5;\"x\"\r\nhello\r\n0\r\n\r\n", status: 400, saw: "POST / a", bodyErr: true, closed: true},
		{name: "chunk extension value not a token", in: te + "5;a=@\r\nhello\r\n0\r\n\r\n", status: 400, saw: "POST / a", bodyErr: true, closed: true},
		{name: "chunk extension value unterminated", in: te + "5;a=\"x\r\nhello\r\n0\r\n\r\n", status: 400, saw: "POST / a", bodyErr: true, closed: true},
		{name: "space after the chunk size", in: te + "5 \r\nhello\r\n0\r\n\r\n", status: 400, saw: "POST / a", bodyErr: true, closed: true},
		{name: "tab after the chunk size", in: te + "5\t\r\nhello\r\n0\r\n\r\n", status: 400, saw: "POST / a", bodyErr: true, closed: true},
		{name: "whitespace after a chunk extension", in: te + "5;a=b \r\nhello\r\n0\r\n\r\n", status: 400, saw: "POST / a", bodyErr: true, closed: true},
		{name: "space after the last chunk's size", in: te + "0 \r\n\r\n", status: 400, saw: "POST / a", bodyErr: true, closed: true},

		// Expect.
		{name: "Expect 100-continue with the body sent", in: post + "Expect: 100-continue\r\nContent-Length: 5\r\n\r\nhello", status: 200, saw: "POST / a", body: "hello", check: infoIs(100)},
		{name: "Expect 100-continue without a body", in: get + "Expect: 100-continue\r\n\r\n", status: 200, saw: "GET / a", check: infoIs()},
		{name: "Expect 100-continue on HTTP/1.0 ignored", in: "POST / HTTP/1.0\r\nConnection: keep-alive\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\nhello", status: 200, saw: "POST / ", body: "hello", check: infoIs()},
		{name: "Expect something else", in: get + "Expect: something-else\r\n\r\n", status: 417, closed: true},

		// Responses.
		{name: "HEAD", in: "HEAD /hello HTTP/1.1\r\nHost: a\r\n\r\n", status: 200, saw: "HEAD /hello a", check: all(hasHeader("Content-Length", "5"), bodyIs(""))},
		{name: "HEAD without a Content-Length set", in: "HEAD /cl10 HTTP/1.1\r\nHost: a\r\n\r\n", status: 200, saw: "HEAD /cl10 a", check: all(hasHeader("Content-Length", "10"), bodyIs(""))},
		{name: "204", in: "GET /204 HTTP/1.1\r\nHost: a\r\n\r\n", status: 204, saw: "GET /204 a", check: all(hasNoHeader("Content-Length"), hasNoHeader("Transfer-Encoding"))},
		{name: "304", in: "GET /304 HTTP/1.1\r\nHost: a\r\n\r\n", status: 304, saw: "GET /304 a", check: hasNoHeader("Transfer-Encoding")},
		{name: "103 before 200", in: "GET /103 HTTP/1.1\r\nHost: a\r\n\r\n", status: 200, saw: "GET /103 a", check: all(infoIs(103), bodyIs("ok"))},
		{name: "Content-Length computed", in: "GET /cl10 HTTP/1.1\r\nHost: a\r\n\r\n", status: 200, saw: "GET /cl10 a", check: all(hasHeader("Content-Length", "10"), bodyIs("0123456789"))},
		{name: "large body chunked", in: "GET /big HTTP/1.1\r\nHost: a\r\n\r\n", status: 200, saw: "GET /big a", check: func(t *testing.T, x reply) {
			if got, want := fmt.Sprint(x.res.TransferEncoding), "[chunked]"; got != want {
				t.Errorf("TransferEncoding = %s, want %s", got, want)
			}
			if got, want := len(x.body), 100<<10; got != want {
				t.Errorf("body = %d bytes, want %d", got, want)
			}
		}},
		{name: "HTTP/1.0 large body delimited by close", in: "GET /big HTTP/1.0\r\n\r\n", status: 200, saw: "GET /big ", closed: true, check: func(t *testing.T, x reply) {
			hasNoHeader("Content-Length")(t, x)
			hasNoHeader("Transfer-Encoding")(t, x)
			if got, want := len(x.body), 100<<10; got != want {
				t.Errorf("body = %d bytes, want %d", got, want)
			}
		}},
		{name: "HTTP/1.0 keep-alive", in: "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", status: 200, saw: "GET / ", check: hasHeader("Connection", "keep-alive")},
		{name: "HTTP/1.0 keep-alive, large body", in: "GET /big HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", status: 200, saw: "GET /big ", closed: true, check: announcesClose},
		{name: "Connection: close", in: get + "Connection: close\r\n\r\n", status: 200, saw: "GET / a", closed: true, check: announcesClose},
		{name: "body left unread", in: "POST /noread HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello", status: 200, saw: "POST /noread a"},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := &recorder{}
			addr := startServer(t, &Server{Handler: rec, Limits: lim})
			c := dial(t, addr)
			in := tt.in
			if tt.closed {
				in += smuggled
			}
			c.SetDeadline(time.Now().Add(failAfter))
			if _, err := io.WriteString(c, in); err != nil {
				t.Fatalf("write: %v", err)
			}
			method := http.MethodGet
			if strings.HasPrefix(tt.in, "HEAD ") {
				method = http.MethodHead
			}
			br := bufio.NewReader(c)
			x, err := readReply(br, method)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := x.res.StatusCode, tt.status; got != want {
				t.Errorf("status = %d, want %d", got, want)
			}
			if tt.check != nil {
				tt.check(t, x)
			}
			if tt.closed {
				if !closedByPeer(t, c, br) {
					t.Errorf("connection left open, want it closed")
				}
			} else {
				// The connection must carry the next request.
				if _, err := io.WriteString(c, next); err != nil {
					t.Fatalf("write the next request: %v", err)
				}
				y, err := readReply(br, http.MethodGet)
				if err != nil {
					t.Fatalf("the connection did not carry the next request: %v", err)
				}
				if got, want := y.res.Header.Get("X-Target"), "/next"; got != want {
					t.Errorf("next response X-Target = %q, want %q", got, want)
				}
			}

			reqs := rec.seen()
			for _, s := range reqs {
				if s.target == "/smuggled" {
					t.Errorf("handler saw the request pipelined behind one that closes the connection")
				}
			}
			if tt.saw == "" {
				if len(reqs) > 0 && reqs[0].target != "/next" {
					t.Errorf("handler saw %q, want it not called", reqs[0].summary())
				}
				return
			}
			if len(reqs) == 0 {
				t.Fatalf("handler not called, want it to see %q", tt.saw)
			}
			s := reqs[0]
			if got, want := s.summary(), tt.saw; got != want {
				t.Errorf("handler saw %q, want %q", got, want)
			}
			for k, want := range tt.header {
				if got := s.header[k]; fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("handler saw %s = %q, want %q", k, got, want)
				}
			}
			if got, want := s.bodyErr != nil, tt.bodyErr; got != want {
				t.Errorf("handler's body error = %v, want an error: %v", s.bodyErr, want)
			}
			if !tt.bodyErr {
				if got, want := s.body, tt.body; got != want {
					t.Errorf("handler read body %q, want %q", got, want)
				}
			}
		})
	}
}

// bufferSize is a dialer's or listener's Control that sets a socket's
// SO_SNDBUF or SO_RCVBUF (opt) to n before it connects: an accepted
// socket takes its listener's.
func bufferSize(opt, n int) func(_, _ string, rc syscall.RawConn) error {
	return func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, opt, n) })
		return errors.Join(err, serr)
	}
}

// TestRefusedThenMore: a request the server refuses and closes on, with
// more bytes behind it than the server reads, while a response before it
// is still on its way: the client reads slowly (a small receive buffer),
// so most of a 100 KiB response still waits in the server's send buffer
// when the refusal is written behind it. A socket closed with bytes
// unread answers them with a reset and drops what it had still to send:
// the client gets part of the first response, then the reset, and never
// the 400. The answers arrive whole only if the server shuts its side down
// first and reads what comes until the client closes (lingerClose).
func TestRefusedThenMore(t *testing.T) {
	t.Parallel()
	const more = 128 << 10 // more than the server's one read of 64 KiB
	cases := []struct {
		name   string
		in     string
		status int
	}{
		{name: "malformed head", in: "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", status: 400},
		{name: "method over the limit", in: strings.Repeat("M", maxMethod+1) + " / HTTP/1.1\r\nHost: a\r\n\r\n", status: 400},
		{name: "malformed chunk", in: "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;\r\nhello\r\n", status: 400},
		{name: "body left unread", in: "POST /noread HTTP/1.1\r\nHost: a\r\nContent-Length: " + strconv.Itoa(4*more) + "\r\n\r\n", status: 200},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			lc := net.ListenConfig{Control: bufferSize(syscall.SO_SNDBUF, 1<<20)}
			ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := serveOn(t, &Server{Handler: &recorder{}}, ln)
			d := net.Dialer{Timeout: failAfter, Control: func(network, address string, rc syscall.RawConn) error {
				return errors.Join(bufferSize(syscall.SO_SNDBUF, 1<<20)(network, address, rc), bufferSize(syscall.SO_RCVBUF, 4<<10)(network, address, rc))
			}}
			c, err := d.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(failAfter))
			in := "GET /big HTTP/1.1\r\nHost: a\r\n\r\n" + tt.in + strings.Repeat("x", more)
			if _, err := io.WriteString(c, in); err != nil {
				t.Fatalf("write: %v", err)
			}
			br := bufio.NewReader(c)
			x, err := readReply(br, http.MethodGet)
			if err != nil {
				t.Fatalf("the first response was cut: %v", err)
			}
			if got, want := len(x.body), 100<<10; got != want {
				t.Fatalf("the first response has %d bytes, want %d", got, want)
			}
			if x, err = readReply(br, http.MethodPost); err != nil {
				t.Fatalf("the second response was lost: %v", err)
			}
			if got, want := x.res.StatusCode, tt.status; got != want {
				t.Errorf("status = %d, want %d", got, want)
			}
			if !closedByPeer(t, c, br) {
				t.Errorf("connection left open, want it closed")
			}
		})
	}
}

// TestChunkedTrailers: a chunked request's trailer fields reach the
// handler in Request.Trailer, names canonicalized and values trimmed, with
// ContentLength -1; the next request on the connection is served and has
// no trailer of the first.
func TestChunkedTrailers(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	addr := startServer(t, &Server{Handler: rec})
	c := dial(t, addr)
	c.SetDeadline(time.Now().Add(failAfter))
	in := "POST /up HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n" +
		"5\r\nhello\r\n0\r\nX-T: 1\r\nx-u:  2 \r\n\r\n" + next
	if _, err := io.WriteString(c, in); err != nil {
		t.Fatalf("write: %v", err)
	}
	br := bufio.NewReader(c)
	for _, want := range []string{"/up", "/next"} {
		x, err := readReply(br, http.MethodPost)
		if err != nil {
			t.Fatal(err)
		}
		if got := x.res.Header.Get("X-Target"); got != want {
			t.Errorf("response X-Target = %q, want %q", got, want)
		}
	}
	reqs := rec.seen()
	if got, want := len(reqs), 2; got != want {
		t.Fatalf("handler saw %d requests, want %d", got, want)
	}
	s := reqs[0]
	if got, want := s.body, "hello"; got != want {
		t.Errorf("body = %q, want %q", got, want)
	}
	if got, want := s.contentLength, int64(-1); got != want {
		t.Errorf("ContentLength = %d, want %d", got, want)
	}
	if got, want := s.trailer, (http.Header{"X-T": {"1"}, "X-U": {"2"}}); !equalHeader(got, want) {
		t.Errorf("Trailer = %q, want %q", got, want)
	}
	if got := reqs[1].trailer; len(got) != 0 {
		t.Errorf("the next request's Trailer = %q, want empty", got)
	}
}

// TestFirstBytes: the first bytes of a connection decide. Whatever cannot
// start a request line gets its 400 at once: the server's header timeout
// is a minute, the client's read deadline the failure bound.
func TestFirstBytes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		in   string
	}{
		{name: "GARBAGE", in: "GARBAGE\r\n\r\n"},
		{name: "TLS client hello", in: "\x16\x03\x01\x02\x00\x01"},
		{name: "NUL", in: "\x00"},
		{name: "space", in: " "},
		{name: "bad second byte", in: "G\x00"},
		{name: "tab after the method", in: "GET\t"},
		{name: "bare LF after the request line", in: "GET / HTTP/1.1\n"},
		{name: "lone CR", in: "\rX"},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			addr := startServer(t, &Server{Handler: &recorder{}, ReadHeaderTimeout: time.Minute})
			c := dial(t, addr)
			c.SetDeadline(time.Now().Add(failAfter))
			if _, err := io.WriteString(c, tt.in); err != nil {
				t.Fatalf("write: %v", err)
			}
			br := bufio.NewReader(c)
			x, err := readReply(br, http.MethodGet)
			if err != nil {
				t.Fatalf("no 400 before the client's deadline: %v", err)
			}
			if got, want := x.res.StatusCode, http.StatusBadRequest; got != want {
				t.Errorf("status = %d, want %d", got, want)
			}
			if !closedByPeer(t, c, br) {
				t.Errorf("connection left open after the 400")
			}
		})
	}
}

// TestNotHTTP: a request line whose version is not HTTP's is a client that
// speaks something else; the connection is closed without an answer,
// whether the line came whole or only its start did.
func TestNotHTTP(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		"INVALID CONNECTION PREFACE\r\n\r\n", // h2spec 3.5/2
		"GET / SSH-2.0",
		"GET / SSH-2.0\r\nHost: a\r\n\r\n",
		"GET / X",
		"PRI * HTTX", // an HTTP/2 preface gone astray
	} {
		t.Run(in, func(t *testing.T) {
			t.Parallel()
			rec := &recorder{}
			addr := startServer(t, &Server{Handler: rec, ReadHeaderTimeout: time.Minute})
			c := dial(t, addr)
			c.SetDeadline(time.Now().Add(failAfter))
			if _, err := io.WriteString(c, in); err != nil {
				t.Fatalf("write: %v", err)
			}
			br := bufio.NewReader(c)
			if !closedByPeer(t, c, br) {
				t.Fatalf("connection not closed (or not at once)")
			}
			if n := len(rec.seen()); n != 0 {
				t.Errorf("handler saw %d requests", n)
			}
		})
	}
	// An HTTP version in the wrong case is HTTP, malformed: 400.
	addr := startServer(t, &Server{Handler: &recorder{}, ReadHeaderTimeout: time.Minute})
	c := dial(t, addr)
	c.SetDeadline(time.Now().Add(failAfter))
	io.WriteString(c, "GET / http/1.1\r\nHost: a\r\n\r\n")
	x, err := readReply(bufio.NewReader(c), http.MethodGet)
	if err != nil || x.res.StatusCode != http.StatusBadRequest {
		t.Fatalf("lower-case version: %v, %v; want 400", x.res, err)
	}
}

// TestPreface: a connection that starts with the HTTP/2 client preface is
// handed to H2, which reads the preface replayed.
func TestPreface(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		writes []string
	}{
		{name: "one write", writes: []string{preface}},
		{name: "preface split", writes: []string{preface[:5], preface[5:20], preface[20:]}},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := make(chan string, 1)
			rec := &recorder{}
			addr := startServer(t, &Server{Handler: rec, H2: func(nc net.Conn) {
				defer nc.Close()
				nc.SetReadDeadline(time.Now().Add(failAfter))
				b := make([]byte, len(preface))
				_, err := io.ReadFull(nc, b)
				if err != nil {
					got <- "error: " + err.Error()
					return
				}
				got <- string(b)
				io.WriteString(nc, "h2")
			}})
			c := dial(t, addr)
			c.SetDeadline(time.Now().Add(failAfter))
			for _, w := range tt.writes {
				if _, err := io.WriteString(c, w); err != nil {
					t.Fatalf("write: %v", err)
				}
			}
			select {
			case s := <-got:
				if s != preface {
					t.Errorf("H2 read %q, want the preface", s)
				}
			case <-time.After(failAfter):
				t.Fatal("H2 was not called")
			}
			out, err := io.ReadAll(c)
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			if got, want := string(out), "h2"; got != want {
				t.Errorf("client read %q, want %q (H2's answer only)", got, want)
			}
			if n := len(rec.seen()); n != 0 {
				t.Errorf("handler called %d times", n)
			}
		})
	}
}

// TestPrefaceWithoutH2: with no H2, a preface connection is closed.
func TestPrefaceWithoutH2(t *testing.T) {
	t.Parallel()
	addr := startServer(t, &Server{Handler: &recorder{}})
	c := dial(t, addr)
	c.SetDeadline(time.Now().Add(failAfter))
	if _, err := io.WriteString(c, preface); err != nil {
		t.Fatalf("write: %v", err)
	}
	out, err := io.ReadAll(c)
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read: %v", err)
	}
	if len(out) != 0 {
		t.Errorf("client read %q, want nothing", out)
	}
}

// TestPipelining: requests sent back to back before any answer are
// answered in order, each with only its own fields, and a chunked body read
// to its end leaves the connection able to carry the next request.
func TestPipelining(t *testing.T) {
	t.Parallel()
	t.Run("three GETs in one write", func(t *testing.T) {
		t.Parallel()
		rec := &recorder{}
		addr := startServer(t, &Server{Handler: rec})
		c := dial(t, addr)
		c.SetDeadline(time.Now().Add(failAfter))
		var in strings.Builder
		for i := range 3 {
			fmt.Fprintf(&in, "GET /%d HTTP/1.1\r\nHost: h%d\r\n", i, i)
			if i == 0 {
				in.WriteString("X-Only-First: 1\r\n")
			}
			in.WriteString("\r\n")
		}
		if _, err := io.WriteString(c, in.String()); err != nil {
			t.Fatalf("write: %v", err)
		}
		br := bufio.NewReader(c)
		for i := range 3 {
			x, err := readReply(br, http.MethodGet)
			if err != nil {
				t.Fatalf("response %d: %v", i, err)
			}
			if got, want := x.res.Header.Get("X-Target"), "/"+strconv.Itoa(i); got != want {
				t.Errorf("response %d X-Target = %q, want %q", i, got, want)
			}
		}
		// Each request is its own: nothing of one shows in the next.
		for i, s := range rec.seen() {
			if got, want := s.summary(), fmt.Sprintf("GET /%d h%d", i, i); got != want {
				t.Errorf("request %d: handler saw %q, want %q", i, got, want)
			}
			if _, ok := s.header["X-Only-First"]; ok != (i == 0) {
				t.Errorf("request %d: X-Only-First present: %v", i, ok)
			}
		}
	})
	t.Run("chunked POST then GET in one write", func(t *testing.T) {
		t.Parallel()
		rec := &recorder{}
		addr := startServer(t, &Server{Handler: rec})
		c := dial(t, addr)
		c.SetDeadline(time.Now().Add(failAfter))
		in := "POST /up HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n" +
			"GET /after HTTP/1.1\r\nHost: a\r\n\r\n"
		if _, err := io.WriteString(c, in); err != nil {
			t.Fatalf("write: %v", err)
		}
		br := bufio.NewReader(c)
		for _, want := range []string{"/up", "/after"} {
			x, err := readReply(br, http.MethodGet)
			if err != nil {
				t.Fatalf("response for %s: %v", want, err)
			}
			if got := x.res.Header.Get("X-Target"); got != want {
				t.Errorf("response X-Target = %q, want %q", got, want)
			}
			if x.res.Close {
				t.Errorf("response for %s closes the connection", want)
			}
		}
		// The connection is kept: the chunked body was read to its end.
		if _, err := io.WriteString(c, next); err != nil {
			t.Fatalf("write: %v", err)
		}
		if _, err := readReply(br, http.MethodGet); err != nil {
			t.Fatalf("the connection did not carry a third request: %v", err)
		}
		if got, want := rec.seen()[0].body, "abc"; got != want {
			t.Errorf("POST body = %q, want %q", got, want)
		}
	})
	t.Run("chunked upload in pieces keeps the connection", func(t *testing.T) {
		t.Parallel()
		rec := &recorder{}
		addr := startServer(t, &Server{Handler: rec})
		c := dial(t, addr)
		c.SetDeadline(time.Now().Add(failAfter))
		for _, w := range []string{"POST /up HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", "3\r\nabc\r\n", "2\r", "\nde\r\n0\r\n", "\r\n"} {
			if _, err := io.WriteString(c, w); err != nil {
				t.Fatalf("write: %v", err)
			}
		}
		br := bufio.NewReader(c)
		x, err := readReply(br, http.MethodPost)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := string(x.body), "abcde"; got != want {
			t.Errorf("echoed body = %q, want %q", got, want)
		}
		if _, err := io.WriteString(c, next); err != nil {
			t.Fatalf("write: %v", err)
		}
		if _, err := readReply(br, http.MethodGet); err != nil {
			t.Fatalf("the connection did not carry the next request: %v", err)
		}
	})
}

// TestExpectContinue: the 100 comes when the handler first reads the body,
// and only then does the client send it.
func TestExpectContinue(t *testing.T) {
	t.Parallel()
	t.Run("body read", func(t *testing.T) {
		t.Parallel()
		addr := startServer(t, &Server{Handler: &recorder{}})
		c := dial(t, addr)
		c.SetDeadline(time.Now().Add(failAfter))
		if _, err := io.WriteString(c, "PUT /up HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"); err != nil {
			t.Fatalf("write: %v", err)
		}
		br := bufio.NewReader(c)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("read the 100: %v", err)
		}
		if got, want := res.StatusCode, http.StatusContinue; got != want {
			t.Fatalf("status = %d, want %d", got, want)
		}
		if _, err := io.WriteString(c, "hello"); err != nil {
			t.Fatalf("write the body: %v", err)
		}
		x, err := readReply(br, http.MethodPut)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := x.res.StatusCode, http.StatusOK; got != want {
			t.Errorf("status = %d, want %d", got, want)
		}
		if got, want := string(x.body), "hello"; got != want {
			t.Errorf("body = %q, want %q", got, want)
		}
	})
	t.Run("body not read", func(t *testing.T) {
		t.Parallel()
		addr := startServer(t, &Server{Handler: &recorder{}})
		c := dial(t, addr)
		c.SetDeadline(time.Now().Add(failAfter))
		if _, err := io.WriteString(c, "PUT /noread HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"); err != nil {
			t.Fatalf("write: %v", err)
		}
		br := bufio.NewReader(c)
		x, err := readReply(br, http.MethodPut)
		if err != nil {
			t.Fatal(err)
		}
		if len(x.info) != 0 {
			t.Errorf("1xx responses %v, want none: the body was not read", x.info)
		}
		if got, want := x.res.StatusCode, http.StatusOK; got != want {
			t.Errorf("status = %d, want %d", got, want)
		}
		// The body never came: the connection cannot carry another request.
		if !closedByPeer(t, c, br) {
			t.Errorf("connection left open with the body unsent")
		}
	})
}

// TestClientGone: a client that closes its connection while its request
// is in a handler cancels the request's context: at once for a request
// without a body, and once the body is read for one with.
func TestClientGone(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		in   string
	}{
		{name: "GET", in: "GET / HTTP/1.1\r\nHost: a\r\n\r\n"},
		{name: "POST, body read", in: "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello"},
		{name: "chunked POST, body read", in: "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			entered := make(chan struct{})
			canceled := make(chan error, 1)
			addr := startServer(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if _, err := io.ReadAll(r.Body); err != nil {
					canceled <- fmt.Errorf("read body: %w", err)
					return
				}
				close(entered)
				select {
				case <-r.Context().Done():
					canceled <- r.Context().Err()
				case <-time.After(failAfter):
					canceled <- errors.New("context not canceled")
				}
			})})
			c := dial(t, addr)
			c.SetDeadline(time.Now().Add(failAfter))
			if _, err := io.WriteString(c, tt.in); err != nil {
				t.Fatalf("write: %v", err)
			}
			select {
			case <-entered:
			case err := <-canceled:
				t.Fatal(err)
			case <-time.After(failAfter):
				t.Fatal("handler not called")
			}
			c.Close()
			if err := testnet.Recv(t, canceled, failAfter, "word from the handler"); !errors.Is(err, context.Canceled) {
				t.Errorf("request context: %v, want %v", err, context.Canceled)
			}
		})
	}
}

// TestBodyReadElsewhere: the body may be read on another goroutine while
// the handler's goroutine writes the response (as the proxy streams an
// upload while it relays the answer); under -race, this is the check that
// the two sides share nothing unguarded.
func TestBodyReadElsewhere(t *testing.T) {
	t.Parallel()
	addr := startServer(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		read := make(chan []byte, 1)
		go func() {
			b, _ := io.ReadAll(r.Body)
			read <- b
		}()
		w.Header().Set("X-Early", "1")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		io.WriteString(w, "got ")
		w.Write(<-read)
	})})
	c := dial(t, addr)
	c.SetDeadline(time.Now().Add(failAfter))
	br := bufio.NewReader(c)
	body := strings.Repeat("b", 64<<10)
	for i, in := range []string{
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 65536\r\n\r\n" + body,
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n10000\r\n" + body + "\r\n0\r\n\r\n",
	} {
		// The write runs beside the read: the server answers before it
		// has read the whole body.
		wrote := make(chan error, 1)
		go func() {
			_, err := io.WriteString(c, in)
			wrote <- err
		}()
		x, err := readReply(br, http.MethodPost)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if err := testnet.Recv(t, wrote, failAfter, "the end of the request's write"); err != nil {
			t.Fatalf("request %d: write: %v", i, err)
		}
		if got, want := string(x.body), "got "+body; got != want {
			t.Errorf("request %d: body of %d bytes, want %d", i, len(got), len(want))
		}
		if x.res.Close {
			t.Errorf("request %d: connection closes after a body read to its end", i)
		}
	}
}

// TestHijack: a hijacking handler gets the bytes the client sent right
// behind its request.
func TestHijack(t *testing.T) {
	t.Parallel()
	got := make(chan string, 1)
	addr := startServer(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		nc, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			got <- "hijack: " + err.Error()
			return
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(failAfter))
		b := make([]byte, 5)
		if _, err := io.ReadFull(brw, b); err != nil {
			got <- "read: " + err.Error()
			return
		}
		got <- string(b)
		io.WriteString(nc, "RAW\n")
	})})
	c := dial(t, addr)
	c.SetDeadline(time.Now().Add(failAfter))
	if _, err := io.WriteString(c, "GET /up HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\nEXTRA"); err != nil {
		t.Fatalf("write: %v", err)
	}
	if s, want := testnet.Recv(t, got, failAfter, "word from the hijacking handler"), "EXTRA"; s != want {
		t.Errorf("handler read %q after the request, want %q", s, want)
	}
	out, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if got, want := string(out), "RAW\n"; got != want {
		t.Errorf("client read %q, want %q (the raw reply alone)", got, want)
	}
}

// TestShutdown: Shutdown stops the listener (Serve returns
// ErrServerClosed and a new dial fails), closes an idle keep-alive
// connection at once, lets a request in flight finish with a response that
// says Connection: close, and returns nil once it has.
func TestShutdown(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{})
	release, releaseAll := testnet.Releaser(t)
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(entered)
			<-release
		}
		io.WriteString(w, "ok")
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	defer s.Close()
	addr := ln.Addr().String()

	// An idle keep-alive connection, after one request.
	idle := dial(t, addr)
	idle.SetDeadline(time.Now().Add(failAfter))
	idleBR := bufio.NewReader(idle)
	if _, err := io.WriteString(idle, "GET / HTTP/1.1\r\nHost: a\r\n\r\n"); err != nil {
		t.Fatalf("write: %v", err)
	}
	if _, err := readReply(idleBR, http.MethodGet); err != nil {
		t.Fatal(err)
	}
	// A request in flight.
	busy := dial(t, addr)
	busy.SetDeadline(time.Now().Add(failAfter))
	if _, err := io.WriteString(busy, "GET /slow HTTP/1.1\r\nHost: a\r\n\r\n"); err != nil {
		t.Fatalf("write: %v", err)
	}
	select {
	case <-entered:
	case <-time.After(failAfter):
		t.Fatal("handler not called")
	}

	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(ctx) }()
	// Serve returns once Shutdown has closed the listeners, which it does
	// after it marked the server as shutting down.
	if err := testnet.Recv(t, served, failAfter, "return from Serve after Shutdown"); !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve returned %v, want ErrServerClosed", err)
	}
	if !closedByPeer(t, idle, idleBR) {
		t.Errorf("idle connection left open by Shutdown")
	}
	releaseAll()
	x, err := readReply(bufio.NewReader(busy), http.MethodGet)
	if err != nil {
		t.Fatalf("the request in flight was not answered: %v", err)
	}
	if got, want := string(x.body), "ok"; got != want {
		t.Errorf("body = %q, want %q", got, want)
	}
	if !x.res.Close {
		t.Errorf("response during Shutdown has no Connection: close")
	}
	if err := testnet.Recv(t, shut, failAfter, "return from Shutdown"); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if c, err := net.DialTimeout("tcp", addr, failAfter); err == nil {
		c.Close()
		t.Errorf("dial after Shutdown succeeded")
	}
}

// TestMaxConns: with MaxConns connections open, one more is refused (reset
// or closed at once), the ones open are not disturbed, and closing one
// frees its place for a new connection.
func TestMaxConns(t *testing.T) {
	t.Parallel()
	addr := startServer(t, &Server{Handler: &recorder{}, MaxConns: 2})
	var brs []*bufio.Reader
	var conns []*net.TCPConn
	for range 2 {
		c := dial(t, addr)
		c.SetDeadline(time.Now().Add(failAfter))
		br := bufio.NewReader(c)
		// A request answered: the connection is accepted and counted.
		if _, err := io.WriteString(c, next); err != nil {
			t.Fatalf("write: %v", err)
		}
		if _, err := readReply(br, http.MethodGet); err != nil {
			t.Fatal(err)
		}
		conns, brs = append(conns, c), append(brs, br)
	}
	// The third is reset as soon as it is accepted: its dial may see the
	// reset already, else its first read does.
	third, err := net.DialTimeout("tcp", addr, failAfter)
	if err == nil {
		defer third.Close()
		third.SetDeadline(time.Now().Add(failAfter))
		io.WriteString(third, next) // may fail: the server may have reset it already
		_, err = third.Read(make([]byte, 1))
	}
	if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("third connection: %v, want EOF or a reset", err)
	}
	// Closing one frees its place.
	conns[0].Close()
	// The server notices the close when its read returns: until then a
	// new connection may still be refused. Polled (no event says the
	// server has counted the close), bounded in count and time.
	deadline := time.Now().Add(failAfter)
	for i := 0; ; i++ {
		if i == 1000 || time.Now().After(deadline) {
			t.Fatalf("no connection accepted within %v after one of two closed", failAfter)
		}
		if i > 0 {
			time.Sleep(5 * time.Millisecond)
		}
		c, err := net.DialTimeout("tcp", addr, failAfter)
		if err != nil {
			continue // reset while the server still counts two
		}
		c.SetDeadline(time.Now().Add(failAfter))
		io.WriteString(c, next)
		_, err = readReply(bufio.NewReader(c), http.MethodGet)
		c.Close()
		if err == nil {
			break
		}
	}
	// The second connection was never disturbed.
	if _, err := io.WriteString(conns[1], next); err != nil {
		t.Fatalf("write: %v", err)
	}
	if _, err := readReply(brs[1], http.MethodGet); err != nil {
		t.Fatal(err)
	}
}

// TestHeadInPieces: a head that comes in several writes, one that stalls
// (and moves to a smaller buffer, shrink) before it goes on, and one larger
// than the read buffer, are read whole.
func TestHeadInPieces(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 10<<10)
	huge := strings.Repeat("b", readSize+1000) // the limit is raised for it below
	cases := []struct {
		name   string
		writes []string
		value  string // X-A as the handler must see it
	}{
		{name: "request line split", writes: []string{"GE", "T / HT", "TP/1.1\r", "\nHost: a\r\nX-A: 1\r\n\r", "\n"}, value: "1"},
		{name: "stalled, then a long field", writes: []string{"GET / HTTP/1.1\r\nHost: a\r\n", "X-A: " + long[:3000], long[3000:] + "\r\n\r\n"}, value: long},
		{name: "in one write", writes: []string{"GET / HTTP/1.1\r\nHost: a\r\nX-A: " + long + "\r\n\r\n"}, value: long},
		{name: "larger than the read buffer in one write", writes: []string{"GET / HTTP/1.1\r\nHost: a\r\nX-A: " + huge + "\r\n\r\n"}, value: huge},
		{name: "stalled, moved to a smaller buffer, then larger than the read buffer", writes: []string{"GET / HTTP/1.1\r\nHost: a\r\n", "X-A: " + huge[:3000], huge[3000:] + "\r\n\r\n"}, value: huge},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := &recorder{}
			addr := startServer(t, &Server{Handler: rec, Limits: Limits{MaxHeadBytes: 2 * readSize}})
			c := dial(t, addr)
			c.SetDeadline(time.Now().Add(failAfter))
			for _, w := range tt.writes {
				if _, err := io.WriteString(c, w); err != nil {
					t.Fatalf("write: %v", err)
				}
			}
			br := bufio.NewReader(c)
			x, err := readReply(br, http.MethodGet)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := x.res.StatusCode, http.StatusOK; got != want {
				t.Fatalf("status = %d, want %d", got, want)
			}
			reqs := rec.seen()
			if len(reqs) != 1 {
				t.Fatalf("handler saw %d requests, want 1", len(reqs))
			}
			if got := reqs[0].header.Get("X-A"); got != tt.value {
				t.Errorf("handler saw X-A of %d bytes, want %d", len(got), len(tt.value))
			}
			// And the connection goes on.
			if _, err := io.WriteString(c, next); err != nil {
				t.Fatalf("write: %v", err)
			}
			if _, err := readReply(br, http.MethodGet); err != nil {
				t.Fatalf("the connection did not carry the next request: %v", err)
			}
		})
	}
}

// TestResponseFraming covers what a handler can make of a response beyond
// the rule table: trailers, a Connection: close of its own, a body shorter
// than its Content-Length, a panic.
func TestResponseFraming(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		handler http.HandlerFunc
		status  int  // 0: no response at all
		closed  bool // the connection closes after the response
		check   func(t *testing.T, x reply, err error)
	}{
		{name: "declared trailer on a small body", status: 200, handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Trailer", "X-Sum")
			io.WriteString(w, "abc")
			w.Header().Set("X-Sum", "42")
		}, check: func(t *testing.T, x reply, err error) {
			if err != nil {
				t.Fatal(err)
			}
			if got, want := string(x.body), "abc"; got != want {
				t.Errorf("body = %q, want %q", got, want)
			}
			if got, want := x.res.Trailer.Get("X-Sum"), "42"; got != want {
				t.Errorf("trailer X-Sum = %q, want %q", got, want)
			}
		}},
		{name: "TrailerPrefix trailer on a small body", status: 200, handler: func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "abc")
			w.Header().Set(http.TrailerPrefix+"X-Sum", "42")
		}, check: func(t *testing.T, x reply, err error) {
			if err != nil {
				t.Fatal(err)
			}
			if got, want := x.res.Trailer.Get("X-Sum"), "42"; got != want {
				t.Errorf("trailer X-Sum = %q, want %q", got, want)
			}
		}},
		{name: "handler's Connection: close", status: 200, closed: true, handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Connection", "close")
			io.WriteString(w, "abc")
		}},
		{name: "304 keeps its Content-Length", status: 304, handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "42")
			w.WriteHeader(http.StatusNotModified)
		}, check: func(t *testing.T, x reply, err error) {
			if err != nil {
				t.Fatal(err)
			}
			if got, want := x.res.Header.Get("Content-Length"), "42"; got != want {
				t.Errorf("Content-Length = %q, want %q", got, want)
			}
		}},
		{name: "body shorter than its Content-Length", status: 200, closed: true, handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "10")
			io.WriteString(w, "abc")
		}, check: func(t *testing.T, x reply, err error) {
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("reading the short body: %v, want %v", err, io.ErrUnexpectedEOF)
			}
		}},
		{name: "body longer than its Content-Length is cut", status: 200, handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "3")
			if _, err := io.WriteString(w, "abcdef"); !errors.Is(err, http.ErrContentLength) {
				panic(fmt.Sprintf("Write returned %v, want ErrContentLength", err))
			}
		}, check: func(t *testing.T, x reply, err error) {
			if err != nil {
				t.Fatal(err)
			}
			if got, want := string(x.body), "abc"; got != want {
				t.Errorf("body = %q, want %q", got, want)
			}
		}},
		{name: "panic before writing", closed: true, handler: func(w http.ResponseWriter, r *http.Request) {
			panic("boom")
		}},
		{name: "ErrAbortHandler after a flush", status: 200, closed: true, handler: func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "abc")
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}, check: func(t *testing.T, x reply, err error) {
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("reading the cut body: %v, want %v", err, io.ErrUnexpectedEOF)
			}
		}},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			addr := startServer(t, &Server{Handler: tt.handler})
			c := dial(t, addr)
			c.SetDeadline(time.Now().Add(failAfter))
			if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n"); err != nil {
				t.Fatalf("write: %v", err)
			}
			br := bufio.NewReader(c)
			x, err := readReply(br, http.MethodGet)
			if tt.status == 0 {
				if err == nil {
					t.Fatalf("got a %d response, want none", x.res.StatusCode)
				}
				if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Errorf("read: %v, want the connection closed", err)
				}
				return
			}
			if x.res == nil {
				t.Fatalf("no response: %v", err)
			}
			if got, want := x.res.StatusCode, tt.status; got != want {
				t.Errorf("status = %d, want %d", got, want)
			}
			if tt.check != nil {
				tt.check(t, x, err)
			}
			if tt.closed {
				if err == nil && !closedByPeer(t, c, br) {
					t.Errorf("connection left open, want it closed")
				}
				return
			}
			if _, err := io.WriteString(c, next); err != nil {
				t.Fatalf("write: %v", err)
			}
			if _, err := readReply(br, http.MethodGet); err != nil {
				t.Fatalf("the connection did not carry the next request: %v", err)
			}
		})
	}
}

// TestTimeouts: a head that stalls is cut at ReadHeaderTimeout, an idle
// keep-alive connection at IdleTimeout; either way the connection closes
// with nothing sent, and not before its timeout.
func TestTimeouts(t *testing.T) {
	t.Parallel()
	const short = 100 * time.Millisecond
	cases := []struct {
		name         string
		header, idle time.Duration
		first        string // a request answered before the timed part; "" for none
		then         string // written, then the connection must be cut
		timeout      time.Duration
	}{
		{name: "stalled first head", header: short, idle: time.Minute, then: "GET / HTTP/1.1\r\nHo", timeout: short},
		{name: "silent new connection", header: short, idle: time.Minute, timeout: short},
		{name: "idle keep-alive", header: time.Minute, idle: short, first: next, timeout: short},
		{name: "stalled second head", header: short, idle: time.Minute, first: next, then: "GET / HTTP/1.1\r\nHo", timeout: short},
		{name: "stalled head pipelined behind a body", header: short, idle: time.Minute, first: "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhelloGET / HTTP/1.1\r\nHo", timeout: short},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			addr := startServer(t, &Server{Handler: &recorder{}, ReadHeaderTimeout: tt.header, IdleTimeout: tt.idle})
			c := dial(t, addr)
			c.SetDeadline(time.Now().Add(failAfter))
			br := bufio.NewReader(c)
			if tt.first != "" {
				if _, err := io.WriteString(c, tt.first); err != nil {
					t.Fatalf("write: %v", err)
				}
				if _, err := readReply(br, http.MethodGet); err != nil {
					t.Fatal(err)
				}
			}
			start := time.Now()
			if tt.then != "" {
				if _, err := io.WriteString(c, tt.then); err != nil {
					t.Fatalf("write: %v", err)
				}
			}
			if !closedByPeer(t, c, br) {
				t.Fatalf("connection not closed within %v", failAfter)
			}
			// The server's clock started a little before start: half the
			// timeout tells a timeout from a close at once.
			if elapsed := time.Since(start); elapsed < tt.timeout/2 {
				t.Errorf("connection closed after %v, before its timeout %v", elapsed, tt.timeout)
			}
		})
	}
}

// TestShutdownDeadline: a request still in a handler when Shutdown's
// context ends has its connection closed, and Shutdown returns the
// context's error.
func TestShutdownDeadline(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{})
	release := make(chan struct{})
	defer close(release)
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
	})}
	addr := startServer(t, s)
	c := dial(t, addr)
	c.SetDeadline(time.Now().Add(failAfter))
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n"); err != nil {
		t.Fatalf("write: %v", err)
	}
	select {
	case <-entered:
	case <-time.After(failAfter):
		t.Fatal("handler not called")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Shutdown = %v, want %v", err, context.Canceled)
	}
	if !closedByPeer(t, c, bufio.NewReader(c)) {
		t.Errorf("connection of the request in flight left open")
	}
}

// TestSlowAfterTheHead: ReadHeaderTimeout and IdleTimeout bound the head
// only. A body that comes slowly, and a hijacked connection, are read past
// them. The pause is the slow client itself, not a synchronisation: the
// handler has signalled it got the first part before it starts.
func TestSlowAfterTheHead(t *testing.T) {
	t.Parallel()
	const timeout = 100 * time.Millisecond
	cases := []struct {
		name   string
		first  string // a request answered first, on the same connection; "" for none
		in     string // the head and the first part, before the pause
		rest   string // after the pause
		hijack bool
	}{
		{name: "body on a new connection", in: "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nhello", rest: "world"},
		{name: "chunked body on a new connection", in: "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", rest: "5\r\nworld\r\n0\r\n\r\n"},
		{name: "body on a kept-alive connection", first: next, in: "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nhello", rest: "world"},
		{name: "hijacked connection", in: "GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\nhello", rest: "world", hijack: true},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			firstPart := make(chan struct{})
			got := make(chan string, 1)
			addr := startServer(t, &Server{ReadHeaderTimeout: timeout, IdleTimeout: timeout, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/next" {
					return
				}
				var rd io.Reader = r.Body
				if tt.hijack {
					nc, brw, err := http.NewResponseController(w).Hijack()
					if err != nil {
						got <- "hijack: " + err.Error()
						return
					}
					defer nc.Close()
					rd = brw
				}
				b := make([]byte, 10)
				if _, err := io.ReadFull(rd, b[:5]); err != nil {
					got <- "read the first part: " + err.Error()
					return
				}
				close(firstPart)
				if _, err := io.ReadFull(rd, b[5:]); err != nil {
					got <- "read the rest: " + err.Error()
					return
				}
				got <- string(b)
			})})
			c := dial(t, addr)
			c.SetDeadline(time.Now().Add(failAfter))
			br := bufio.NewReader(c)
			if tt.first != "" {
				if _, err := io.WriteString(c, tt.first); err != nil {
					t.Fatalf("write: %v", err)
				}
				if _, err := readReply(br, http.MethodGet); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := io.WriteString(c, tt.in); err != nil {
				t.Fatalf("write: %v", err)
			}
			select {
			case <-firstPart:
			case s := <-got:
				t.Fatal(s)
			case <-time.After(failAfter):
				t.Fatal("handler did not read the first part")
			}
			<-time.After(3 * timeout) // the slow client
			if _, err := io.WriteString(c, tt.rest); err != nil {
				t.Fatalf("write the rest: %v", err)
			}
			if s, want := testnet.Recv(t, got, failAfter, "word from the handler"), "helloworld"; s != want {
				t.Errorf("handler read %q, want %q", s, want)
			}
		})
	}
}

// TestHeldBody: a Content-Length body that came with its head is lent to
// the handler where it lies (Held), once; a body still to come, one owed
// a 100 Continue, and a chunked one are not, and are read as usual.
func TestHeldBody(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		req      string
		wantHeld bool
	}{
		{name: "with its head", req: "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello", wantHeld: true},
		{name: "100-continue", req: "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"},
		{name: "chunked", req: "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			addr := startServer(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				held := r.Body.(interface{ Held() []byte }).Held()
				again := r.Body.(interface{ Held() []byte }).Held()
				rest, err := io.ReadAll(r.Body)
				fmt.Fprintf(w, "held=%q again=%q rest=%q err=%v", held, again, rest, err)
			})})
			c := dial(t, addr)
			c.SetDeadline(time.Now().Add(failAfter))
			if _, err := io.WriteString(c, tt.req); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(c)
			if strings.Contains(tt.req, "100-continue") {
				x, err := readInterim(br)
				if err != nil || x != http.StatusContinue {
					t.Fatalf("interim = %d, %v; want 100", x, err)
				}
				io.WriteString(c, "hello")
			}
			x, err := readReply(br, http.MethodPost)
			if err != nil {
				t.Fatal(err)
			}
			want := `held="" again="" rest="hello" err=<nil>`
			if tt.wantHeld {
				want = `held="hello" again="" rest="" err=<nil>`
			}
			if got := string(x.body); got != want {
				t.Fatalf("handler saw %s, want %s", got, want)
			}
		})
	}
}

// readInterim reads one response head from br and returns its status.
func readInterim(br *bufio.Reader) (int, error) {
	res, err := http.ReadResponse(br, &http.Request{Method: http.MethodPost})
	if err != nil {
		return 0, err
	}
	return res.StatusCode, nil
}

// TestWatcherDisarmed: the watcher's timer is armed while a request is in
// its handler and stopped once none is, so that a lone request leaves no
// tick behind to wake an idle process.
func TestWatcherDisarmed(t *testing.T) {
	t.Parallel()
	in := make(chan struct{})
	release, releaseAll := testnet.Releaser(t)
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/wait" {
			in <- struct{}{}
			<-release
		}
	})}
	addr := startServer(t, s)
	armed := func() bool { return s.watcher.Armed() }
	c := dial(t, addr)
	c.SetDeadline(time.Now().Add(failAfter))
	br := bufio.NewReader(c)
	io.WriteString(c, "GET /wait HTTP/1.1\r\nHost: a\r\n\r\n")
	testnet.Recv(t, in, failAfter, "request in the handler")
	if !armed() {
		t.Fatal("no watcher timer while a request is in its handler")
	}
	releaseAll()
	if _, err := readReply(br, http.MethodGet); err != nil {
		t.Fatal(err)
	}
	if armed() {
		t.Error("the watcher's timer is still armed after the last request")
	}
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	if _, err := readReply(br, http.MethodGet); err != nil {
		t.Fatal(err)
	}
	if armed() {
		t.Error("the watcher's timer is armed after a lone request")
	}
}

// TestWholeBodyGoesOutAtOnce: a response of declared length whose body the
// handler writes whole in one Write is on the wire before the handler
// returns (the proxy's case: no copy into the engine's buffer). The client
// reads the response while the handler is held; were it buffered until
// the handler returns, the read would wait out failAfter.
func TestWholeBodyGoesOutAtOnce(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	addr := startServer(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "5")
		io.WriteString(w, "hello")
		<-release
	})})
	t.Cleanup(func() { close(release) }) // a failed test's handler returns too
	c := dial(t, addr)
	br := bufio.NewReader(c)
	c.SetDeadline(time.Now().Add(failAfter))
	for i := range 2 {
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
		rep, err := readReply(br, http.MethodGet)
		if err != nil || rep.res.StatusCode != 200 || string(rep.body) != "hello" {
			t.Fatalf("request %d: %v; want 200 hello before the handler returned", i, err)
		}
		select {
		case release <- struct{}{}:
		case <-time.After(failAfter):
			t.Fatalf("request %d: the handler did not wait to be released", i)
		}
	}
}

// TestPartialHeadThenGone: clients that send part of a head and leave are
// let go at once, not held until the header timeout. Each part and its FIN
// (or reset) are there before the server first reads the connection, so
// that the readiness of the end is often taken before the read session
// begins, which forgets it: only a read after the part's finds the end.
func TestPartialHeadThenGone(t *testing.T) {
	t.Parallel()
	const conns = 50
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	for i := range conns {
		c := dial(t, ln.Addr().String())
		if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n")); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			c.SetLinger(0)
			c.Close()
		} else {
			c.CloseWrite()
		}
	}
	// The connections wait in the listener's backlog until Serve.
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), ReadHeaderTimeout: time.Minute}
	accepted := make(chan struct{}, conns)
	serveOn(t, s, &notifyListener{Listener: ln, accepted: accepted})
	for range conns {
		select {
		case <-accepted:
		case <-time.After(failAfter):
			t.Fatal("the connections were not all accepted")
		}
	}
	deadline := time.Now().Add(failAfter)
	for s.open.Load() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d connections still open %v after their clients left", s.open.Load(), conns, failAfter)
		}
		time.Sleep(time.Millisecond) // no event says the server closed them
	}
}

// notifyListener says on accepted when it has accepted a connection.
type notifyListener struct {
	net.Listener
	accepted chan struct{}
}

func (l *notifyListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted <- struct{}{}
	}
	return c, err
}

// TestUnwatch: a handler that calls Unwatch (engine.Unwatcher) is no
// longer counted in the watcher's ticks, so that a request that only waits
// on queue (the readiness probe's hold) leaves the timer stopped; a
// request still watched keeps it armed.
func TestUnwatch(t *testing.T) {
	t.Parallel()
	in := make(chan struct{})
	release, releaseAll := testnet.Releaser(t)
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/unwatch" {
			w.(engine.Unwatcher).Unwatch()
		}
		in <- struct{}{}
		<-release
	})}
	addr := startServer(t, s)
	armed := func() bool { return s.watcher.Armed() }
	c1, c2 := dial(t, addr), dial(t, addr)
	for _, c := range []net.Conn{c1, c2} {
		c.SetDeadline(time.Now().Add(failAfter))
	}
	io.WriteString(c1, "GET /unwatch HTTP/1.1\r\nHost: a\r\n\r\n")
	testnet.Recv(t, in, failAfter, "/unwatch in its handler")
	if armed() {
		t.Error("the watcher's timer is armed for a request that gave up its watch")
	}
	io.WriteString(c2, "GET /watched HTTP/1.1\r\nHost: a\r\n\r\n")
	testnet.Recv(t, in, failAfter, "/watched in its handler")
	if !armed() {
		t.Error("no watcher timer while a watched request is in its handler")
	}
	releaseAll()
	for _, c := range []net.Conn{c1, c2} {
		if _, err := readReply(bufio.NewReader(c), http.MethodGet); err != nil {
			t.Fatal(err)
		}
	}
	if armed() {
		t.Error("the watcher's timer is still armed after the last request")
	}
}

// TestLingerOnlyWhenTheClientMaySendOn: a 503 to a request whose client
// asked for the close ("Connection: close") and sent it whole is closed at
// once: that client sends nothing more (RFC 9112 section 9.6), so bytes it
// sends anyway meet a closed socket and draw a reset. A 503 on which the
// server itself chose to close (the handler's "Connection: close") is
// closed in stages (lingerClose): what the client sends on is read and
// dropped, and the client reads end of file.
func TestLingerOnlyWhenTheClientMaySendOn(t *testing.T) {
	t.Parallel()
	addr := startServer(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/server-close" {
			w.Header().Set("Connection", "close")
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	})})
	for _, tt := range []struct {
		name, in  string
		wantReset bool
	}{
		{name: "client asked for the close", in: "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", wantReset: true},
		{name: "server chose the close", in: "GET /server-close HTTP/1.1\r\nHost: a\r\n\r\n", wantReset: false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := dial(t, addr)
			c.SetDeadline(time.Now().Add(failAfter))
			io.WriteString(c, tt.in)
			// The response, then end of file: the server closed, or shut
			// its writing side down (lingering).
			if _, err := io.ReadAll(c); err != nil {
				t.Fatalf("read the response: %v", err)
			}
			eof := time.Now()
			if _, err := io.WriteString(c, "more"); err != nil {
				t.Fatalf("write after the response: %v", err)
			}
			// A closed socket answers "more" with a reset; the client,
			// half closed by the end of file it read, reports it on a
			// later write (EPIPE, Linux's tcp_reset), not on a read. The
			// loopback most often delivers the reset before the write
			// returns, but on a loaded machine it may come a little
			// later: the writes go on until one fails, for half of
			// lingerTime at most, before which a lingering server (which
			// reads "more" and drops it) closes nothing.
			var err error
			for i := 0; ; i++ {
				_, err = io.WriteString(c, "more")
				if err != nil || !tt.wantReset || i == 500 || time.Since(eof) > lingerTime/2 {
					break
				}
				time.Sleep(time.Millisecond)
			}
			if gotReset := errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE); gotReset != tt.wantReset {
				t.Errorf("writes after the response: %v; want a reset %v (lingering %v)", err, tt.wantReset, !tt.wantReset)
			}
		})
	}
}
