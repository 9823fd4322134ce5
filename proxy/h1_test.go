package proxy

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queue-dev/queue/h1"
	"github.com/queue-dev/queue/headers"
	"github.com/queue-dev/queue/internal/testnet"
	"github.com/queue-dev/queue/stats"
)

// rawUpstream is a fake upstream on raw TCP: serve runs for every accepted
// connection, which is closed when serve returns. It counts accepts.
type rawUpstream struct {
	addr    string
	accepts atomic.Int64
}

func startRawUpstream(t *testing.T, serve func(c net.Conn, br *bufio.Reader)) *rawUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &rawUpstream{addr: ln.Addr().String()}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns = map[net.Conn]struct{}{}
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.accepts.Add(1)
			mu.Lock()
			conns[c] = struct{}{}
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() {
					c.Close()
					mu.Lock()
					delete(conns, c)
					mu.Unlock()
				}()
				serve(c, bufio.NewReader(c))
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return u
}

// cannedUpstream answers every request on a connection with resp; with
// closeAfter it closes the connection after the first response, else it
// keeps serving the connection until the peer closes it.
func cannedUpstream(t *testing.T, resp string, closeAfter bool) *rawUpstream {
	t.Helper()
	return startRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		for range 100 { // bounded: a test sends a few requests per connection
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			if _, err := io.WriteString(c, resp); err != nil || closeAfter {
				return
			}
		}
	})
}

// frontFor serves a Proxy for upstream on an httptest server and returns a
// client for it and its URL.
func frontFor(t *testing.T, upstream string) (*http.Client, string) {
	t.Helper()
	_, client, url := proxyFront(t, upstream)
	return client, url
}

// proxyFront is frontFor that also returns the Proxy.
func proxyFront(t *testing.T, upstream string) (*Proxy, *http.Client, string) {
	t.Helper()
	p, err := New(Config{Upstream: upstream})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(func() {
		srv.Close()
		p.Close()
	})
	tr := &http.Transport{DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	return p, &http.Client{Transport: tr, Timeout: 10 * time.Second}, srv.URL
}

// outcome is what a client saw of one exchange.
type outcome struct {
	code    int
	header  http.Header
	trailer http.Header
	body    string
	err     error // from Do, or from reading the body
}

func exchange(c *http.Client, method, url string, body io.Reader) outcome {
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		return outcome{err: err}
	}
	return do(c, req)
}

