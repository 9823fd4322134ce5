package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queue-dev/queue/internal/testnet"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// recvBound bounds the tests' waits on a channel (testnet.Recv): it is the
// failure bound only, never waited out by a passing test.
const recvBound = time.Minute

// h2Event is a frame a raw h2c upstream read, copied out of the Framer.
type h2Event struct {
	typ    http2.FrameType
	stream uint32
	code   http2.ErrCode // RST_STREAM, GOAWAY
	fields []hpack.HeaderField
	data   int // DATA length
	end    bool
}

// rawH2C is an h2c upstream on x/net's Framer whose behaviour each test
// writes: onFrame sees every frame but SETTINGS and PING, which it
// answers itself (PING only unless silent), on the connection's reader
// goroutine; a blocking onFrame stops the connection's reading.
type rawH2C struct {
	*rawUpstream
	settings []http2.Setting
	window   uint32 // a connection WINDOW_UPDATE sent after SETTINGS, or 0
	silent   bool   // PINGs go unanswered
	onFrame  func(cn *rawH2CConn, ev h2Event)
	onClose  func(cn *rawH2CConn)
	n        atomic.Int32
}

// field returns the value of the header field name (a pseudo-field
// included) of a HEADERS event, or "".
func (ev h2Event) field(name string) string {
	for _, f := range ev.fields {
		if f.Name == name {
			return f.Value
		}
	}
	return ""
}

type rawH2CConn struct {
	n    int32 // 1 for the first connection
	c    net.Conn
	mu   sync.Mutex
	fr   *http2.Framer
	hbuf bytes.Buffer
	enc  *hpack.Encoder
}

func startRawH2C(t *testing.T, u *rawH2C) *rawH2C {
	t.Helper()
	u.rawUpstream = startRawUpstream(t, u.serve)
	return u
}

func (u *rawH2C) serve(c net.Conn, br *bufio.Reader) {
	c.SetDeadline(time.Now().Add(2 * time.Minute)) // a bound, should the test fail
	if _, err := io.ReadFull(br, make([]byte, len(http2.ClientPreface))); err != nil {
		return
	}
	cn := &rawH2CConn{n: u.n.Add(1), c: c, fr: http2.NewFramer(c, br)}
	cn.enc = hpack.NewEncoder(&cn.hbuf)
	cn.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	cn.mu.Lock()
	cn.fr.WriteSettings(u.settings...)
	if u.window > 0 {
		cn.fr.WriteWindowUpdate(0, u.window)
	}
	cn.mu.Unlock()
	if u.onClose != nil {
		defer u.onClose(cn)
	}
	for {
		f, err := cn.fr.ReadFrame()
		if err != nil {
			return
		}
		ev := h2Event{typ: f.Header().Type, stream: f.Header().StreamID}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				cn.mu.Lock()
				cn.fr.WriteSettingsAck()
				cn.mu.Unlock()
			}
			continue
		case *http2.PingFrame:
			if !f.IsAck() && !u.silent {
				cn.mu.Lock()
				cn.fr.WritePing(true, f.Data)
				cn.mu.Unlock()
			}
		case *http2.MetaHeadersFrame:
			ev.fields = append([]hpack.HeaderField(nil), f.Fields...)
			ev.end = f.StreamEnded()
		case *http2.DataFrame:
			ev.data, ev.end = len(f.Data()), f.StreamEnded()
		case *http2.RSTStreamFrame:
			ev.code = f.ErrCode
		case *http2.GoAwayFrame:
			ev.code = f.ErrCode
		}
		if u.onFrame != nil {
			u.onFrame(cn, ev)
		}
	}
}

// headers writes a header block of name, value pairs.
func (cn *rawH2CConn) headers(id uint32, end bool, kv ...string) {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	cn.hbuf.Reset()
	for i := 0; i < len(kv); i += 2 {
		cn.enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	cn.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: cn.hbuf.Bytes(), EndStream: end, EndHeaders: true})
}

func (cn *rawH2CConn) data(id uint32, p string, end bool) {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	cn.fr.WriteData(id, end, []byte(p))
}

func (cn *rawH2CConn) rst(id uint32, code http2.ErrCode) {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	cn.fr.WriteRSTStream(id, code)
}

func (cn *rawH2CConn) goAway(last uint32) {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	cn.fr.WriteGoAway(last, http2.ErrCodeNo, nil)
}

