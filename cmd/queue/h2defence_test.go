package main

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queue-dev/queue/h2"
	"github.com/queue-dev/queue/internal/testnet"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// HTTP/2 attack defences: each case drives queue's HTTP/2 server with a raw
// client (h2Conn: x/net's Framer and hpack), a live upstream behind it that counts
// the requests it sees, and asserts the limits of package h2 by counts and
// bounds. Every wait is bounded by a deadline on the client's connection
// (h2Wait), and the points where the server's state is compared with the
// client's are synchronised by a PING and its acknowledgement.

// h2dUpstream counts the requests it sees by path, then serves them with
// serve, or answers "ok".
type h2dUpstream struct {
	total atomic.Int64
	mu    sync.Mutex
	paths map[string]int
	serve http.HandlerFunc
}

func (u *h2dUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.total.Add(1)
	u.mu.Lock()
	u.paths[r.URL.Path]++
	u.mu.Unlock()
	if u.serve != nil {
		u.serve(w, r)
		return
	}
	io.WriteString(w, "ok")
}

func (u *h2dUpstream) count(path string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.paths[path]
}

// await waits, within d, until the upstream has seen n requests for path;
// it reports whether it has.
func (u *h2dUpstream) await(path string, n int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for u.count(path) < n {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond) // bounded poll of the upstream
	}
	return true
}

// h2dGate holds upstream responses until it opens (or their request ends).
type h2dGate struct {
	ch   chan struct{}
	once sync.Once
}

func newH2dGate() *h2dGate { return &h2dGate{ch: make(chan struct{})} }

func (g *h2dGate) open() { g.once.Do(func() { close(g.ch) }) }

// hold is an upstream handler that answers "ok" once the gate opens, and
// nothing if its request ends before.
func (g *h2dGate) hold(w http.ResponseWriter, r *http.Request) {
	select {
	case <-g.ch:
		io.WriteString(w, "ok")
	case <-r.Context().Done():
	}
}

// h2dServe starts a counting upstream (serve nil: "ok") and queue in front
// of it. A gate, if any, opens before queue stops, so that held upstream
// handlers do not hold up its drain.
func h2dServe(t *testing.T, serve http.HandlerFunc, gate *h2dGate) (*h2dUpstream, *testQueue) {
	t.Helper()
	u := &h2dUpstream{paths: map[string]int{}, serve: serve}
	q := startQueue(t, hostPort(h1Upstream(t, u)))
	if gate != nil {
		t.Cleanup(gate.open)
	}
	return u, q
}

// h2dStart is h2dServe, then a client connection to queue with o, its
// read loop started.
func h2dStart(t *testing.T, serve http.HandlerFunc, gate *h2dGate, o h2Opts) (*h2dUpstream, *testQueue, *h2Conn) {
	t.Helper()
	u, q := h2dServe(t, serve, gate)
	c := h2Dial(t, q.addr.Listen, o)
	c.start()
	return u, q, c
}

// h2dCheckSettings checks the limits the server advertised in its first
// SETTINGS.
func h2dCheckSettings(t *testing.T, c *h2Conn) {
	t.Helper()
	for _, s := range []struct {
		id   http2.SettingID
		want uint32
	}{
		{http2.SettingMaxConcurrentStreams, h2.MaxConcurrentStreams},
		{http2.SettingMaxHeaderListSize, h2.MaxHeaderListSize},
	} {
		got, ok := c.settings[s.id]
		switch {
		case !ok:
			t.Errorf("SETTINGS: %v not advertised, want %d", s.id, s.want)
		case got != s.want:
			t.Errorf("SETTINGS: %v = %d, want %d", s.id, got, s.want)
		}
	}
	t.Logf("server's SETTINGS: %v", c.settings)
}

// h2dGet sends the request of fields (h2Req's) on stream id and waits for
// its end; it fails the test unless the response is a 200.
func h2dGet(t *testing.T, c *h2Conn, id uint32, fields ...hpack.HeaderField) {
	t.Helper()
	path := fields[3].Value
	if _, err := c.headers(id, true, fields...); err != nil {
		t.Errorf("GET %s on stream %d: %v", path, id, err)
		return
	}
	c.waitFor(h2Wait, func() bool { return c.finished(id) })
	s := c.snap(id)
	g, rerr := c.state()
	if s.status != "200" || !s.ended || s.reset {
		t.Errorf("GET %s on stream %d: %+v, want a 200 to its end (GOAWAY %+v, read %v)", path, id, s, g, rerr)
	}
}