// do is exchange for a request built by the caller.
func do(c *http.Client, req *http.Request) outcome {
	res, err := c.Do(req)
	if err != nil {
		return outcome{err: err}
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return outcome{code: res.StatusCode, header: res.Header, trailer: res.Trailer, body: string(b), err: err}
}

// TestH1ResponseFraming sends two requests in a row through the proxy to a
// raw upstream that answers each with a canned response, and checks what
// the client gets and whether the upstream connection was reused (the
// number of connections the upstream accepted).
func TestH1ResponseFraming(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		method      string
		resp        string
		closeAfter  bool
		wantCode    int
		wantBody    string
		wantHeader  map[string]string // "" means absent
		wantValues  map[string][]string
		wantTrailer map[string]string
		wantAccepts int64
	}{{
		name:        "content-length",
		resp:        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: a\r\n\r\nhello",
		wantCode:    200,
		wantBody:    "hello",
		wantHeader:  map[string]string{"X-A": "a"},
		wantAccepts: 1,
	}, {
		// The upstream's Date is passed on, and no second one added.
		name:        "date and repeated fields",
		resp:        "HTTP/1.1 200 OK\r\nDate: Mon, 02 Jan 2006 15:04:05 GMT\r\nSet-Cookie: a=1\r\nContent-Length: 2\r\nset-cookie:b=2 \r\n\r\nok",
		wantCode:    200,
		wantBody:    "ok",
		wantHeader:  map[string]string{"Date": "Mon, 02 Jan 2006 15:04:05 GMT", "Content-Length": "2"},
		wantValues:  map[string][]string{"Date": {"Mon, 02 Jan 2006 15:04:05 GMT"}, "Set-Cookie": {"a=1", "b=2"}},
		wantAccepts: 1,
	}, {
		// Too large for the engine to build its head next to the lines.
		name:        "large head",
		resp:        "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("b", 3000) + "\r\nContent-Length: 2\r\n\r\nok",
		wantCode:    200,
		wantBody:    "ok",
		wantHeader:  map[string]string{"X-Big": strings.Repeat("b", 3000)},
		wantAccepts: 1,
	}, {
		name: "chunked with extensions and trailers",
		resp: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n" +
			"5;ext=1\r\nhello\r\n6;name=\"quoted value\";x\r\n world\r\n0;last\r\nX-Sum: abc\r\nX-Other: def\r\n\r\n",
		wantCode:    200,
		wantBody:    "hello world",
		wantTrailer: map[string]string{"X-Sum": "abc", "X-Other": "def"},
		wantAccepts: 1,
	}, {
		name:        "chunked in many small chunks",
		resp:        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + strings.Repeat("1\r\nx\r\n", 300) + "0\r\n\r\n",
		wantCode:    200,
		wantBody:    strings.Repeat("x", 300),
		wantAccepts: 1,
	}, {
		name:        "close-delimited body",
		resp:        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the upstream closes",
		closeAfter:  true,
		wantCode:    200,
		wantBody:    "until the upstream closes",
		wantAccepts: 2,
	}, {
		// The upstream says close but keeps the connection open: reusing
		// it anyway would work here, which the accept count shows.
		name:        "connection close is honoured",
		resp:        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
		wantCode:    200,
		wantBody:    "ok",
		wantHeader:  map[string]string{"Connection": ""},
		wantAccepts: 2,
	}, {
		name:        "hop-by-hop fields dropped",
		resp:        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: X-Hop\r\nX-Hop: secret\r\nKeep-Alive: timeout=5\r\nX-End: kept\r\n\r\nok",
		wantCode:    200,
		wantBody:    "ok",
		wantHeader:  map[string]string{"X-Hop": "", "Keep-Alive": "", "X-End": "kept"},
		wantAccepts: 1,
	}, {
		name:        "http/1.0 closes",
		resp:        "HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nold",
		wantCode:    200,
		wantBody:    "old",
		wantAccepts: 2,
	}, {
		name:        "http/1.0 close-delimited",
		resp:        "HTTP/1.0 200 OK\r\n\r\nold body",
		closeAfter:  true,
		wantCode:    200,
		wantBody:    "old body",
		wantAccepts: 2,
	}, {
		name:        "http/1.0 keep-alive is reused",
		resp:        "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 3\r\n\r\nold",
		wantCode:    200,
		wantBody:    "old",
		wantAccepts: 1,
	}, {
		// A HEAD response announces a length but has no body: waiting for
		// 1000 bytes would hang, and reuse shows nothing was left over.
		name:        "head with content-length",
		method:      http.MethodHead,
		resp:        "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\nContent-Type: text/plain\r\n\r\n",
		wantCode:    200,
		wantHeader:  map[string]string{"Content-Length": "1000"},
		wantAccepts: 1,
	}, {
		name:        "204 has no body",
		resp:        "HTTP/1.1 204 No Content\r\nX-A: a\r\n\r\n",
		wantCode:    204,
		wantHeader:  map[string]string{"X-A": "a"},
		wantAccepts: 1,
	}, {
		name:        "304 has no body despite content-length",
		resp:        "HTTP/1.1 304 Not Modified\r\nEtag: \"v1\"\r\nContent-Length: 10\r\n\r\n",
		wantCode:    304,
		wantHeader:  map[string]string{"Etag": `"v1"`},
		wantAccepts: 1,
	}, {
		name:        "100 continue then 200",
		method:      http.MethodPost,
		resp:        "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		wantCode:    200,
		wantBody:    "ok",
		wantAccepts: 1,
	}, {
		name:        "103 early hints then 200",
		resp:        "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Final: yes\r\n\r\nok",
		wantCode:    200,
		wantBody:    "ok",
		wantHeader:  map[string]string{"Link": "", "X-Final": "yes"},
		wantAccepts: 1,
	}, {
		name: "several 1xx then 200",
		resp: "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\nX-Progress: 1\r\n\r\n" +
			"HTTP/1.1 103 Early Hints\r\nLink: </a.js>\r\n\r\nHTTP/1.1 100 Continue\r\n\r\n" +
			"HTTP/1.1 201 Created\r\nContent-Length: 7\r\n\r\ncreated",
		wantCode:    201,
		wantBody:    "created",
		wantHeader:  map[string]string{"Link": "", "X-Progress": ""},
		wantAccepts: 1,
	}, {
		name:        "endless 1xx is a bad gateway",
		resp:        strings.Repeat("HTTP/1.1 103 Early Hints\r\n\r\n", 40) + "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
		wantCode:    502,
		wantBody:    "Bad Gateway",
		wantAccepts: 2,
	}}
	for _, tt := range tests {
		for _, front := range fronts {
			t.Run(tt.name+"/"+front.name, func(t *testing.T) {
				t.Parallel()
				up := cannedUpstream(t, tt.resp, tt.closeAfter)
				c, url := front.serve(t, up.addr)
				method := tt.method
				if method == "" {
					method = http.MethodGet
				}
				for i := range 2 {
					o := exchange(c, method, url+"/x", nil)
					if o.err != nil {
						t.Fatalf("request %d: %v", i, o.err)
					}
					if got, want := o.code, tt.wantCode; got != want {
						t.Errorf("request %d: status = %d, want %d", i, got, want)
					}
					if got, want := o.body, tt.wantBody; got != want {
						t.Errorf("request %d: body = %q, want %q", i, got, want)
					}
					for k, want := range tt.wantHeader {
						if got := o.header.Get(k); got != want {
							t.Errorf("request %d: header %s = %q, want %q", i, k, got, want)
						}
					}
					for k, want := range tt.wantValues {
						if got := o.header[k]; !slices.Equal(got, want) {
							t.Errorf("request %d: header %s = %q, want %q", i, k, got, want)
						}
					}
					for k, want := range tt.wantTrailer {
						if got := o.trailer.Get(k); got != want {
							t.Errorf("request %d: trailer %s = %q, want %q (trailers %v)", i, k, got, want, o.trailer)
						}
					}
				}
				if got, want := up.accepts.Load(), tt.wantAccepts; got != want {
					t.Errorf("upstream accepted %d connections for 2 requests, want %d", got, want)
				}
			})
		}
	}
}