// h2cFront serves a Proxy of cfg (to upstream, over h2c) on net/http's
// HTTP/1.1 server; tune, if any, adjusts the Proxy before it serves.
func h2cFront(t *testing.T, upstream string, cfg Config, tune ...func(*Proxy)) (*Proxy, string) {
	t.Helper()
	cfg.Upstream, cfg.Protocol = upstream, H2C
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range tune {
		f(p)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(func() { srv.Close(); p.Close() })
	return p, srv.URL
}

// TestH2CGoAwayDrain: two requests open streams 1 and 3 on the first
// connection; the upstream answers 1 and sends GOAWAY with last stream 1.
// Stream 3, which the upstream did not process, is sent again on a fresh
// connection, and the next request goes there too.
func TestH2CGoAwayDrain(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var firstConn []uint32
	u := startRawH2C(t, &rawH2C{onFrame: func(cn *rawH2CConn, ev h2Event) {
		if ev.typ != http2.FrameHeaders {
			return
		}
		if cn.n > 1 {
			cn.headers(ev.stream, true, ":status", "200", "content-length", "0", "x-conn", "2")
			return
		}
		mu.Lock()
		firstConn = append(firstConn, ev.stream)
		both := len(firstConn) == 2
		mu.Unlock()
		if both {
			cn.headers(1, true, ":status", "200", "content-length", "0", "x-conn", "1")
			cn.goAway(1)
		}
	}})
	_, url := h2cFront(t, u.addr, Config{Timeout: 10 * time.Second})
	c := &http.Client{Timeout: 10 * time.Second}
	results := make(chan outcome, 2)
	for range 2 {
		go func() {
			req, _ := http.NewRequest("GET", url+"/", nil)
			results <- do(c, req)
		}()
	}
	conns := map[string]int{}
	for range 2 {
		o := <-results
		if o.err != nil || o.code != 200 {
			t.Fatalf("got %d %v, want 200", o.code, o.err)
		}
		conns[o.header.Get("X-Conn")]++
	}
	if conns["1"] != 1 || conns["2"] != 1 {
		t.Errorf("answered by connections %v, want one by each", conns)
	}
	req, _ := http.NewRequest("GET", url+"/", nil)
	if o := do(c, req); o.code != 200 || o.header.Get("X-Conn") != "2" {
		t.Errorf("after the GOAWAY: %d from connection %q, want 200 from 2", o.code, o.header.Get("X-Conn"))
	}
	if got := u.accepts.Load(); got != 2 {
		t.Errorf("upstream accepted %d connections, want 2", got)
	}
}

// TestH2CRefusedStream: a stream refused with REFUSED_STREAM is sent again
// once, on a fresh connection, when mayReplay allows it; a second refusal
// is the client's 502, and a POST is never sent again.
func TestH2CRefusedStream(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		method   string
		refuse   int32 // connections that refuse every stream
		code     int
		arrivals int32
	}{
		{"GET refused once", "GET", 1, 200, 2},
		{"GET refused twice", "GET", 2, 502, 2},
		{"POST refused", "POST", 1, 502, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var arrivals atomic.Int32
			u := startRawH2C(t, &rawH2C{onFrame: func(cn *rawH2CConn, ev h2Event) {
				if ev.typ != http2.FrameHeaders {
					return
				}
				arrivals.Add(1)
				if cn.n <= tc.refuse {
					cn.rst(ev.stream, http2.ErrCodeRefusedStream)
					return
				}
				cn.headers(ev.stream, true, ":status", "200", "content-length", "0")
			}})
			_, url := h2cFront(t, u.addr, Config{Timeout: 10 * time.Second})
			req, _ := http.NewRequest(tc.method, url+"/", nil)
			o := do(&http.Client{Timeout: 10 * time.Second}, req)
			if o.err != nil || o.code != tc.code {
				t.Errorf("got %d %v, want %d", o.code, o.err, tc.code)
			}
			if got := arrivals.Load(); got != tc.arrivals {
				t.Errorf("arrived %d times, want %d", got, tc.arrivals)
			}
		})
	}
}

