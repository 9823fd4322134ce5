package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/queue-dev/queue/h2"
	"github.com/queue-dev/queue/internal/testnet"
)

// upstreams starts the same handler behind both upstream protocols and
// queue in front of each (with TLS), keyed by --upstream-protocol.
func upstreams(t *testing.T, h http.Handler) map[string]*testQueue {
	t.Helper()
	return map[string]*testQueue{
		"http1": startTLSQueue(t, hostPort(h1Upstream(t, h))),
		"h2c":   startTLSQueue(t, hostPort(h2cUpstream(t, h)), "--upstream-protocol", "h2c"),
	}
}

var allModes = []string{modeH1, modeH2C, modeTLSH1, modeTLSH2, modeH3}

// forEach runs f for every upstream protocol and client mode.
func forEach(t *testing.T, qs map[string]*testQueue, f func(t *testing.T, c *http.Client, base string)) {
	for _, up := range []string{"http1", "h2c"} {
		for _, mode := range allModes {
			t.Run(mode+"-to-"+up, func(t *testing.T) {
				t.Parallel()
				c, base := qs[up].client(t, mode)
				f(t, c, base)
			})
		}
	}
}

// TestProtocolSelection: the upstream protocol follows --upstream-protocol,
// whatever the client spoke, and the client gets its own protocol back.
func TestProtocolSelection(t *testing.T) {
	t.Parallel()
	qs := upstreams(t, http.HandlerFunc(echo))
	for _, up := range []string{"http1", "h2c"} {
		for _, mode := range allModes {
			t.Run(mode+"-to-"+up, func(t *testing.T) {
				t.Parallel()
				c, base := qs[up].client(t, mode)
				res, body := get(t, c, base+"/", map[string]string{"User-Agent": ""}) // an empty value: the client sends none
				// Nothing the client did not send: no Accept-Encoding, no
				// User-Agent of queue's own.
				for _, h := range []string{`"Accept-Encoding"`, `"User-Agent"`} {
					if strings.Contains(body, h) {
						t.Errorf("upstream saw %s the client never sent: %s", h, body)
					}
				}
				wantUp := map[string]string{"http1": "HTTP/1.1", "h2c": "HTTP/2.0"}[up]
				if !strings.Contains(body, `"proto": "`+wantUp+`"`) {
					t.Errorf("upstream saw %s, want %s", body, wantUp)
				}
				wantClient := map[string]string{modeH2C: "HTTP/2.0", modeTLSH2: "HTTP/2.0", modeH3: "HTTP/3.0"}[mode]
				if wantClient == "" {
					wantClient = "HTTP/1.1"
				}
				if res.Proto != wantClient {
					t.Errorf("client got %s, want %s", res.Proto, wantClient)
				}
			})
		}
	}
}

// TestPostIntegrity sends 1 MiB (known length and chunked) and checks the
// upstream's digest of it, and the echoed body, byte for byte.
func TestPostIntegrity(t *testing.T) {
	t.Parallel()
	qs := upstreams(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		var buf bytes.Buffer
		io.Copy(io.MultiWriter(h, &buf), r.Body)
		w.Header().Set("X-Digest", hex.EncodeToString(h.Sum(nil)))
		w.Header().Set("X-Length", fmt.Sprint(r.ContentLength))
		w.Write(buf.Bytes())
	}))
	body := make([]byte, 1<<20)
	rand.Read(body)
	sum := sha256.Sum256(body)
	forEach(t, qs, func(t *testing.T, c *http.Client, base string) {
		for _, chunked := range []bool{false, true} {
			var r io.Reader = bytes.NewReader(body)
			if chunked {
				r = io.MultiReader(r) // hides the length: chunked on HTTP/1.1, no content-length on HTTP/2
			}
			req, _ := http.NewRequest(http.MethodPost, base+"/post", r)
			res, got := do(t, c, req)
			if res.StatusCode != 200 {
				t.Fatalf("chunked=%v: status %d", chunked, res.StatusCode)
			}
			if d := res.Header.Get("X-Digest"); d != hex.EncodeToString(sum[:]) {
				t.Errorf("chunked=%v: upstream digest %s, want %x", chunked, d, sum)
			}
			if !bytes.Equal([]byte(got), body) {
				t.Errorf("chunked=%v: echoed body differs (%d bytes, want %d)", chunked, len(got), len(body))
			}
		}
	})
}