// fronts are the two servers a Proxy runs behind: net/http's (HTTP/2 and
// the tests' httptest), whose response fields the proxy adds to the map,
// and queue's HTTP/1.1 engine, to which it hands them as lines
// (readHead).
var fronts = []struct {
	name  string
	serve func(t *testing.T, upstream string) (*http.Client, string)
}{
	{"net-http", frontFor},
	{"h1", frontH1},
}

// frontH1 is frontFor with queue's HTTP/1.1 engine (h1.Server) in front.
func frontH1(t *testing.T, upstream string) (*http.Client, string) {
	t.Helper()
	return frontH1With(t, Config{Upstream: upstream})
}

// frontH1With is frontH1 for a Proxy of the given configuration.
func frontH1With(t *testing.T, cfg Config) (*http.Client, string) {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &h1.Server{Handler: p}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; !errors.Is(err, h1.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
		p.Close()
	})
	tr := &http.Transport{DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}, "http://" + ln.Addr().String()
}

// TestH1MalformedResponse: a response head queue cannot accept gets 502
// "Bad Gateway", and the connection is not reused.
func TestH1MalformedResponse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		resp       string
		closeAfter bool
	}{
		{name: "garbage status line", resp: "SSH-2.0-OpenSSH_9.2\r\n\r\n"},
		{name: "status not digits", resp: "HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n"},
		{name: "http/2 status line", resp: "HTTP/2.0 200 OK\r\nContent-Length: 0\r\n\r\n"},
		{name: "obs-fold", resp: "HTTP/1.1 200 OK\r\nX-A: 1\r\n  folded\r\nContent-Length: 2\r\n\r\nok"},
		{name: "header without colon", resp: "HTTP/1.1 200 OK\r\nnot a header\r\nContent-Length: 2\r\n\r\nok"},
		{name: "conflicting content-length", resp: "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nok"},
		{name: "negative content-length", resp: "HTTP/1.1 200 OK\r\nContent-Length: -2\r\n\r\nok"},
		{name: "closed before a response", resp: "", closeAfter: true},
		{name: "closed in the head", resp: "HTTP/1.1 200 OK\r\nContent-Le", closeAfter: true},
		{name: "head over 64 KiB in one line", resp: "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("b", 70<<10) + "\r\nContent-Length: 2\r\n\r\nok"},
		{name: "head over 64 KiB in many lines", resp: "HTTP/1.1 200 OK\r\n" + strings.Repeat("X-Many: "+strings.Repeat("m", 1000)+"\r\n", 70) + "Content-Length: 2\r\n\r\nok"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			up := cannedUpstream(t, tt.resp, tt.closeAfter)
			c, url := frontFor(t, up.addr)
			for i := range 2 {
				o := exchange(c, http.MethodGet, url+"/", nil)
				if o.err != nil {
					t.Fatalf("request %d: %v", i, o.err)
				}
				if o.code != 502 || o.body != "Bad Gateway" {
					t.Errorf("request %d: got %d %.80q, want 502 \"Bad Gateway\"", i, o.code, o.body)
				}
			}
			if got := up.accepts.Load(); got != 2 {
				t.Errorf("upstream accepted %d connections for 2 requests, want 2 (a broken connection is not reused)", got)
			}
		})
	}
}