// h2dCheck431 checks that stream id was answered 431 in a HEADERS frame
// with END_STREAM, the connection going on.
func h2dCheck431(t *testing.T, c *h2Conn, id uint32) {
	t.Helper()
	c.waitFor(h2Wait, func() bool { return c.finished(id) })
	s := c.snap(id)
	g, rerr := c.state()
	switch {
	case s.status != "431":
		t.Errorf("stream %d: %+v, want :status 431 (GOAWAY %+v, read %v)", id, s, g, rerr)
	case !s.headersEnd:
		t.Errorf("stream %d: 431 without END_STREAM on its HEADERS (%d bytes of DATA, ended %v, reset %v %v), want HEADERS with END_STREAM",
			id, s.data, s.ended, s.reset, s.code)
	}
	if g != nil {
		t.Errorf("GOAWAY %+v after the 431: the connection must go on", *g)
	}
}

// h2dCheckCalm checks that the server sent GOAWAY ENHANCE_YOUR_CALM and
// closed the connection; what says what the client did. With probe, a PING
// follows what the client did: a server that acknowledges it without a
// GOAWAY before has handled the flood and let it pass, and the test need
// not wait long for a GOAWAY that would come out of order. Without probe
// (a header block is open, in which a PING is a protocol error), the
// GOAWAY is waited for, within wait.
func h2dCheckCalm(t *testing.T, c *h2Conn, what string, wait time.Duration, probe bool) {
	t.Helper()
	if probe && c.sync(wait) {
		wait = time.Second
	}
	c.waitFor(wait, func() bool { return c.goAway != nil || c.readErr != nil })
	g, rerr := c.state()
	closed := h2Closed(rerr)
	if g != nil && rerr == nil {
		closed, rerr = c.waitEnd(h2Wait) // after the GOAWAY, the close
	}
	switch {
	case g == nil:
		t.Errorf("%s: no GOAWAY (read %v), want GOAWAY ENHANCE_YOUR_CALM", what, rerr)
	case g.code != http2.ErrCodeEnhanceYourCalm:
		t.Errorf("%s: GOAWAY %v (last stream %d, %q), want ENHANCE_YOUR_CALM", what, g.code, g.last, g.debug)
	default:
		t.Logf("%s: GOAWAY %v (last stream %d, %q)", what, g.code, g.last, g.debug)
	}
	if !closed {
		t.Errorf("%s: connection not closed by the server (read %v)", what, rerr)
	}
}

// h2dMetric scrapes queue's metrics port and returns the value of the
// series name{protocol=proto}, or fails the test.
func h2dMetric(t *testing.T, q *testQueue, name, proto string) float64 {
	t.Helper()
	res, err := boundedClient.Get("http://" + q.addr.Metrics + "/metrics")
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	prefix := name + `{protocol="` + proto + `"`
	for line := range strings.Lines(string(b)) {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("metrics: %q: %v", line, err)
		}
		return v
	}
	t.Fatalf("metrics: no %s{protocol=%q} in\n%s", name, proto, b)
	return 0
}

// h2dSysctlMax returns the last number of a /proc/sys file (the maximum of
// tcp_wmem, or a single value), or 0.
func h2dSysctlMax(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(f[len(f)-1])
	return n
}