// TestServerSentEvents: each event reaches the client while the upstream
// is still running. The upstream writes event n only after the client
// confirmed event n-1, so a proxy that buffers deadlocks and the test fails
// at its deadline instead of passing.
func TestServerSentEvents(t *testing.T) {
	t.Parallel()
	acks := make(chan string)
	qs := upstreams(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.URL.Query().Get("id")
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
			select {
			case a := <-acks:
				if a != id {
					panic("acks crossed")
				}
			case <-r.Context().Done():
				return
			}
		}
	}))
	var seq int
	var mu = make(chan struct{}, 1)
	forEach(t, qs, func(t *testing.T, c *http.Client, base string) {
		mu <- struct{}{} // one stream at a time: acks are shared
		defer func() { <-mu }()
		seq++
		id := fmt.Sprint(seq)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/sse?id="+id, nil)
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		br := bufio.NewReader(res.Body)
		for i := range 3 {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("event %d: %v (the proxy held the stream back)", i, err)
			}
			if want := fmt.Sprintf("data: %d\n", i); line != want {
				t.Fatalf("event %d = %q, want %q", i, line, want)
			}
			br.ReadString('\n')
			select {
			case acks <- id:
			case <-ctx.Done():
				t.Fatal("upstream never waited for the ack")
			}
		}
	})
}

// TestSmallChunks: a body of many one-byte chunks goes on in a few large
// pieces, in either direction, not in a piece per chunk: the upstream gets
// an upload chunked anew in a few chunks, and a client gets a chunked
// response in a few chunks (HTTP/1.1) or DATA frames (HTTP/2). The framing
// comes in one write each time, so a queue that decodes all it holds at
// once sends it on in one piece.
func TestSmallChunks(t *testing.T) {
	t.Parallel()
	const n = 20000
	const most = 10 // pieces allowed: the framing may still come in more than one read
	framing := strings.Repeat("1\r\nx\r\n", n) + "0\r\n\r\n"
	q := startQueue(t, chunkUpstream(t, framing))

	t.Run("upload", func(t *testing.T) {
		t.Parallel()
		c, err := net.DialTimeout("tcp", q.addr.Listen, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "POST /up HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"+framing); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		var chunks, size int
		if _, err := fmt.Sscanf(string(b), "%d %d", &chunks, &size); err != nil || res.StatusCode != 200 {
			t.Fatalf("status %d, body %q", res.StatusCode, b)
		}
		if size != n || chunks > most {
			t.Errorf("upstream got %d bytes in %d chunks, want %d bytes in at most %d", size, chunks, n, most)
		}
	})
	t.Run("HTTP/1.1 response", func(t *testing.T) {
		t.Parallel()
		c, err := net.DialTimeout("tcp", q.addr.Listen, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "GET /down HTTP/1.1\r\nHost: a\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != 200 || len(res.TransferEncoding) == 0 {
			t.Fatalf("status %d, Transfer-Encoding %q, want 200, chunked", res.StatusCode, res.TransferEncoding)
		}
		// res.Body would take the chunks apart: they are counted from br.
		chunks, size, err := countChunks(br)
		if err != nil {
			t.Fatal(err)
		}
		if size != n || chunks > most {
			t.Errorf("client got %d bytes in %d chunks, want %d bytes in at most %d", size, chunks, n, most)
		}
	})
	t.Run("HTTP/2 response", func(t *testing.T) {
		t.Parallel()
		c := h2Dial(t, q.addr.Listen, h2Opts{})
		c.start()
		if _, err := c.headers(1, true, h2Req("GET", "/down")...); err != nil {
			t.Fatal(err)
		}
		if !c.waitFor(h2Wait, func() bool { return c.stream(1).ended }) {
			t.Fatalf("stream not ended: %+v", c.snap(1))
		}
		if s := c.snap(1); s.data != n || s.frames > most {
			t.Errorf("client got %d bytes in %d DATA frames, want %d bytes in at most %d", s.data, s.frames, n, most)
		}
	})
}