// TestH1HeadUnderLimit: a large head that fits in 64 KiB passes whole, so
// the 502 above is the limit, not a smaller one.
func TestH1HeadUnderLimit(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("v", 60<<10)
	up := cannedUpstream(t, "HTTP/1.1 200 OK\r\nX-Big: "+big+"\r\nContent-Length: 2\r\n\r\nok", false)
	c, url := frontFor(t, up.addr)
	o := exchange(c, http.MethodGet, url+"/", nil)
	if o.err != nil {
		t.Fatal(o.err)
	}
	if o.code != 200 || o.body != "ok" || o.header.Get("X-Big") != big {
		t.Errorf("got %d %q, X-Big of %d bytes; want 200 \"ok\" and X-Big of %d bytes", o.code, o.body, len(o.header.Get("X-Big")), len(big))
	}
}

// TestH1CutResponse: when the upstream's framing fails after the head was
// read (a bad chunk, a body shorter than its length), the client must not
// get a complete-looking response: either the exchange fails, or 502, or a
// body read that ends in an error.
func TestH1CutResponse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		resp       string
		closeAfter bool
	}{
		{name: "bad chunk size", resp: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n"},
		{name: "bad chunk size after a good chunk", resp: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n-1\r\nx\r\n0\r\n\r\n"},
		{name: "chunk longer than its size", resp: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello, world\r\n0\r\n\r\n"},
		{name: "chunked cut before the last chunk", resp: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", closeAfter: true},
		{name: "chunked cut in the trailers", resp: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-T: 1\r\n", closeAfter: true},
		{name: "content-length longer than the body", resp: "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + strings.Repeat("h", 50), closeAfter: true},
		{name: "large content-length longer than the body", resp: "HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n" + strings.Repeat("h", 100000), closeAfter: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			up := cannedUpstream(t, tt.resp, tt.closeAfter)
			c, url := frontFor(t, up.addr)
			o := exchange(c, http.MethodGet, url+"/", nil)
			switch {
			case o.err != nil:
				t.Logf("cut: %v (status %d, %d body bytes)", o.err, o.code, len(o.body))
			case o.code == 502 && o.body == "Bad Gateway":
			default:
				t.Errorf("client got a complete-looking response: %d with %d body bytes %.40q, want a cut or 502", o.code, len(o.body), o.body)
			}
		})
	}
}

// TestH1ExpectContinue: queue answers "Expect: 100-continue" itself and
// does not forward it; the body still arrives whole.
func TestH1ExpectContinue(t *testing.T) {
	t.Parallel()
	for _, size := range []int{7, 200 << 10} { // held whole, and streamed
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			t.Parallel()
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				w.Header().Set("X-Expect", r.Header.Get("Expect"))
				w.Header().Set("X-Digest", digest(b))
			}))
			t.Cleanup(up.Close)
			p, err := New(Config{Upstream: strings.TrimPrefix(up.URL, "http://")})
			if err != nil {
				t.Fatal(err)
			}
			front := httptest.NewServer(p)
			t.Cleanup(func() { front.Close(); p.Close() })
			// The client waits up to 10 s for the 100: without one the test
			// would still pass on time, so Got100Continue is checked.
			tr := &http.Transport{ExpectContinueTimeout: 10 * time.Second}
			t.Cleanup(tr.CloseIdleConnections)
			body := make([]byte, size)
			rand.Read(body)
			var got100 atomic.Bool
			trace := &httptrace.ClientTrace{Got100Continue: func() { got100.Store(true) }}
			req, _ := http.NewRequest(http.MethodPost, front.URL+"/", bytes.NewReader(body))
			req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
			req.Header.Set("Expect", "100-continue")
			res, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != 200 {
				t.Fatalf("status %d, want 200", res.StatusCode)
			}
			if !got100.Load() {
				t.Errorf("client got no 100 Continue")
			}
			if got := res.Header.Get("X-Expect"); got != "" {
				t.Errorf("upstream saw Expect: %q, want it answered by queue and not forwarded", got)
			}
			if got, want := res.Header.Get("X-Digest"), digest(body); got != want {
				t.Errorf("upstream got body %s, want %s", got, want)
			}
		})
	}
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return fmt.Sprintf("%d:%s", len(b), hex.EncodeToString(s[:]))
}