// TestH2Defence: queue's HTTP/2 server against the known HTTP/2 attacks,
// with the limits of package h2.
//
// Not parallel: "resource loop" measures the process's heap, so it runs
// first and alone; the other cases run in parallel after it.
func TestH2Defence(t *testing.T) {
	// CVE-2019-9517: responses a client does not read are not buffered
	// whole. queue runs in this process, so its RSS is the test's own; the
	// Go heap in use, after a GC, is what a buffering server would grow.
	t.Run("resource loop", func(t *testing.T) {
		const streams, size = 64, 1 << 20
		// A server that buffered what its client does not read would hold
		// up to the 64 MiB; a bounded one holds h2.MaxQueued and a chunk or
		// two a stream.
		const heapBound = 32 << 20
		pattern := make([]byte, size)
		for i := range pattern {
			pattern[i] = byte(i % 251)
		}
		var upWritten atomic.Int64
		u, q := h2dServe(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", strconv.Itoa(size))
			for off := 0; off < size; off += 32 << 10 {
				n, err := w.Write(pattern[off : off+32<<10])
				upWritten.Add(int64(n))
				if err != nil {
					return
				}
			}
		}, nil)
		c := h2Dial(t, q.addr.Listen, h2Opts{rcvbuf: 64 << 10, settings: []http2.Setting{{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1}}})
		c.pattern = pattern
		if err := c.write(true, func(fr *http2.Framer) error { return fr.WriteWindowUpdate(0, 1<<31-1-65535) }); err != nil {
			t.Fatal(err)
		}
		before := hostileHeap()
		for i := range streams {
			if _, err := c.headers(uint32(2*i+1), true, h2Req("GET", "/mib")...); err != nil {
				t.Fatal(err)
			}
		}
		// Not reading: wait until every request reached the upstream, then
		// sample the heap until neither the upstream's writes nor the heap
		// have moved for a second (the upstream wrote all, into the
		// loopback sockets' buffers, or queue stopped taking the responses
		// in): a server that read the responses in for a client that does
		// not read would hold them then. A pause of the upstream's writes
		// alone does not end the sampling while the heap still grows, and
		// if the two never stand still, the test fails rather than
		// compare a peak taken half way.
		if !u.await("/mib", streams, h2Wait) {
			t.Fatalf("upstream saw %d of %d requests %v after they were sent", u.count("/mib"), streams, h2Wait)
		}
		peak, ok := hostileHeapPeak(upWritten.Load, h2Wait)
		stalled := upWritten.Load()
		if !ok {
			t.Fatalf("the upstream's writes (%d KiB) or the heap in use (%d KiB over the start) still grew %v after the requests, with the client not reading",
				stalled>>10, (int64(peak)-int64(before))>>10, h2Wait)
		}

		c.c.SetDeadline(time.Now().Add(h2Wait))
		c.start()
		if !c.waitStreams(h2Wait, streams) {
			_, rerr := c.state()
			t.Errorf("not every stream ended %v after the client began to read (read %v)", h2Wait, rerr)
		}
		whole := 0
		for i := range streams {
			id := uint32(2*i + 1)
			s := c.snap(id)
			switch {
			case s.status != "200" || s.reset || !s.ended || s.data != size:
				t.Errorf("stream %d: %+v, want a 200 with %d bytes to its end", id, s, size)
			case s.corrupt:
				t.Errorf("stream %d: the body differs from what the upstream sent", id)
			default:
				whole++
			}
		}
		growth := int64(peak) - int64(before)
		if growth > heapBound {
			t.Errorf("heap in use grew by %d KiB while the client did not read, want < %d KiB", growth>>10, heapBound>>10)
		}
		t.Logf("%d of %d responses whole; heap grew by %d KiB at most while the client did not read; the upstream had written %d KiB when it stalled",
			whole, streams, growth>>10, stalled>>10)
	})

	t.Run("settings", func(t *testing.T) {
		t.Parallel()
		_, q := h2dServe(t, nil, nil)
		c := h2Dial(t, q.addr.Listen, h2Opts{})
		h2dCheckSettings(t, c)
	})

	// CVE-2023-44487: streams opened and reset at once.
	t.Run("rapid reset", func(t *testing.T) {
		t.Parallel()
		u, q, c := h2dStart(t, nil, nil, h2Opts{})
		pairs := 5 * h2.MaxGlitches
		sent := 0
		var werr error
		for i := 0; i < pairs && werr == nil; i++ {
			id := uint32(2*i + 1)
			flush := i%100 == 99 || i == pairs-1
			werr = c.write(flush, func(fr *http2.Framer) error {
				if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.encode(h2Req("GET", "/rr")...), EndStream: true, EndHeaders: true}); err != nil {
					return err
				}
				return fr.WriteRSTStream(id, http2.ErrCodeCancel)
			})
			if werr == nil {
				sent++
			}
			if g, rerr := c.state(); flush && (g != nil || rerr != nil) {
				break
			}
		}
		h2dCheckCalm(t, c, fmt.Sprintf("%d HEADERS+RST_STREAM pairs (write %v)", sent, werr), h2Wait, true)
		refused := c.count(func(s *h2Stream) bool { return s.reset })
		hostileHealthy(t, q, "/after-rapid-reset")
		// After the connection ended and fresh requests were served.
		n := u.count("/rr")
		if bound := h2.MaxGlitches + h2.MaxConcurrentStreams; n > bound {
			t.Errorf("upstream saw %d of the %d reset requests, want at most %d", n, sent, bound)
		}
		t.Logf("%d pairs sent; the upstream saw %d; %d streams reset by the server", sent, n, refused)
	})

	// CVE-2024-27316: a header block that never ends.
	t.Run("continuation flood", func(t *testing.T) {
		t.Parallel()
		for _, tt := range []h2Frag{
			{"hpack literals", h2Literals()},
			{"empty frames", nil},
		} {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				u, q, c := h2dStart(t, nil, nil, h2Opts{})
				if len(tt.frag) > c.maxFrame {
					t.Fatalf("server's frame size %d < %d", c.maxFrame, len(tt.frag))
				}
				// The client offers at most 4*MaxHeaderBlock bytes of the
				// block and never ends it: a server that needs more to
				// decide would wait for ever.
				limit := 4 * h2.MaxHeaderBlock
				offered, werr := c.openBlock(1, "/cont")
				for werr == nil && offered+9+len(tt.frag) <= limit {
					if g, rerr := c.state(); g != nil || rerr != nil {
						break
					}
					werr = c.write(true, func(fr *http2.Framer) error {
						for batch := 0; batch < 16<<10 && offered+9+len(tt.frag) <= limit; batch += 9 + len(tt.frag) {
							if err := fr.WriteContinuation(1, false, tt.frag); err != nil {
								return err
							}
							offered += 9 + len(tt.frag)
						}
						return nil
					})
				}
				h2dCheckCalm(t, c, fmt.Sprintf("%d KiB of header block offered (limit %d KiB, write %v)", offered>>10, limit>>10, werr), h2Wait, false)
				if s := c.snap(1); s.status != "" && s.status != "431" {
					t.Errorf("stream 1 answered %s", s.status)
				}
				if n := u.total.Load(); n != 0 {
					t.Errorf("upstream saw %d requests, want 0", n)
				}
				hostileHealthy(t, q, "/after-continuation")
			})
		}
	})

	// A block small encoded that decodes past MaxHeaderListSize: a 4000
	// byte field in the dynamic table, referenced again and again, block
	// after block. The first such block ends the connection.
	t.Run("hpack bomb", func(t *testing.T) {
		t.Parallel()
		u, q, c := h2dStart(t, nil, nil, h2Opts{})
		table := uint32(4096)
		if v, ok := c.settings[http2.SettingHeaderTableSize]; ok {
			table = v
		}
		valueLen := min(4000, int(table)-32-len("x-bomb"))
		if valueLen < 1000 {
			t.Fatalf("server's HEADER_TABLE_SIZE is %d: no room for the bomb's field", table)
		}
		bomb := hpack.HeaderField{Name: "x-bomb", Value: strings.Repeat("b", valueLen)}
		// Pseudo-headers never indexed: the dynamic table holds the bomb's
		// field alone.
		req := func(path string, extra ...hpack.HeaderField) []hpack.HeaderField {
			f := h2Req("GET", path, extra...)
			for i := range 4 {
				f[i].Sensitive = true
			}
			return f
		}
		h2dGet(t, c, 1, req("/seed", bomb)...) // inserts the field
		refs := 2*h2.MaxHeaderListSize/int(bomb.Size()) + 1
		fields := req("/bomb")
		for range refs {
			fields = append(fields, bomb)
		}
		// Block after block, until the connection ends (at most 20).
		sent, enc := 0, 0
		for id := uint32(3); sent < 20; id += 2 {
			if g, rerr := c.state(); g != nil || rerr != nil {
				break
			}
			n, err := c.headers(id, true, fields...)
			if err != nil {
				break
			}
			sent, enc = sent+1, n
		}
		t.Logf("bomb: %d bytes encoded, %d decoded; %d blocks sent", enc, refs*int(bomb.Size()), sent)
		h2dCheckCalm(t, c, fmt.Sprintf("%d bomb blocks", sent), h2Wait, false)
		if n := c.count(func(s *h2Stream) bool { return s.status == "431" }); n != 0 {
			t.Errorf("%d bombs answered 431: the first must end the connection", n)
		}
		if n := u.count("/bomb"); n != 0 {
			t.Errorf("upstream saw the bomb %d times", n)
		}
		if n := h2dMetric(t, q, "queue_glitch_closes_total", "h2"); n != 1 {
			t.Errorf("queue_glitch_closes_total{protocol=\"h2\"} = %v, want 1", n)
		}
		hostileHealthy(t, q, "/after-bomb")
	})

	// A client's one header list over the limit: its 431, and the
	// connection goes on (a tenth in a row would end it: h2.GlitchHeadTooLarge).
	t.Run("oversized head", func(t *testing.T) {
		t.Parallel()
		u, _, c := h2dStart(t, nil, nil, h2Opts{})
		big := hpack.HeaderField{Name: "x-big", Value: strings.Repeat("v", h2.MaxHeaderListSize)}
		if _, err := c.headers(1, true, h2Req("GET", "/big", big)...); err != nil {
			t.Fatal(err)
		}
		h2dCheck431(t, c, 1)
		h2dGet(t, c, 3, h2Req("GET", "/after")...)
		if n := u.count("/big"); n != 0 {
			t.Errorf("upstream saw the oversized request")
		}
	})

	// CVE-2019-9512 and CVE-2019-9515: acknowledgements the client does not
	// read.
	t.Run("control flood", func(t *testing.T) {
		t.Parallel()
		ping := append([]byte{0, 0, 8, byte(http2.FramePing), 0, 0, 0, 0, 0}, "floodpin"...)
		settings := []byte{0, 0, 0, byte(http2.FrameSettings), 0, 0, 0, 0, 0}
		for _, tt := range []struct {
			name    string
			frame   []byte
			ackSize int
			initial int // acknowledgements due before the flood
			acks    func(c *h2Conn) int
		}{
			{"ping", ping, 17, 0, func(c *h2Conn) int { return c.pingAcks }},
			{"settings", settings, 9, 1, func(c *h2Conn) int { return c.settingsAcks }},
		} {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				_, q := h2dServe(t, nil, nil)
				c := h2Dial(t, q.addr.Listen, h2Opts{rcvbuf: 64 << 10})
				// What may reach the client besides the server's queue: the
				// server's send buffer (autotuned up to tcp_wmem's maximum,
				// or set up to twice wmem_max) and the client's receive
				// buffer, with a slack for the server's write buffer.
				sndbuf := max(h2dSysctlMax("/proc/sys/net/ipv4/tcp_wmem"), 2*h2dSysctlMax("/proc/sys/net/core/wmem_max"))
				if sndbuf == 0 {
					sndbuf = 8 << 20
				}
				bound := h2.MaxQueued + sndbuf + rcvbufOf(c.c) + 256<<10
				frames := 4 * bound / tt.ackSize
				chunk := bytes.Repeat(tt.frame, (64<<10)/len(tt.frame))
				c.c.SetDeadline(time.Now().Add(h2Wait))
				total := frames * len(tt.frame)
				start := time.Now()
				var wrote int
				var werr error
				for wrote < total && werr == nil {
					p := chunk[:min(len(chunk), total-wrote)]
					var n int
					n, werr = c.rawWrite(p)
					wrote += n
				}
				sent := wrote/len(tt.frame) + tt.initial
				took := time.Since(start)

				// A server that kept to its bound closed the connection while
				// the client was not reading: what is left is in the socket
				// buffers. One that acknowledges every frame has queued them
				// all (or stopped reading), and need not be waited for.
				c.c.SetDeadline(time.Now().Add(h2Wait))
				c.start()
				c.waitFor(h2Wait, func() bool { return c.readErr != nil || tt.acks(c) >= sent })
				_, rerr := c.state()
				closed := h2Closed(rerr)
				if rerr == nil {
					rerr = errors.New("still open")
				}
				c.mu.Lock()
				acks, g := tt.acks(c), c.goAway
				c.mu.Unlock()
				if !closed {
					t.Errorf("connection not closed by the server (read %v)", rerr)
				}
				if acks >= sent {
					t.Errorf("%d acknowledgements for %d frames: every one queued", acks, sent)
				}
				if acks*tt.ackSize > bound {
					t.Errorf("%d acknowledgements (%d KiB): more than h2.MaxQueued and the socket buffers hold (%d KiB)", acks, acks*tt.ackSize>>10, bound>>10)
				}
				if g != nil && g.code != http2.ErrCodeEnhanceYourCalm {
					t.Errorf("GOAWAY %v (%q), want ENHANCE_YOUR_CALM", g.code, g.debug)
				}
				t.Logf("%d of %d frames written in %v (write %v); %d acknowledgements read, at most %d allowed; GOAWAY %+v; read %v",
					sent, frames+tt.initial, took.Round(time.Millisecond), werr, acks, bound/tt.ackSize, g, rerr)
				hostileHealthy(t, q, "/after-"+tt.name+"-flood")
			})
		}
	})

	// CVE-2019-9518: empty DATA frames on an open stream.
	t.Run("empty frame flood", func(t *testing.T) {
		t.Parallel()
		_, q, c := h2dStart(t, func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			io.WriteString(w, "ok")
		}, nil, h2Opts{})
		if _, err := c.headers(1, false, h2Req("POST", "/upload")...); err != nil {
			t.Fatal(err)
		}
		frames := 2 * h2.MaxGlitches
		sent := 0
		var werr error
		for sent < frames && werr == nil {
			if g, rerr := c.state(); g != nil || rerr != nil {
				break
			}
			werr = c.write(true, func(fr *http2.Framer) error {
				for batch := 0; batch < 100 && sent < frames; batch++ {
					if err := fr.WriteData(1, false, nil); err != nil {
						return err
					}
					sent++
				}
				return nil
			})
		}
		h2dCheckCalm(t, c, fmt.Sprintf("%d empty DATA frames (write %v)", sent, werr), h2Wait, true)
		hostileHealthy(t, q, "/after-empty-frames")
	})

	// WINDOW_UPDATE frames of increment 0 on a stream: each a stream error
	// (RST_STREAM PROTOCOL_ERROR), and a glitch.
	t.Run("zero window update flood", func(t *testing.T) {
		t.Parallel()
		gate := newH2dGate()
		u, q, c := h2dStart(t, gate.hold, gate, h2Opts{})
		if _, err := c.headers(1, true, h2Req("GET", "/slow")...); err != nil {
			t.Fatal(err)
		}
		if !u.await("/slow", 1, h2Wait) {
			t.Fatalf("upstream did not see the request within %v", h2Wait)
		}
		frames := 2 * h2.MaxGlitches
		sent := 0
		var werr error
		for sent < frames && werr == nil {
			if g, rerr := c.state(); g != nil || rerr != nil {
				break
			}
			werr = c.write(true, func(fr *http2.Framer) error {
				fr.AllowIllegalWrites = true // an increment of 0
				for batch := 0; batch < 100 && sent < frames; batch++ {
					if err := fr.WriteWindowUpdate(1, 0); err != nil {
						return err
					}
					sent++
				}
				return nil
			})
		}
		h2dCheckCalm(t, c, fmt.Sprintf("%d WINDOW_UPDATE frames of 0 (write %v)", sent, werr), h2Wait, true)
		if n := h2dMetric(t, q, "queue_glitches_total", "h2"); n <= h2.MaxGlitches {
			t.Errorf("queue_glitches_total{protocol=\"h2\"} = %v, want over %d", n, h2.MaxGlitches)
		}
		gate.open()
		hostileHealthy(t, q, "/after-zero-window-updates")
	})

	// CVE-2019-9516: header fields of zero length.
	t.Run("zero-length headers", func(t *testing.T) {
		t.Parallel()
		t.Run("empty name", func(t *testing.T) {
			t.Parallel()
			u, _, c := h2dStart(t, nil, nil, h2Opts{})
			if _, err := c.headers(1, true, h2Req("GET", "/empty-name", hpack.HeaderField{Name: "", Value: "x", Sensitive: true})...); err != nil {
				t.Fatal(err)
			}
			c.waitFor(h2Wait, func() bool { return c.finished(1) })
			s := c.snap(1)
			g, rerr := c.state()
			if !s.reset || s.code != http2.ErrCodeProtocol || s.status != "" {
				t.Errorf("stream 1: %+v, want RST_STREAM PROTOCOL_ERROR (GOAWAY %+v, read %v)", s, g, rerr)
			}
			h2dGet(t, c, 3, h2Req("GET", "/after")...)
			if n := u.count("/empty-name"); n != 0 {
				t.Errorf("upstream saw the request with an empty name")
			}
		})
		// Each field counts 32 bytes besides its name and value: as
		// literals, the list is an oversized head (431, the connection
		// goes on); indexed, one byte each, it is an HPACK bomb (the
		// connection ends).
		for _, tt := range []struct {
			name    string
			indexed bool
		}{
			{"many empty values", false},
			{"many empty values indexed", true},
		} {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				u, _, c := h2dStart(t, nil, nil, h2Opts{})
				n := h2.MaxHeaderListSize/32 + 1
				fields := h2Req("GET", "/empty-values")
				for range n {
					fields = append(fields, hpack.HeaderField{Name: "x-empty", Sensitive: !tt.indexed})
				}
				enc, err := c.headers(1, true, fields...)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%d empty values: %d bytes encoded", n, enc)
				if tt.indexed {
					h2dCheckCalm(t, c, "the indexed empty values", h2Wait, false)
				} else {
					h2dCheck431(t, c, 1)
					h2dGet(t, c, 3, h2Req("GET", "/after")...)
				}
				if n := u.count("/empty-values"); n != 0 {
					t.Errorf("upstream saw the request over the header list size")
				}
			})
		}
	})

	// CVE-2019-9511: a window of 16 bytes, opened 100 bytes at a time.
	t.Run("data dribble", func(t *testing.T) {
		t.Parallel()
		const size = 1 << 20
		_, _, c := h2dStart(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", strconv.Itoa(size))
			w.Write(make([]byte, size))
		}, nil, h2Opts{settings: []http2.Setting{{ID: http2.SettingInitialWindowSize, Val: 16}}})
		if _, err := c.headers(1, true, h2Req("GET", "/big")...); err != nil {
			t.Fatal(err)
		}
		for _, want := range []int{16, 16 + 100} {
			c.waitFor(h2Wait, func() bool { return c.stream(1).data >= want || c.finished(1) })
			// The acknowledgement of a PING sent after the window filled
			// shows the server idle on the stream: nothing more is due.
			synced := c.sync(h2Wait)
			s := c.snap(1)
			g, rerr := c.state()
			if !synced {
				t.Fatalf("PING not acknowledged (GOAWAY %+v, read %v)", g, rerr)
			}
			if s.status != "200" || s.data != want || s.ended || s.reset {
				t.Fatalf("stream 1: %+v, want a 200 with exactly %d bytes of DATA so far", s, want)
			}
			if want == 16 {
				if err := c.write(true, func(fr *http2.Framer) error { return fr.WriteWindowUpdate(1, 100) }); err != nil {
					t.Fatal(err)
				}
			}
		}
	})

	// Flow-control windows past 2^31-1.
	t.Run("window overflow", func(t *testing.T) {
		t.Parallel()
		for _, tt := range []struct {
			name   string
			stream uint32
		}{
			{"stream", 1},
			{"connection", 0},
		} {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				gate := newH2dGate()
				u, _, c := h2dStart(t, gate.hold, gate, h2Opts{})
				if _, err := c.headers(1, true, h2Req("GET", "/slow")...); err != nil {
					t.Fatal(err)
				}
				if !u.await("/slow", 1, h2Wait) {
					t.Fatalf("upstream did not see the request within %v", h2Wait)
				}
				// The send window is 65535: this takes it past 2^31-1.
				if err := c.write(true, func(fr *http2.Framer) error { return fr.WriteWindowUpdate(tt.stream, 1<<31-1) }); err != nil {
					t.Fatal(err)
				}
				if tt.stream == 0 {
					c.waitFor(h2Wait, func() bool { return c.goAway != nil || c.readErr != nil })
					g, rerr := c.state()
					if g == nil || g.code != http2.ErrCodeFlowControl {
						t.Errorf("GOAWAY %+v (read %v), want GOAWAY FLOW_CONTROL_ERROR", g, rerr)
					}
					return
				}
				c.waitFor(h2Wait, func() bool { return c.finished(1) })
				s := c.snap(1)
				if !s.reset || s.code != http2.ErrCodeFlowControl {
					g, rerr := c.state()
					t.Errorf("stream 1: %+v, want RST_STREAM FLOW_CONTROL_ERROR (GOAWAY %+v, read %v)", s, g, rerr)
				}
				synced := c.sync(h2Wait)
				if g, rerr := c.state(); !synced || g != nil {
					t.Errorf("a stream error ended the connection: PING acknowledged %v, GOAWAY %+v, read %v", synced, g, rerr)
				}
			})
		}
	})

	// Streams past the advertised MAX_CONCURRENT_STREAMS.
	t.Run("max concurrent streams", func(t *testing.T) {
		t.Parallel()
		gate := newH2dGate()
		u, _, c := h2dStart(t, gate.hold, gate, h2Opts{})
		const n = h2.MaxConcurrentStreams
		last := uint32(2*n + 1)
		if err := c.write(true, func(fr *http2.Framer) error {
			for i := range n + 1 {
				id := uint32(2*i + 1)
				if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.encode(h2Req("GET", "/held")...), EndStream: true, EndHeaders: true}); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		c.waitFor(h2Wait, func() bool { return c.finished(last) })
		s := c.snap(last)
		if !s.reset || (s.code != http2.ErrCodeRefusedStream && s.code != http2.ErrCodeProtocol) {
			g, rerr := c.state()
			t.Fatalf("stream %d (the %d-th): %+v, want RST_STREAM REFUSED_STREAM (GOAWAY %+v, read %v)", last, n+1, s, g, rerr)
		}
		t.Logf("stream %d: RST_STREAM %v", last, s.code)
		u.await("/held", n, h2Wait)
		if !c.sync(h2Wait) {
			t.Fatal("PING not acknowledged")
		}
		if got := u.count("/held"); got != n {
			t.Errorf("upstream saw %d requests, want %d", got, n)
		}
		c.c.SetDeadline(time.Now().Add(h2Wait))
		gate.open()
		c.waitStreams(h2Wait, n)
		ok := 0
		for i := range n {
			id := uint32(2*i + 1)
			if s := c.snap(id); s.status == "200" && s.ended && !s.reset {
				ok++
			} else if i-ok < 3 {
				t.Errorf("stream %d: %+v, want a 200", id, s)
			}
		}
		if ok != n {
			g, rerr := c.state()
			t.Errorf("%d of %d held streams completed with 200 (GOAWAY %+v, read %v)", ok, n, g, rerr)
		}
	})
}