// TestH2CReset: an upstream RST_STREAM before the response head is the
// client's 502; after it, the client's response is cut (its HTTP/1.1
// connection closed before the response's end).
func TestH2CReset(t *testing.T) {
	t.Parallel()
	t.Run("before the head", func(t *testing.T) {
		t.Parallel()
		u := startRawH2C(t, &rawH2C{onFrame: func(cn *rawH2CConn, ev h2Event) {
			if ev.typ == http2.FrameHeaders {
				cn.rst(ev.stream, http2.ErrCodeInternal)
			}
		}})
		_, url := h2cFront(t, u.addr, Config{Timeout: 10 * time.Second})
		req, _ := http.NewRequest("GET", url+"/", nil)
		if o := do(&http.Client{Timeout: 10 * time.Second}, req); o.code != 502 {
			t.Errorf("got %d %v, want 502", o.code, o.err)
		}
	})
	t.Run("after the head", func(t *testing.T) {
		t.Parallel()
		u := startRawH2C(t, &rawH2C{onFrame: func(cn *rawH2CConn, ev h2Event) {
			if ev.typ == http2.FrameHeaders {
				cn.headers(ev.stream, false, ":status", "200", "content-length", "10")
				cn.data(ev.stream, "hello", false)
				cn.rst(ev.stream, http2.ErrCodeInternal)
			}
		}})
		_, url := h2cFront(t, u.addr, Config{Timeout: 10 * time.Second})
		req, _ := http.NewRequest("GET", url+"/", nil)
		// Cut, never complete-looking: the head and the part of the body
		// the client may or may not have seen are followed by the close.
		o := do(&http.Client{Timeout: 10 * time.Second}, req)
		if o.err == nil {
			t.Errorf("got %d %q, want the response cut", o.code, o.body)
		}
	})
}