// trailerReader sets a request trailer when its body ends, as a client
// that computes a checksum while sending does.
type trailerReader struct {
	r       io.Reader
	trailer http.Header
	value   string
}

func (t *trailerReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if err == io.EOF {
		t.trailer.Set("X-Checksum", t.value)
	}
	return n, err
}

// TestH1RequestBodies: bodies of every size and framing arrive intact,
// with the framing the upstream should see.
func TestH1RequestBodies(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(500)
			return
		}
		w.Header().Set("X-Digest", digest(b))
		w.Header().Set("X-Length", strconv.FormatInt(r.ContentLength, 10))
		w.Header().Set("X-TE", strings.Join(r.TransferEncoding, ","))
		w.Header().Set("X-Trailer", r.Trailer.Get("X-Checksum"))
	}))
	t.Cleanup(up.Close)
	c, url := frontFor(t, strings.TrimPrefix(up.URL, "http://"))
	tests := []struct {
		name        string
		size        int
		chunked     bool
		trailer     bool
		wantLength  string
		wantTE      string
		wantTrailer string
	}{
		{name: "no body", size: 0, wantLength: "0"},
		{name: "small", size: 1 << 10, wantLength: "1024"},
		{name: "64 KiB, held", size: 64 << 10, wantLength: "65536"},
		{name: "64 KiB + 1, streamed", size: 64<<10 + 1, wantLength: "65537"},
		{name: "1 MiB", size: 1 << 20, wantLength: "1048576"},
		{name: "chunked", size: 300 << 10, chunked: true, wantLength: "-1", wantTE: "chunked"},
		{name: "chunked with a trailer", size: 5000, chunked: true, trailer: true, wantLength: "-1", wantTE: "chunked", wantTrailer: "sum-123"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			body := make([]byte, tt.size)
			rand.Read(body)
			var r io.Reader = bytes.NewReader(body)
			if tt.chunked {
				r = io.MultiReader(r) // hides the length
			}
			req, _ := http.NewRequest(http.MethodPost, url+"/upload", r)
			if tt.trailer {
				req.Trailer = http.Header{"X-Checksum": nil}
				req.Body = io.NopCloser(&trailerReader{r: r, trailer: req.Trailer, value: "sum-123"})
			}
			res, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != 200 {
				t.Fatalf("status %d, want 200", res.StatusCode)
			}
			if got, want := res.Header.Get("X-Digest"), digest(body); got != want {
				t.Errorf("upstream got body %s, want %s", got, want)
			}
			if got := res.Header.Get("X-Length"); got != tt.wantLength {
				t.Errorf("upstream Content-Length = %s, want %s", got, tt.wantLength)
			}
			if got := res.Header.Get("X-TE"); got != tt.wantTE {
				t.Errorf("upstream Transfer-Encoding = %q, want %q", got, tt.wantTE)
			}
			if got := res.Header.Get("X-Trailer"); got != tt.wantTrailer {
				t.Errorf("upstream trailer X-Checksum = %q, want %q", got, tt.wantTrailer)
			}
		})
	}
}