// h2dLingerBound bounds how long queue keeps a connection after the GOAWAY
// of a connection error while its client goes on writing: its linger (a
// second, package h2's goAwayWait), with room for a loaded machine ten
// times slower than an idle one. A server that lingered for as long as the
// client writes would keep the connection for all of testnet.Junk's
// writing, far past it.
const h2dLingerBound = 5 * time.Second

// TestH2ConnErrorCloses: on the plain and the TLS serving ports, a
// connection error gets GOAWAY with its code, the client then reads the
// end of the connection (not a reset), and queue closes the socket within
// its linger while the client goes on writing junk. One case for each way
// queue finds a connection error: a frame header alone (a first frame that
// is not SETTINGS, whose payload never comes; a frame over the frame size,
// header only), a frame's payload (a header block HPACK cannot decode),
// and the glitch budget (empty DATA frames).
func TestH2ConnErrorCloses(t *testing.T) {
	t.Parallel()
	up := h1Upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	}))
	q := startTLSQueue(t, hostPort(up))
	settings := []byte{0, 0, 0, byte(http2.FrameSettings), 0, 0, 0, 0, 0}
	frame := func(typ http2.FrameType, flags http2.Flags, id uint32, payload []byte) []byte {
		var b bytes.Buffer
		fr := http2.NewFramer(&b, nil)
		fr.AllowIllegalWrites = true
		fr.WriteRawFrame(typ, flags, id, payload)
		return b.Bytes()
	}
	cases := []struct {
		name string
		code http2.ErrCode
		send func() []byte
	}{
		{"first frame not SETTINGS", http2.ErrCodeProtocol, func() []byte {
			// A DATA frame's header and 10 of its 100 bytes: the rest
			// never comes.
			return append([]byte{0, 0, 100, byte(http2.FrameData), 0, 0, 0, 0, 1}, make([]byte, 10)...)
		}},
		{"frame over the frame size", http2.ErrCodeFrameSize, func() []byte {
			n := h2.MaxFrameSize + 1
			return append(settings, byte(n>>16), byte(n>>8), byte(n), byte(http2.FramePing), 0, 0, 0, 0, 0)
		}},
		{"HPACK decoding error", http2.ErrCodeCompression, func() []byte {
			// An indexed field of index 0 (RFC 7541 section 6.1).
			return append(settings, frame(http2.FrameHeaders, http2.FlagHeadersEndHeaders|http2.FlagHeadersEndStream, 1, []byte{0x80})...)
		}},
		{"glitch budget", http2.ErrCodeEnhanceYourCalm, func() []byte {
			var enc bytes.Buffer
			he := hpack.NewEncoder(&enc)
			for _, f := range h2Req("POST", "/upload") {
				he.WriteField(f)
			}
			b := append(settings, frame(http2.FrameHeaders, http2.FlagHeadersEndHeaders, 1, enc.Bytes())...)
			empty := frame(http2.FrameData, 0, 1, nil)
			for range h2.MaxGlitches + 1 {
				b = append(b, empty...)
			}
			return b
		}},
	}
	for _, port := range []string{"plain", "tls"} {
		for _, tc := range cases {
			t.Run(port+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				var nc net.Conn
				var err error
				if port == "tls" {
					nc, err = tls.DialWithDialer(&net.Dialer{Timeout: h2Wait}, "tcp", q.addr.TLS,
						&tls.Config{RootCAs: q.certPool, ServerName: "localhost", NextProtos: []string{"h2"}})
				} else {
					nc, err = net.DialTimeout("tcp", q.addr.Listen, h2Wait)
				}
				if err != nil {
					t.Fatal(err)
				}
				defer nc.Close()
				nc.SetDeadline(time.Now().Add(h2Wait))
				if _, err := nc.Write(append([]byte(http2.ClientPreface), tc.send()...)); err != nil {
					t.Fatal(err)
				}
				fr := http2.NewFramer(nil, nc)
				var ga *http2.GoAwayFrame
				for ga == nil {
					f, err := fr.ReadFrame()
					if err != nil {
						t.Fatalf("read frame: %v (want GOAWAY %v)", err, tc.code)
					}
					ga, _ = f.(*http2.GoAwayFrame)
				}
				at := time.Now()
				if ga.ErrCode != tc.code {
					t.Errorf("GOAWAY %v, want %v", ga.ErrCode, tc.code)
				}
				failed := testnet.Junk(nc)
				for {
					if _, err := fr.ReadFrame(); err != nil {
						if !errors.Is(err, io.EOF) {
							t.Errorf("after the GOAWAY the read ended with %v, want EOF", err)
						}
						break
					}
				}
				select {
				case f := <-failed:
					switch d := f.Sub(at); {
					case f.IsZero():
						t.Errorf("the client's writes never failed: queue did not close the connection")
					case d > h2dLingerBound:
						t.Errorf("the client's writes failed %v after the GOAWAY, want within %v", d, h2dLingerBound)
					default:
						t.Logf("the client's writes failed %v after the GOAWAY", d.Round(time.Millisecond))
					}
				case <-time.After(time.Until(at.Add(2 * h2dLingerBound))):
					t.Errorf("the client's writes still succeeded %v after the GOAWAY: queue did not close the connection", 2*h2dLingerBound)
				}
			})
		}
	}
}