// TestH2CClientCancel: a client that goes away while its request waits
// for the response has the upstream stream reset with CANCEL at once.
func TestH2CClientCancel(t *testing.T) {
	t.Parallel()
	opened := make(chan uint32, 1)
	reset := make(chan h2Event, 1)
	u := startRawH2C(t, &rawH2C{onFrame: func(cn *rawH2CConn, ev h2Event) {
		switch ev.typ {
		case http2.FrameHeaders:
			opened <- ev.stream
		case http2.FrameRSTStream:
			reset <- ev
		}
	}})
	_, url := h2cFront(t, u.addr, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", url+"/", nil)
	done := make(chan error, 1)
	go func() {
		_, err := http.DefaultClient.Do(req)
		done <- err
	}()
	id := testnet.Recv(t, opened, recvBound, "request at the upstream")
	cancel()
	ev := testnet.Recv(t, reset, recvBound, "RST_STREAM at the upstream")
	if ev.stream != id || ev.code != http2.ErrCodeCancel {
		t.Errorf("got RST_STREAM %d %v, want %d CANCEL", ev.stream, ev.code, id)
	}
	if err := testnet.Recv(t, done, recvBound, "client's return"); !errors.Is(err, context.Canceled) {
		t.Errorf("client: %v, want context.Canceled", err)
	}
}

// TestH2CRapidReset: a client that opens and resets 50,000 streams
// (CVE-2023-44487's pattern) against an upstream that never answers:
// queue resets each upstream stream before its handler returns, so the
// upstream never has more of queue's streams open than the front lets
// the client have running (its MaxConcurrentStreams), and none at the end.
// The first streams the client keeps open until the upstream has them
// all: queue forwards as many streams as the front runs, not fewer.
func TestH2CRapidReset(t *testing.T) {
	t.Parallel()
	const (
		streams = 50000
		front   = 250
		batch   = 50 // pairs of HEADERS and RST_STREAM per write, then a PING
	)
	var open, maxOpen atomic.Int64
	headers := atomic.Int64{}
	allOpen := make(chan struct{})
	var allOnce sync.Once
	u := startRawH2C(t, &rawH2C{
		settings: []http2.Setting{{ID: http2.SettingMaxConcurrentStreams, Val: 100000}},
		onFrame: func(cn *rawH2CConn, ev h2Event) {
			switch ev.typ {
			case http2.FrameHeaders:
				if ev.field(":path") == "/last" {
					cn.headers(ev.stream, true, ":status", "200", "content-length", "0")
					return
				}
				headers.Add(1)
				n := open.Add(1)
				for m := maxOpen.Load(); n > m && !maxOpen.CompareAndSwap(m, n); m = maxOpen.Load() {
				}
				if n == front {
					allOnce.Do(func() { close(allOpen) })
				}
			case http2.FrameRSTStream:
				open.Add(-1)
			}
		},
	})
	p, err := New(Config{Upstream: u.addr, Protocol: H2C})
	if err != nil {
		t.Fatal(err)
	}
	var running atomic.Int64 // the front's handlers running
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		running.Add(1)
		defer running.Add(-1)
		p.ServeHTTP(w, r)
	}))
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &protos
	srv.Config.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: front}
	srv.Start()
	t.Cleanup(func() { srv.Close(); p.Close() })

	nc, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(2 * time.Minute))
	var wbuf bytes.Buffer
	fr := http2.NewFramer(&wbuf, bufio.NewReader(nc))
	wbuf.WriteString(http2.ClientPreface)
	fr.WriteSettings()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "x"}, {":path", "/"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	block := hb.Bytes()
	// The server's frames are read (and dropped) so that it never blocks.
	final := make(chan error, 1)
	pongs := make(chan struct{}, 1)
	go func() {
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				final <- err
				return
			}
			if p, ok := f.(*http2.PingFrame); ok && p.IsAck() {
				pongs <- struct{}{}
			}
			if h, ok := f.(*http2.HeadersFrame); ok && h.StreamID == 2*streams+1 {
				final <- nil
				return
			}
			if g, ok := f.(*http2.GoAwayFrame); ok {
				final <- fmt.Errorf("GOAWAY %v", g.ErrCode)
				return
			}
		}
	}()
	write := func(what string) {
		t.Helper()
		if _, err := nc.Write(wbuf.Bytes()); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		wbuf.Reset()
	}

	// As many streams as the front runs, held open until the upstream has
	// every one of them, then reset.
	for i := range front {
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: block, EndStream: true, EndHeaders: true})
	}
	write("the held streams")
	select {
	case <-allOpen:
	case err := <-final:
		t.Fatalf("before the upstream had the %d held streams: %v", front, err)
	case <-time.After(time.Minute):
		t.Fatalf("the upstream had %d of the %d streams the front runs open, after a minute", open.Load(), front)
	}
	for i := range front {
		fr.WriteRSTStream(uint32(2*i+1), http2.ErrCodeCancel)
	}
	write("the resets of the held streams")

	// The client is paced by PINGs only so that net/http's front, which
	// ends a connection whose handlers fall more than 4*MaxConcurrentStreams
	// behind its reads (its own CVE-2023-44487 defence), reads no faster
	// than the handlers run: queue's side is what is under test.
	for i := front; i < streams; i++ {
		id := uint32(2*i + 1)
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndStream: true, EndHeaders: true})
		fr.WriteRSTStream(id, http2.ErrCodeCancel)
		if (i+1)%batch == 0 || i == streams-1 {
			fr.WritePing(false, [8]byte{})
			write(fmt.Sprintf("after %d streams", i+1))
			select {
			case <-pongs:
			case err := <-final:
				t.Fatalf("after %d streams: %v", i+1, err)
			case <-time.After(time.Minute):
				t.Fatalf("after %d streams: no PING ack within a minute", i+1)
			}
		}
	}
	// A last request, answered, after all the others: when its response
	// is in, the server has read every reset before it.
	hb.Reset()
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "x"}, {":path", "/last"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 2*streams + 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true})
	write("the last request")
	if err := testnet.Recv(t, final, recvBound, "the last response"); err != nil {
		t.Fatal(err)
	}
	// Then every handler returns, and the upstream reads the reset of every
	// stream it was sent: no event says when, so both are polled.
	for deadline := time.Now().Add(time.Minute); running.Load() != 0 || open.Load() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("a minute after the last response: %d handlers running, %d of queue's streams open at the upstream; want none", running.Load(), open.Load())
		}
	}
	if got, want := maxOpen.Load(), int64(front); got != want {
		t.Errorf("upstream had at most %d of queue's streams open at once, want %d (the client's)", got, want)
	}
	t.Logf("%d streams reached the upstream, at most %d open at once", headers.Load(), maxOpen.Load())
}