// TestH1IdleCloseNeverBadGateway: an upstream that closes idle connections
// after 100 ms. Each round waits for the upstream to have closed every
// connection it accepted, so its first request finds its pooled connection
// closed by the upstream; queue must not answer 502: a GET is sent again
// on a new connection, a POST (which may not be sent twice) takes none that
// the upstream closed (get's check). The rounds take turns at which request
// goes first.
func TestH1IdleCloseNeverBadGateway(t *testing.T) {
	t.Parallel()
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s", r.Method, b)
	}))
	up.Config.IdleTimeout = 100 * time.Millisecond
	var accepts, closes atomic.Int64
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			accepts.Add(1)
		case http.StateClosed:
			closes.Add(1)
		}
	}
	up.Start()
	t.Cleanup(up.Close)
	c, url := frontFor(t, strings.TrimPrefix(up.URL, "http://"))
	const rounds = 10
	for i := range rounds {
		if i > 0 {
			// The upstream's idle timeout closes what the last round left
			// in the pool: no event of the proxy's says when, so the
			// upstream's count is polled.
			waitFor(t, "the upstream to close its idle connections", func() bool { return closes.Load() == accepts.Load() })
		}
		requests := []struct{ method, body, want string }{
			{http.MethodGet, "", "GET "},
			{http.MethodPost, "", "POST "},
			{http.MethodPost, strings.Repeat("p", 2000), "POST " + strings.Repeat("p", 2000)},
		}
		for k := range requests {
			tt := requests[(i+k)%len(requests)]
			var body io.Reader
			if tt.body != "" {
				body = strings.NewReader(tt.body)
			}
			o := exchange(c, tt.method, url+"/", body)
			if o.err != nil || o.code != 200 || o.body != tt.want {
				t.Errorf("round %d %s: got %d %.40q %v, want 200 %.40q", i, tt.method, o.code, o.body, o.err, tt.want)
			}
		}
	}
	n := accepts.Load()
	t.Logf("%d rounds, upstream accepted %d connections", rounds, n)
	if n < rounds {
		t.Errorf("upstream accepted %d connections in %d rounds, want one a round at least (each round's first request needs a new one)", n, rounds)
	}
}

// TestForwardingOnOneConnection sends requests on one client connection
// whose Host and forwarding fields change from one to the next, through
// both fronts: queue's HTTP/1.1 engine keeps the forwarding fields it built
// for the connection (appendForwarding), and must build them again for
// another Host or for fields the request carries (the client, on loopback,
// is a trusted peer here).
func TestForwardingOnOneConnection(t *testing.T) {
	t.Parallel()
	type want struct{ xff, xfp, xfh, fwd string }
	steps := []struct {
		host, xff string
		want      want
	}{
		{"a.example", "", want{"127.0.0.1", "http", "a.example", "for=127.0.0.1;host=a.example;proto=http"}},
		{"a.example", "", want{"127.0.0.1", "http", "a.example", "for=127.0.0.1;host=a.example;proto=http"}},
		{"b.example:8080", "", want{"127.0.0.1", "http", "b.example:8080", `for=127.0.0.1;host="b.example:8080";proto=http`}},
		{"b.example:8080", "203.0.113.7", want{"203.0.113.7, 127.0.0.1", "http", "b.example:8080", `for=203.0.113.7, for=127.0.0.1;host="b.example:8080";proto=http`}},
		{"b.example:8080", "", want{"127.0.0.1", "http", "b.example:8080", `for=127.0.0.1;host="b.example:8080";proto=http`}},
		{"a.example", "", want{"127.0.0.1", "http", "a.example", "for=127.0.0.1;host=a.example;proto=http"}},
	}
	trust, err := headers.ParseTrust("127.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	for _, front := range []struct {
		name  string
		serve func(t *testing.T, cfg Config) (*http.Client, string)
	}{
		{"net-http", func(t *testing.T, cfg Config) (*http.Client, string) {
			p, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(p)
			t.Cleanup(func() { srv.Close(); p.Close() })
			return nil, srv.URL
		}},
		{"h1", frontH1With},
	} {
		t.Run(front.name, func(t *testing.T) {
			t.Parallel()
			saw := make(chan want, len(steps))
			up := startRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
				for range len(steps) {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					saw <- want{req.Header.Get("X-Forwarded-For"), req.Header.Get("X-Forwarded-Proto"),
						req.Header.Get("X-Forwarded-Host"), req.Header.Get("Forwarded")}
					io.WriteString(c, "HTTP/1.1 204 No Content\r\n\r\n")
				}
			})
			_, url := front.serve(t, Config{Upstream: up.addr, Trust: trust})
			c, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "http://"), 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(c)
			for i, st := range steps {
				req := "GET / HTTP/1.1\r\nHost: " + st.host + "\r\n"
				if st.xff != "" {
					req += "X-Forwarded-For: " + st.xff + "\r\n"
				}
				io.WriteString(c, req+"\r\n")
				res, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				res.Body.Close()
				if got := testnet.Recv(t, saw, recvBound, "the request at the upstream"); got != st.want {
					t.Errorf("request %d (Host %s): upstream saw %+v, want %+v", i, st.host, got, st.want)
				}
			}
		})
	}
}