// chunkUpstream is a raw HTTP/1.1 upstream that answers GET with framing
// as a chunked body, in one write, and any other request with the number
// of chunks of its chunked body and their bytes ("chunks bytes").
func chunkUpstream(t *testing.T, framing string) string {
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
				c.SetDeadline(time.Now().Add(10 * time.Second))
				br := bufio.NewReader(c)
				for range 10 { // bounded: a test sends one request per connection
					line, err := br.ReadString('\n')
					if err != nil {
						return
					}
					for {
						l, err := br.ReadString('\n')
						if err != nil {
							return
						}
						if l == "\r\n" {
							break
						}
					}
					if strings.HasPrefix(line, "GET ") {
						io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"+framing)
						continue
					}
					chunks, size, err := countChunks(br)
					if err != nil {
						return
					}
					answer := fmt.Sprintf("%d %d", chunks, size)
					fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(answer), answer)
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// countChunks reads a chunked body from br, trailers included, and returns
// the number of its chunks and their bytes.
func countChunks(br *bufio.Reader) (chunks, size int, err error) {
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return chunks, size, err
		}
		n, err := strconv.ParseInt(strings.TrimRight(line, "\r\n"), 16, 64)
		if err != nil {
			return chunks, size, fmt.Errorf("chunk size %q: %w", line, err)
		}
		if n == 0 {
			for line != "\r\n" {
				if line, err = br.ReadString('\n'); err != nil {
					return chunks, size, err
				}
			}
			return chunks, size, nil
		}
		if _, err := br.Discard(int(n) + 2); err != nil {
			return chunks, size, err
		}
		chunks++
		size += int(n)
	}
}

// TestTrailers: trailers, declared and not, reach the client.
func TestTrailers(t *testing.T) {
	t.Parallel()
	qs := upstreams(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Declared")
		w.WriteHeader(200)
		io.WriteString(w, "body")
		w.(http.Flusher).Flush()
		w.Header().Set("X-Declared", "one")
		w.Header().Set(http.TrailerPrefix+"X-Undeclared", "two")
	}))
	forEach(t, qs, func(t *testing.T, c *http.Client, base string) {
		res, body := get(t, c, base+"/", nil)
		if body != "body" {
			t.Errorf("body = %q", body)
		}
		for k, want := range map[string]string{"X-Declared": "one", "X-Undeclared": "two"} {
			if got := res.Trailer.Get(k); got != want {
				t.Errorf("trailer %s = %q, want %q (trailers %v)", k, got, want, res.Trailer)
			}
		}
	})
}

// TestBadGateway: an upstream that refuses (past --upstream-retry-window),
// or answers garbage, gives 502 with the status text only.
func TestBadGateway(t *testing.T) {
	t.Parallel()
	closed := testnet.ReservePort(t)
	garbage, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { garbage.Close() })
	go func() {
		for {
			c, err := garbage.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				bufio.NewReader(c).ReadString('\n')
				io.WriteString(c, "SSH-2.0-OpenSSH_9.2\r\n\r\n")
			}()
		}
	}()
	for _, tt := range []struct{ name, upstream, proto string }{
		{"refused http1", closed, "http1"},
		{"refused h2c", closed, "h2c"},
		{"garbage http1", garbage.Addr().String(), "http1"},
		{"garbage h2c", garbage.Addr().String(), "h2c"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			q := startQueue(t, tt.upstream, "--upstream-protocol", tt.proto, "--upstream-retry-window", "100ms")
			for _, mode := range []string{modeH1, modeH2C} {
				c, base := q.client(t, mode)
				res, body := get(t, c, base+"/", nil)
				if got, want := res.StatusCode, 502; got != want {
					t.Errorf("%s: status = %d, want %d", mode, got, want)
				}
				if got, want := body, "Bad Gateway"; got != want {
					t.Errorf("%s: body = %q, want %q", mode, got, want)
				}
			}
			if n := strings.Count(q.logs.String(), "upstream failing"); n != 1 {
				t.Errorf("logged the failing upstream %d times, want once per change of state", n)
			}
		})
	}
}