// TestH2CStalledUpstream: an upstream that stops reading its socket,
// after it gave queue a window of a gigabyte, does not make queue read
// more of a client's upload than its write queue, its copy buffer and the
// kernel's socket buffers hold: the body waits for room in the queue.
func TestH2CStalledUpstream(t *testing.T) {
	t.Parallel()
	stop := make(chan struct{})
	u := startRawH2C(t, &rawH2C{
		settings: []http2.Setting{{ID: http2.SettingInitialWindowSize, Val: 1 << 30}},
		window:   1 << 30,
		onFrame: func(cn *rawH2CConn, ev h2Event) {
			if ev.typ == http2.FrameHeaders {
				<-stop // stops reading
			}
		},
	})
	t.Cleanup(func() { close(stop) })
	_, url := h2cFront(t, u.addr, Config{Timeout: 2 * time.Second})
	body := &countingReader{limit: 1 << 30}
	req, _ := http.NewRequest("POST", url+"/", body)
	req.ContentLength = -1
	o := do(&http.Client{Timeout: 20 * time.Second}, req)
	if o.code != 504 && o.err == nil {
		t.Errorf("got %d, want 504 (or a cut) at --timeout", o.code)
	}
	// 256 KiB of queue, 32 KiB of copy buffer, what the kernel buffers on
	// the loopback both ways, and net/http's server's own buffering.
	const bound = 48 << 20
	if n := body.n.Load(); n > bound {
		t.Errorf("queue read %d bytes of the body, want at most %d", n, bound)
	} else {
		t.Logf("queue read %d bytes of the body before the timeout", n)
	}
}

type countingReader struct {
	n     atomic.Int64
	limit int64
}

func (r *countingReader) Read(p []byte) (int, error) {
	if r.n.Load() >= r.limit {
		return 0, io.EOF
	}
	r.n.Add(int64(len(p)))
	return len(p), nil
}

// TestH2CPing: a connection whose stream waits on an upstream that has
// gone silent is sent a PING, and given up (502) when it goes
// unanswered.
func TestH2CPing(t *testing.T) {
	t.Parallel()
	pinged := make(chan struct{}, 1)
	u := startRawH2C(t, &rawH2C{silent: true, onFrame: func(cn *rawH2CConn, ev h2Event) {
		if ev.typ == http2.FramePing {
			select {
			case pinged <- struct{}{}:
			default:
			}
		}
	}})
	_, url := h2cFront(t, u.addr, Config{}, func(p *Proxy) {
		p.h2c.pingAfter, p.h2c.pingTimeout = 50*time.Millisecond, 100*time.Millisecond
	})
	req, _ := http.NewRequest("GET", url+"/", nil)
	if o := do(&http.Client{Timeout: 10 * time.Second}, req); o.code != 502 {
		t.Errorf("got %d %v, want 502", o.code, o.err)
	}
	testnet.Recv(t, pinged, recvBound, "PING at the upstream")
}

// TestH2CIdleRetire: a connection left without streams for the idle
// timeout is closed (the upstream sees it end).
func TestH2CIdleRetire(t *testing.T) {
	t.Parallel()
	closed := make(chan int32, 1)
	u := startRawH2C(t, &rawH2C{
		onFrame: func(cn *rawH2CConn, ev h2Event) {
			if ev.typ == http2.FrameHeaders {
				cn.headers(ev.stream, true, ":status", "204")
			}
		},
		onClose: func(cn *rawH2CConn) { closed <- cn.n },
	})
	_, url := h2cFront(t, u.addr, Config{IdleConnTimeout: 50 * time.Millisecond})
	req, _ := http.NewRequest("GET", url+"/", nil)
	if o := do(&http.Client{Timeout: 10 * time.Second}, req); o.code != 204 {
		t.Fatalf("got %d %v, want 204", o.code, o.err)
	}
	if n := testnet.Recv(t, closed, recvBound, "the idle connection's close"); n != 1 {
		t.Errorf("closed connection %d, want 1", n)
	}
}

// TestH2CTrailers: trailers pass both ways, end to end: a client's
// chunked upload with trailers reaches an h2c upstream (net/http's) as
// HTTP/2 trailers, and the upstream's response trailers reach the client.
func TestH2CTrailers(t *testing.T) {
	t.Parallel()
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Trailer", "X-Sum")
		w.WriteHeader(200)
		fmt.Fprintf(w, "%s|%s", b, r.Trailer.Get("X-Client-Trailer"))
		w.Header().Set("X-Sum", "42")
	}))
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	up.Config.Protocols = &protos
	up.Start()
	t.Cleanup(up.Close)
	_, url := h2cFront(t, up.Listener.Addr().String(), Config{Timeout: 10 * time.Second})
	req, _ := http.NewRequest("POST", url+"/", io.MultiReader(strings.NewReader("body")))
	req.ContentLength = -1
	req.Trailer = http.Header{"X-Client-Trailer": {"t1"}}
	req.Header.Set("Te", "trailers")
	o := do(&http.Client{Timeout: 10 * time.Second}, req)
	if o.err != nil || o.code != 200 || o.body != "body|t1" {
		t.Fatalf("got %d %q %v, want 200 \"body|t1\"", o.code, o.body, o.err)
	}
	if got := o.trailer.Get("X-Sum"); got != "42" {
		t.Errorf("trailer X-Sum = %q, want 42 (header %v, trailer %v)", got, o.header, o.trailer)
	}
}