// failingBody gives n bytes, then fails as a client's body does when the
// client goes away mid-body.
type failingBody struct{ n int }

func (b *failingBody) Read(p []byte) (int, error) {
	if b.n == 0 {
		return 0, io.ErrUnexpectedEOF
	}
	m := min(len(p), b.n)
	clear(p[:m])
	b.n -= m
	return m, nil
}

func (*failingBody) Close() error { return nil }

// writeTracker is a ResponseWriter that notes every write to the client:
// a head, body bytes or a flush (which sends the head).
type writeTracker struct {
	h      http.Header
	writes []string
}

func (w *writeTracker) Header() http.Header { return w.h }

func (w *writeTracker) WriteHeader(code int) {
	w.writes = append(w.writes, fmt.Sprintf("WriteHeader(%d)", code))
}

func (w *writeTracker) Write(p []byte) (int, error) {
	w.writes = append(w.writes, fmt.Sprintf("Write(%.40q)", p))
	return len(p), nil
}

func (w *writeTracker) Flush() { w.writes = append(w.writes, "Flush") }

// TestClientGoneMidBody: a client that goes away while it sends its body is
// a client gone (nothing written, 499 in the logs and metrics), whatever the
// upstream protocol: not an upstream failure (502), though over h2c it is
// the upstream client that meets the body's end. The proxy runs behind the
// request counter (stats.Recorder) whose status the access log and the
// metrics take, as in queue: it must count the request as 499 (it wrote
// nothing), and the proxy's own log says the client went away.
func TestClientGoneMidBody(t *testing.T) {
	t.Parallel()
	for _, proto := range []string{HTTP1, H2C} {
		t.Run(proto, func(t *testing.T) {
			t.Parallel()
			up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
			}))
			up.Config.Protocols = new(http.Protocols)
			up.Config.Protocols.SetHTTP1(true)
			up.Config.Protocols.SetUnencryptedHTTP2(true)
			up.Start()
			t.Cleanup(up.Close)
			var logs testnet.SyncBuffer
			p, err := New(Config{Upstream: up.Listener.Addr().String(), Protocol: proto,
				Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			for _, size := range []int64{16 << 10, 1 << 20} { // held whole first, and streamed
				var done []int // the statuses the access log gets (OnDone)
				rec := stats.New(stats.Config{OnDone: func(_ *http.Request, status int, _ int64, _ time.Duration) {
					done = append(done, status)
				}})
				req := httptest.NewRequest(http.MethodPost, "/", &failingBody{n: 1 << 10})
				req.ContentLength = size
				w := &writeTracker{h: http.Header{}}
				const line = `msg="client went away"`
				before := strings.Count(logs.String(), line)
				func() {
					defer func() {
						if v := recover(); v != http.ErrAbortHandler {
							t.Errorf("%d-byte body: recovered %v, want http.ErrAbortHandler (a client gone)", size, v)
						}
					}()
					rec.Handler(p).ServeHTTP(w, req)
				}()
				if len(w.writes) != 0 {
					t.Errorf("%d-byte body: wrote %v to a client that went away, want nothing", size, w.writes)
				}
				if !slices.Equal(done, []int{0}) {
					t.Errorf("%d-byte body: the access log got statuses %v, want [0] (nothing written: 499)", size, done)
				}
				var counted []int
				for _, s := range stats.ByStatus(rec.Durations()) {
					for range s.Count() {
						counted = append(counted, s.Status)
					}
				}
				if want := []int{StatusClientClosed}; !slices.Equal(counted, want) {
					t.Errorf("%d-byte body: the metrics counted statuses %v, want %v", size, counted, want)
				}
				if got := strings.Count(logs.String(), line) - before; got != 1 {
					t.Errorf("%d-byte body: %d %s lines logged, want 1; the log:\n%s", size, got, line, logs.String())
				}
			}
		})
	}
}