// TestHeaderLimit: a request head over 64 KiB gets 431; one just under
// passes. Over HTTP/2 the server advertises the limit in SETTINGS, and a
// header list over it is refused (431 or a reset), never served.
func TestHeaderLimit(t *testing.T) {
	t.Parallel()
	var big atomic.Int64 // requests with a header list over the limit that reached the upstream
	up := h1Upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.Header.Get("X-Big")) > h2.MaxHeaderListSize {
			big.Add(1)
		}
	}))
	q := startTLSQueue(t, hostPort(up))
	for _, mode := range []string{modeH1, modeTLSH1} {
		c, base := q.client(t, mode)
		for _, tt := range []struct {
			size int
			want int
		}{{60 << 10, 200}, {66 << 10, 431}, {1 << 20, 431}} {
			// A fresh connection each time: on a kept-alive one, net/http
			// reads up to 4 KiB of the next request ahead of its limit.
			req, _ := http.NewRequest(http.MethodGet, base+"/", nil)
			req.Header.Set("X-Big", strings.Repeat("a", tt.size))
			req.Close = true
			res, err := c.Do(req)
			if err != nil && tt.size >= 1<<20 {
				continue // refused while the client was still sending: a reset is a refusal too
			}
			if err != nil {
				t.Fatalf("%s: header of %d bytes: %v", mode, tt.size, err)
			}
			b, err := io.ReadAll(res.Body)
			res.Body.Close()
			if err != nil {
				t.Errorf("%s: header of %d bytes: reading the body: %v", mode, tt.size, err)
			}
			body := string(b)
			if res.StatusCode != tt.want {
				t.Errorf("%s: header of %d bytes: status %d, want %d", mode, tt.size, res.StatusCode, tt.want)
			}
			if tt.want == 431 && strings.Contains(body, "aaaa") {
				t.Errorf("431 body echoes the request: %.40q", body)
			}
		}
	}
	// HTTP/2: x/net's and net/http's clients keep to the advertised limit
	// themselves and would never send the list: a raw client does.
	c := h2Dial(t, q.addr.Listen, h2Opts{})
	c.start()
	if got, ok := c.settings[http2.SettingMaxHeaderListSize]; !ok || got != h2.MaxHeaderListSize {
		t.Errorf("SETTINGS_MAX_HEADER_LIST_SIZE = %d (advertised %v), want %d", got, ok, h2.MaxHeaderListSize)
	}
	if _, err := c.headers(1, true, h2Req("GET", "/", hpack.HeaderField{Name: "x-big", Value: strings.Repeat("a", 66<<10)})...); err != nil {
		t.Fatalf("h2c: sending the header list: %v", err)
	}
	if !c.waitFor(h2Wait, func() bool { return c.finished(1) }) {
		t.Fatalf("h2c: stream 1 neither answered nor reset within %v: %+v", h2Wait, c.snap(1))
	}
	s1 := c.snap(1)
	g, rerr := c.state()
	switch {
	case s1.status == "431", s1.status == "" && s1.reset:
		t.Logf("h2c: %+v", s1)
	case s1.status == "" && (g != nil || rerr != nil):
		t.Logf("h2c: connection ended (GOAWAY %+v, read %v)", g, rerr)
	default:
		t.Errorf("h2c: stream 1 %+v, want 431 or RST_STREAM", s1)
	}
	if n := big.Load(); n != 0 {
		t.Errorf("upstream saw %d requests with a header list over %d bytes", n, h2.MaxHeaderListSize)
	}
}

// TestClientGoneCancelsUpstream: when the client goes away, the upstream's
// request is canceled.
func TestClientGoneCancelsUpstream(t *testing.T) {
	t.Parallel()
	arrived, canceled := make(chan struct{}, 16), make(chan struct{}, 16)
	qs := upstreams(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-r.Context().Done()
		canceled <- struct{}{}
	}))
	for _, up := range []string{"http1", "h2c"} {
		for _, mode := range []string{modeH1, modeH2C, modeH3} {
			t.Run(mode+"-to-"+up, func(t *testing.T) {
				c, base := qs[up].client(t, mode)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/slow", nil)
				errc := make(chan error, 1)
				go func() {
					res, err := c.Do(req)
					if err == nil {
						res.Body.Close()
					}
					errc <- err
				}()
				timeout := time.After(10 * time.Second)
				select {
				case <-arrived:
				case <-timeout:
					t.Fatal("request never reached the upstream")
				}
				cancel()
				select {
				case <-canceled:
				case <-timeout:
					t.Fatal("the upstream request was not canceled when the client went away")
				}
				select {
				case err := <-errc:
					if err == nil {
						t.Error("client request succeeded after cancel")
					}
				case <-timeout:
					t.Fatal("the client's request did not end when it was canceled")
				}
			})
		}
	}
}