// TestH2CTimeouts: --response-start-timeout and --idle-timeout hold on the
// h2c upstream as on HTTP/1.1: an upstream that answers PINGs but never a
// head gets the client a 504; one that sends a head and part of the body,
// then nothing more, has the client's response cut (abort), not held.
func TestH2CTimeouts(t *testing.T) {
	t.Parallel()
	t.Run("response start", func(t *testing.T) {
		t.Parallel()
		u := startRawH2C(t, &rawH2C{}) // takes every stream, answers none
		_, url := h2cFront(t, u.addr, Config{ResponseStartTimeout: 100 * time.Millisecond})
		req, _ := http.NewRequest("GET", url+"/", nil)
		if o := do(&http.Client{Timeout: 10 * time.Second}, req); o.code != http.StatusGatewayTimeout {
			t.Errorf("got %d %v, want 504", o.code, o.err)
		}
	})
	t.Run("idle", func(t *testing.T) {
		t.Parallel()
		u := startRawH2C(t, &rawH2C{onFrame: func(cn *rawH2CConn, ev h2Event) {
			if ev.typ == http2.FrameHeaders {
				cn.headers(ev.stream, false, ":status", "200")
				cn.data(ev.stream, "part", false) // and never the rest
			}
		}})
		_, url := h2cFront(t, u.addr, Config{IdleTimeout: 100 * time.Millisecond})
		req, _ := http.NewRequest("GET", url+"/", nil)
		o := do(&http.Client{Timeout: 10 * time.Second}, req)
		if o.code != http.StatusOK || o.body != "part" || o.err == nil {
			t.Errorf("got %d %q %v, want 200, \"part\", then the response cut", o.code, o.body, o.err)
		}
		// Cut by queue, not by the client's own timeout.
		if ne, ok := errors.AsType[net.Error](o.err); ok && ne.Timeout() {
			t.Errorf("the client timed out (%v): queue held the response", o.err)
		}
	})
}

// TestH2CStreamsPerConn: a connection carries at most h2cMaxStreams
// streams even when the upstream allows more; the requests past them go
// on another connection.
func TestH2CStreamsPerConn(t *testing.T) {
	t.Parallel()
	const total = h2cMaxStreams + 20
	var mu sync.Mutex
	perConn := map[int32]int{}
	var held []func()
	u := startRawH2C(t, &rawH2C{
		settings: []http2.Setting{{ID: http2.SettingMaxConcurrentStreams, Val: 1000}},
		onFrame: func(cn *rawH2CConn, ev h2Event) {
			if ev.typ != http2.FrameHeaders {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			perConn[cn.n]++
			held = append(held, func() { cn.headers(ev.stream, true, ":status", "200", "content-length", "0") })
			if len(held) == total { // all in at once: answer them
				for _, f := range held {
					f()
				}
			}
		},
	})
	_, url := h2cFront(t, u.addr, Config{})
	errs := make(chan error, total)
	for range total {
		go func() {
			res, err := http.Get(url + "/")
			if err == nil {
				res.Body.Close()
				if res.StatusCode != 200 {
					err = fmt.Errorf("status %d", res.StatusCode)
				}
			}
			errs <- err
		}()
	}
	for range total {
		if err := testnet.Recv(t, errs, recvBound, "a response"); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	n := 0
	for conn, streams := range perConn {
		if streams > h2cMaxStreams {
			t.Errorf("connection %d carried %d streams at once, want at most %d", conn, streams, h2cMaxStreams)
		}
		n += streams
	}
	if len(perConn) < 2 || n != total {
		t.Errorf("%d streams on %d connections (%v), want %d on two or more", n, len(perConn), perConn, total)
	}
}