// TestH2CUpgrade: "Upgrade: h2c" on GET and OPTIONS switches the connection
// to HTTP/2; the upgrading request is answered on stream 1 and a second
// request on stream 3 works; the upstream never sees the upgrade.
func TestH2CUpgrade(t *testing.T) {
	t.Parallel()
	up := h1Upstream(t, http.HandlerFunc(echo))
	q := startQueue(t, hostPort(up))
	for _, method := range []string{"GET", "OPTIONS"} {
		t.Run(method, func(t *testing.T) {
			t.Parallel()
			conn, err := net.DialTimeout("tcp", q.addr.Listen, h2Wait)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintf(conn, "%s /first HTTP/1.1\r\nHost: app\r\nConnection: Upgrade, HTTP2-Settings\r\n"+
				"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n", method)
			br := bufio.NewReader(conn)
			res, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.StatusCode != 101 || res.Header.Get("Upgrade") != "h2c" {
				t.Fatalf("got %d %v, want 101 with Upgrade: h2c", res.StatusCode, res.Header)
			}
			io.WriteString(conn, http2.ClientPreface)
			fr := http2.NewFramer(conn, br)
			fr.WriteSettings()
			var hbuf bytes.Buffer
			enc := hpack.NewEncoder(&hbuf)
			for _, f := range []hpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "http"},
				{Name: ":authority", Value: "app"}, {Name: ":path", Value: "/second"}} {
				enc.WriteField(f)
			}
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: hbuf.Bytes(), EndStream: true, EndHeaders: true})
			bodies := map[uint32]*bytes.Buffer{1: {}, 3: {}}
			status := map[uint32]string{}
			dec := hpack.NewDecoder(4096, nil)
			for ended := 0; ended < 2; {
				f, err := fr.ReadFrame()
				if err != nil {
					t.Fatalf("read frame: %v", err)
				}
				switch f := f.(type) {
				case *http2.SettingsFrame:
					if !f.IsAck() {
						fr.WriteSettingsAck()
					}
				case *http2.HeadersFrame:
					fields, err := dec.DecodeFull(f.HeaderBlockFragment())
					if err != nil {
						t.Fatal(err)
					}
					for _, hf := range fields {
						if hf.Name == ":status" {
							status[f.StreamID] = hf.Value
						}
					}
					if f.StreamEnded() {
						ended++
					}
				case *http2.DataFrame:
					b := bodies[f.StreamID]
					if b == nil {
						t.Fatalf("DATA on stream %d, which the client never opened", f.StreamID)
					}
					b.Write(f.Data())
					if f.StreamEnded() {
						ended++
					}
				case *http2.GoAwayFrame:
					t.Fatalf("GOAWAY %v", f.ErrCode)
				}
			}
			for id, path := range map[uint32]string{1: "/first", 3: "/second"} {
				if status[id] != "200" {
					t.Errorf("stream %d status %q, want 200", id, status[id])
				}
				b := bodies[id].String()
				if !strings.Contains(b, `"uri": "`+path+`"`) {
					t.Errorf("stream %d reached the upstream as %s, want %s", id, b, path)
				}
				for _, h := range []string{"Upgrade", "Http2-Settings", "Connection"} {
					if strings.Contains(b, `"`+h+`"`) {
						t.Errorf("stream %d: upstream saw %s: %s", id, h, b)
					}
				}
			}
			if !strings.Contains(bodies[1].String(), `"method": "`+method+`"`) {
				t.Errorf("stream 1 was not the %s: %s", method, bodies[1])
			}
		})
	}
}

// TestReaperStreamReuse: while one exchange keeps the HTTP/1.1 pool's
// reaper ticking, quick requests on one HTTP/2 connection reuse the
// engine's stream objects, request included, as the reaper looks at the
// requests upstream connections carry. Under -race this failed when the
// reaper read a request after its exchange ended; every quick request must
// also succeed (a request reused for the next stream must not be taken
// for the old one's gone client).
func TestReaperStreamReuse(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	slowIn := make(chan struct{}, 1)
	up := h1Upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			slowIn <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		io.WriteString(w, "ok")
	}))
	q := startQueue(t, hostPort(up))
	// The slow request is held until the quick ones are done (10 s at
	// most): the Timeout leaves it that and more.
	c, base := q.client(t, modeH2C)
	c.Timeout = 10*time.Second + clientTimeout
	slowDone := getAsync(c, base+"/slow")
	select {
	case <-slowIn:
	case <-time.After(10 * time.Second):
		t.Fatal("the slow request never reached the upstream")
	}
	// Quick requests, four at a time, for at least three reaper periods
	// (100 ms each) and at most 20000 requests or 10 s.
	start := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Int64
	var sent atomic.Int64
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for sent.Add(1) <= 20000 && time.Since(start) < 10*time.Second {
				res, err := c.Get(base + "/quick")
				if err != nil {
					failed.Add(1)
					continue
				}
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusOK || string(body) != "ok" {
					failed.Add(1)
				}
				if time.Since(start) > 400*time.Millisecond {
					return
				}
			}
		}()
	}
	wg.Wait()
	close(release)
	if err := <-slowDone; err != nil {
		t.Errorf("slow request: %v", err)
	}
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of the quick requests failed", n)
	}
}
