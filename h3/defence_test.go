package h3_test

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/quic-go/quicvarint"

	"github.com/queue-dev/queue/h3"
)

// Each test proves one of the defences limits.go lists, from the wire: a
// raw HTTP/3 client on quic-go's QUIC that writes the frames a hostile
// client would.

// dialRecord is one handshake of TestInitialFlood, on a socket of its own
// that records what it received.
type dialRecord struct {
	pc   *udpConn
	qc   *quic.Conn
	err  error
	done chan struct{}
}

// TestInitialFlood: past RetryAbove handshakes within the counting window,
// a client must prove its address with a Retry round trip, and still
// connects; a flood of junk datagrams does not keep a real client out. The
// server counts over an hour (SetRetryWindow), so that the handshakes fall
// in one window however slowly the machine runs them; TestRetryGate checks
// the one-second window itself.
func TestInitialFlood(t *testing.T) {
	t.Parallel()
	ts := retryPastThreshold(t, 40)

	// A flood of junk: random datagrams, and 1200-byte ones that start as
	// a long header (0xC0): garbage after it, or a QUIC v1 Initial header
	// with garbage for its protected payload.
	junk := listenUDP(t, "127.0.0.1:0")
	to := ts.udpAddr(t)
	var b [1500]byte
	for i := range 3000 {
		var p []byte
		switch i % 3 {
		case 0:
			p = b[:1+mrand.IntN(len(b))]
			rand.Read(p)
		case 1:
			p = b[:1200]
			rand.Read(p)
			p[0] = 0xc0
		case 2:
			p = b[:1200]
			rand.Read(p)
			p[0] = 0xc0
			copy(p[1:], []byte{0, 0, 0, 1}) // version 1
			p[5] = 8                        // DCID length; the 8 bytes stay random
			p[14] = 8                       // SCID length
			p[23] = 0                       // token length
			l := quicvarint.Append(nil, uint64(len(p)-26))
			copy(p[24:], l) // payload length: 2 bytes
		}
		if _, err := junk.WriteTo(p, to); err != nil {
			t.Fatalf("junk: %v", err)
		}
	}
	// The Initials past the threshold cost the server a Retry, no state.
	junk.SetReadDeadline(time.Now().Add(failAfter))
	for {
		n, _, err := junk.ReadFrom(b[:])
		if err != nil {
			t.Fatalf("no Retry for a flood of Initials from one address: %v", err)
		}
		if n > 0 && isRetry(b[0]) {
			break
		}
	}

	// A real client (quic-go's HTTP/3 client) still gets its answer.
	tr := &http3.Transport{TLSClientConfig: ts.cert.clientConfig()}
	t.Cleanup(func() { tr.Close() })
	hc := &http.Client{Transport: tr, Timeout: failAfter}
	res, err := hc.Get("https://" + ts.addr + "/after-flood")
	if err != nil {
		t.Fatalf("GET after the junk flood: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET after the junk flood: %d, want 200", res.StatusCode)
	}
}

// retryPastThreshold runs RetryAbove handshakes, then extra more, on a
// fresh server that counts them over an hour, and checks who got a Retry.
func retryPastThreshold(t *testing.T, extra int) *testServer {
	// The server's socket records what it read from each client, and
	// what it sent first.
	spc := &udpConn{PacketConn: listenUDP(t, "127.0.0.1:0"), got: make(chan struct{}), peers: map[string]*peerRecord{}}
	srv := &h3.Server{Handler: okHandler}
	h3.SetRetryWindow(srv, time.Hour)
	ts := serveOn(t, srv, spc, newCert(t, 0))
	to := ts.udpAddr(t)
	tc := ts.cert.clientConfig()
	tc.CurvePreferences = []tls.CurveID{tls.X25519} // a ClientHello in one Initial: one handshake, one count
	conf := &quic.Config{HandshakeIdleTimeout: failAfter}
	ctx, cancel := context.WithTimeout(context.Background(), 2*failAfter)
	defer cancel()
	start := func(n int) []*dialRecord {
		ds := make([]*dialRecord, n)
		for i := range ds {
			d := &dialRecord{pc: newUDPConn(t, 0), done: make(chan struct{})}
			ds[i] = d
			go func() {
				defer close(d.done)
				d.qc, d.err = dialVia(ctx, t, d.pc, to, tc, conf)
			}()
		}
		return ds
	}

	// The first RetryAbove: the server reads all their Initials before
	// the others send theirs, and handles them in that order.
	first := start(h3.RetryAbove)
	waitFor(t, "the first group's Initials", func() bool {
		for _, d := range first {
			if _, ok := spc.peer(d.pc.LocalAddr().String()); !ok {
				return false
			}
		}
		return true
	})
	past := start(extra)
	timeout := time.After(2 * failAfter)
	for i, d := range append(first, past...) {
		select {
		case <-d.done:
		case <-timeout:
			t.Fatalf("handshake %d: not done within %v", i, 2*failAfter)
		}
		if d.err != nil {
			t.Fatalf("handshake %d: %v (a Retry must cost a round trip, not the connection)", i, d.err)
		}
	}

	for i, d := range first {
		if got, _ := d.pc.firstBytes(); containsRetry(got) {
			t.Errorf("handshake %d of the first %d: got a Retry", i, h3.RetryAbove)
		}
	}
	for i, d := range past {
		rec, _ := spc.peer(d.pc.LocalAddr().String())
		got, _ := d.pc.firstBytes()
		if len(got) == 0 {
			t.Errorf("handshake %d past the first %d: the client received nothing", i, h3.RetryAbove)
			continue
		}
		if !isRetry(rec.wroteFirst) || !isRetry(got[0]) {
			t.Errorf("handshake %d past the first %d: first packet 0x%02x (sent 0x%02x), want a Retry (0xF_)", i, h3.RetryAbove, got[0], rec.wroteFirst)
		}
	}

	// A connection that went through Retry serves requests.
	c := &client{t: t, qc: past[0].qc}
	c.openControl()
	if res := c.get("/"); res.status != http.StatusOK {
		t.Fatalf("GET on a connection after Retry: %d", res.status)
	}
	return ts
}

func containsRetry(b []byte) bool {
	for _, x := range b {
		if isRetry(x) {
			return true
		}
	}
	return false
}

// TestAntiAmplification: before the client's address is validated, the
// server sends at most three times what it received from it (RFC 9000
// section 8.1), even with a certificate chain far larger than that.
func TestAntiAmplification(t *testing.T) {
	t.Parallel()
	cert := newCert(t, 400) // a server flight several times 3 x 1200 bytes
	ts := serveOn(t, &h3.Server{Handler: okHandler}, listenUDP(t, "127.0.0.1:0"), cert)
	pc := newUDPConn(t, 1) // only the first datagram (the Initial) leaves
	tc := cert.clientConfig()
	tc.CurvePreferences = []tls.CurveID{tls.X25519} // the whole ClientHello in that datagram
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := dialVia(ctx, t, pc, ts.udpAddr(t), tc, &quic.Config{HandshakeIdleTimeout: 2 * time.Second})
	if err == nil {
		t.Fatal("handshake completed with the client's packets dropped")
	}
	sent, got := pc.wroteBytes.Load(), pc.readBytes.Load()
	t.Logf("client: %d bytes reached the server; server: %d bytes sent back (certificate %d bytes)", sent, got, len(cert.der))
	if sent == 0 || got == 0 {
		t.Fatalf("sent %d, received %d: the server never answered", sent, got)
	}
	if int64(len(cert.der)) <= 3*sent {
		t.Fatalf("certificate of %d bytes: not larger than 3 x %d, the limit is not tested", len(cert.der), sent)
	}
	if got > 3*sent {
		t.Errorf("server sent %d bytes to an unvalidated address that sent %d: over 3x", got, sent)
	}
}

// TestStreamResetFlood: a client that opens request streams and resets
// them (HTTP/3's Rapid Reset, CVE-2023-44487) loses its connection
// (H3_EXCESSIVE_LOAD) past MaxGlitches; the server serves new connections.
func TestStreamResetFlood(t *testing.T) {
	t.Parallel()
	t.Run("reset at once", func(t *testing.T) {
		t.Parallel()
		resetFlood(t, 1, 5000)
	})
	// The attack as it hurts: each stream reset once its handler runs (the
	// upstream request begun), a round trip after its HEADERS.
	t.Run("reset once the handler runs", func(t *testing.T) {
		t.Parallel()
		resetFlood(t, 50, 3*h3.MaxGlitches)
	})
}

// resetFlood opens streams batch at a time, each with a GET, and resets
// them: at once (batch 1), or once the batch's handlers all run.
func resetFlood(t *testing.T, batch, most int) {
	var entered atomic.Int64
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	srv := &h3.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered.Add(1)
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})}
	ts := startServer(t, srv)
	t.Cleanup(free)
	c := ts.dial(t, nil)
	get := headersFrame(getFields("/"))
	// The flood's bound: a passing run ends it early, when the server
	// closes the connection.
	deadline := time.Now().Add(3 * failAfter)
	n := 0
	var stalled error // OpenStreamSync's failure: no stream credit came back
	streams := make([]*quic.Stream, 0, batch)
flood:
	for n < most && time.Now().Before(deadline) && c.qc.Context().Err() == nil {
		streams = streams[:0]
		want := entered.Load() + int64(batch)
		for range batch {
			// The server retires a reset stream at once: its credit comes
			// back within a round trip; failAfter is the failure bound.
			ctx, cancel := context.WithTimeout(context.Background(), failAfter)
			s, err := c.qc.OpenStreamSync(ctx)
			cancel()
			if err != nil {
				if c.qc.Context().Err() == nil {
					stalled = err
				}
				break flood
			}
			s.Write(get)
			streams = append(streams, s)
		}
		if batch > 1 {
			for entered.Load() < want && c.qc.Context().Err() == nil && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond) // a poll interval, bounded by the deadline
			}
		}
		for _, s := range streams {
			s.CancelWrite(codeRequestCancelled)
			s.CancelRead(codeRequestCancelled)
			n++
		}
	}
	g, closed := srv.Glitches()
	select {
	case <-c.qc.Context().Done():
	case <-time.After(failAfter):
		if stalled != nil {
			t.Fatalf("%d streams reset (handlers run: %d), then no stream credit for %v (%v): the server does not retire the reset streams; connection still open %v later: Glitches() = %d, %d",
				n, entered.Load(), failAfter, stalled, failAfter, g, closed)
		}
		t.Fatalf("%d streams reset (handlers run: %d), connection still open %v later: Glitches() = %d, %d",
			n, entered.Load(), failAfter, g, closed)
	}
	expectAppClose(t, context.Cause(c.qc.Context()), codeExcessiveLoad)
	g, closed = srv.Glitches()
	if closed == 0 {
		t.Errorf("Glitches() = %d, %d: the close is not counted", g, closed)
	}
	t.Logf("closed after %d streams reset (handlers run: %d); Glitches() = %d, %d", n, entered.Load(), g, closed)
	free()
	if res := ts.dial(t, nil).get("/"); res.status != http.StatusOK {
		t.Fatalf("GET on a new connection: %d", res.status)
	}
}

// TestHeaderBombs: a HEADERS frame over MaxHeaderFrame, a header list over
// MaxHeaderListSize, a reference to a dynamic table queue has not, and
// an endless run of unknown frames before HEADERS.
func TestHeaderBombs(t *testing.T) {
	t.Parallel()
	ts := startServer(t, &h3.Server{Handler: okHandler})

	t.Run("HEADERS frame too large", func(t *testing.T) {
		t.Parallel()
		c := ts.dial(t, nil)
		s := c.open()
		b := quicvarint.Append(nil, 0x01)
		b = quicvarint.Append(b, h3.MaxHeaderFrame+1)
		s.Write(append(b, make([]byte, 1000)...))
		expectReset(t, s, codeExcessiveLoad)
		if res := c.get("/"); res.status != http.StatusOK {
			t.Fatalf("GET after the reset: %d, want 200 on the same connection", res.status)
		}
	})

	t.Run("header list too large", func(t *testing.T) {
		t.Parallel()
		c := ts.dial(t, nil)
		many := getFields("/many")
		for i := range 1000 { // 1000 x (11 + 40 + 32) decoded bytes
			many.literal(fmt.Sprintf("x-bomb-%04d", i), strings.Repeat("v", 40))
		}
		huge := getFields("/huge").literal("x-huge", strings.Repeat("h", h3.MaxHeaderListSize))
		static := getFields("/static")
		for range 2100 { // a byte each: "accept-encoding: gzip, deflate, br", 64 bytes as RFC 9114 counts
			static.indexed(31)
		}
		for name, f := range map[string]*fields{"1000 literals": many, "one huge value": huge, "2100 static fields": static} {
			if len(f.b) > h3.MaxHeaderFrame {
				t.Fatalf("%s: section of %d bytes, over MaxHeaderFrame", name, len(f.b))
			}
			res, err := c.request(headersFrame(f))
			if err != nil {
				t.Fatalf("%s (%d bytes encoded): %v", name, len(f.b), err)
			}
			if res.status != http.StatusRequestHeaderFieldsTooLarge {
				t.Errorf("%s (%d bytes encoded): status %d, want 431", name, len(f.b), res.status)
			}
		}
		if res := c.get("/"); res.status != http.StatusOK {
			t.Fatalf("GET after the 431s: %d, want 200 on the same connection", res.status)
		}
	})

	t.Run("dynamic table reference", func(t *testing.T) {
		t.Parallel()
		sections := map[string][]byte{
			"Required Insert Count 2": append([]byte{0x02, 0x00}, getFields("/").b[2:]...),
			"indexed dynamic field":   append(getFields("/").b, 0x80),
			"dynamic name reference":  append(getFields("/").b, 0x40, 0x01, 'x'),
			"post-base index":         append(getFields("/").b, 0x10),
		}
		for name, sec := range sections {
			c := ts.dial(t, nil)
			s := c.open()
			s.Write(appendFrame(nil, 0x01, sec))
			s.Close()
			err := connClosed(t, c.qc)
			var ae *quic.ApplicationError
			if !errors.As(err, &ae) || !ae.Remote || ae.ErrorCode != codeDecompression {
				t.Errorf("%s: connection ended with %v, want the server's close with 0x200 (QPACK_DECOMPRESSION_FAILED)", name, err)
			}
		}
	})

	t.Run("unknown frames before HEADERS", func(t *testing.T) {
		t.Parallel()
		c := ts.dial(t, nil)
		grease := func(i int, n int) []byte { return appendFrame(nil, 0x21+0x1f*uint64(i), make([]byte, n)) }

		// A few, as a greasing client sends: skipped.
		var b []byte
		for i := range 3 {
			b = append(b, grease(i, 100)...)
		}
		res, err := c.request(append(b, headersFrame(getFields("/"))...))
		if err != nil || res.status != http.StatusOK {
			t.Fatalf("GET after 3 unknown frames: %v, %v; want 200", res, err)
		}

		// More than MaxHeaderFrame bytes of them: the stream is reset.
		b = b[:0]
		for i := 0; len(b) <= h3.MaxHeaderFrame+8<<10; i++ {
			b = append(b, grease(i, 4000)...)
		}
		s := c.open()
		s.SetWriteDeadline(time.Now().Add(failAfter))
		s.Write(append(b, headersFrame(getFields("/"))...)) // fails once the server stops reading
		expectReset(t, s, codeExcessiveLoad)

		// One that declares more.
		s = c.open()
		b = quicvarint.Append(nil, 0x21)
		b = quicvarint.Append(b, 1<<40)
		s.Write(append(b, make([]byte, 100)...))
		expectReset(t, s, codeExcessiveLoad)

		if res := c.get("/"); res.status != http.StatusOK {
			t.Fatalf("GET after the resets: %d, want 200 on the same connection", res.status)
		}
	})
}

// TestClientStopsReading: a response write that waits longer than
// WriteTimeout on a client that stopped reading fails, and the stream is
// reset (H3_REQUEST_CANCELLED).
func TestClientStopsReading(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond

	t.Run("client stops reading", func(t *testing.T) {
		t.Parallel()
		type result struct {
			err     error
			written int
			waited  time.Duration
		}
		done := make(chan result, 1)
		srv := &h3.Server{WriteTimeout: timeout, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			buf := make([]byte, 32<<10)
			var res result
			for range (64 << 20) / len(buf) {
				start := time.Now()
				if _, res.err = w.Write(buf); res.err != nil {
					res.waited = time.Since(start)
					break
				}
				res.written += len(buf)
			}
			done <- res
		})}
		ts := startServer(t, srv)
		c := ts.dial(t, nil)
		s := c.open()
		s.Write(headersFrame(getFields("/large")))
		s.Close()
		var res result
		select {
		case res = <-done:
		case <-time.After(failAfter):
			t.Fatalf("the handler's Write still blocked after %v", failAfter)
		}
		t.Logf("handler wrote %d bytes, then %v after %v", res.written, res.err, res.waited)
		if res.err == nil {
			t.Fatalf("the handler wrote 64 MiB to a client that reads nothing")
		}
		if !errors.Is(res.err, os.ErrDeadlineExceeded) {
			t.Errorf("Write failed with %v, want os.ErrDeadlineExceeded", res.err)
		}
		expectReset(t, s, codeRequestCancelled)
	})

	// A client that reads all it is sent, of a handler that pauses longer
	// than WriteTimeout between writes (a stream of events), keeps its
	// stream: no write waited.
	t.Run("client reads, handler pauses", func(t *testing.T) {
		t.Parallel()
		next := make(chan struct{})
		done := make(chan error, 1)
		srv := &h3.Server{WriteTimeout: timeout, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			buf := make([]byte, 32<<10)
			if _, err := w.Write(buf); err != nil {
				done <- fmt.Errorf("first write: %w", err)
				return
			}
			select {
			case <-next:
			case <-r.Context().Done():
				done <- r.Context().Err()
				return
			}
			_, err := w.Write(buf)
			done <- err
		})}
		ts := startServer(t, srv)
		c := ts.dial(t, nil)
		s := c.open()
		s.Write(headersFrame(getFields("/events")))
		s.Close()
		rr := newResponseReader(s)
		if err := rr.read(32 << 10); err != nil {
			t.Fatalf("reading the first 32 KiB: %v", err)
		}
		<-time.After(2 * timeout) // the handler's pause: the scenario, not a synchronisation
		close(next)
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("second write, %v after the first, with the client's window open: %v", 2*timeout, err)
			}
		case <-time.After(failAfter):
			t.Fatalf("the handler's second Write still blocked after %v", failAfter)
		}
		if err := rr.read(-1); err != nil || rr.res.status != http.StatusOK || len(rr.res.body) != 64<<10 {
			t.Fatalf("response: %d, %d bytes, %v; want 200 and 64 KiB", rr.res.status, len(rr.res.body), err)
		}
	})
}

// TestFlowControlBounds: what a client sends that the handler does not
// read is bounded by StreamWindow per stream and ConnWindow per
// connection.
func TestFlowControlBounds(t *testing.T) {
	t.Parallel()
	const margin = 16 << 10 // what quic-go takes in before it blocks: a packet's worth, and the frame headers
	// A write that takes longer than blocked is taken to be stopped by
	// flow control: a write with window left takes a millisecond or so,
	// and this leaves room for a machine many times slower.
	const blocked = time.Second
	var entered atomic.Int64
	release := make(chan struct{})
	ts := startServer(t, &h3.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered.Add(1)
		select { // never reads the body
		case <-release:
		case <-r.Context().Done():
		}
	})})
	t.Cleanup(func() { close(release) })
	c := ts.dial(t, nil)

	// HEADERS of a POST, and a DATA frame that says 64 MiB follow.
	head := headersFrame(requestFields(20, "/upload"))
	head = quicvarint.Append(head, 0x00)
	head = quicvarint.Append(head, 64<<20)
	fill := func(s *quic.Stream) (n int64, err error) {
		s.SetWriteDeadline(time.Now().Add(failAfter))
		k, err := s.Write(head)
		n += int64(k)
		if err != nil {
			return n, err
		}
		chunk := make([]byte, 16<<10)
		for range (8 << 20) / len(chunk) {
			s.SetWriteDeadline(time.Now().Add(blocked))
			k, err := s.Write(chunk)
			n += int64(k)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return n, nil // blocked: the server's window is used up
			}
			if err != nil {
				return n, err
			}
		}
		return n, errors.New("8 MiB sent without blocking")
	}

	// One stream alone: its window stops it.
	n1, err := fill(c.open())
	if err != nil {
		t.Fatalf("stream 1: %d bytes, %v", n1, err)
	}
	waitFor(t, "the handler", func() bool { return entered.Load() == 1 })
	if n1 > h3.StreamWindow+margin || n1 < h3.StreamWindow-margin {
		t.Errorf("stream 1 alone: %d bytes taken before blocking, want StreamWindow (%d) within %d", n1, h3.StreamWindow, margin)
	}

	// Seven more at once: the connection's window stops them.
	const more = 7
	ns := make([]int64, more)
	errs := make([]error, more)
	var wg sync.WaitGroup
	for i := range more {
		s := c.open()
		wg.Go(func() { ns[i], errs[i] = fill(s) })
	}
	filled := make(chan struct{})
	go func() { wg.Wait(); close(filled) }()
	select {
	case <-filled:
	case <-time.After(3 * failAfter):
		t.Fatalf("the %d streams did not block within %v", more, 3*failAfter)
	}
	total := n1
	for i, n := range ns {
		if errs[i] != nil {
			t.Fatalf("stream %d: %d bytes, %v", i+2, n, errs[i])
		}
		if n > h3.StreamWindow+margin {
			t.Errorf("stream %d: %d bytes, over StreamWindow (%d)", i+2, n, h3.StreamWindow)
		}
		total += n
	}
	t.Logf("stream 1 alone: %d bytes; with %d more: %d bytes in all %v", n1, more, total, ns)
	if total > h3.ConnWindow+(more+1)*margin {
		t.Errorf("%d bytes taken on one connection, over ConnWindow (%d)", total, h3.ConnWindow)
	}
	if total < h3.ConnWindow-(more+1)*margin {
		t.Errorf("%d bytes taken on one connection: the streams blocked before ConnWindow (%d)", total, h3.ConnWindow)
	}
}

// TestStatelessReset: a client of a server that vanished (its socket
// closed, no CONNECTION_CLOSE) learns it from the server that took its
// place with the same certificate key, by a stateless reset, at once; a
// server with another key cannot end another's connections.
func TestStatelessReset(t *testing.T) {
	t.Parallel()
	restart := func(t *testing.T, sameKey bool, idle time.Duration) (time.Duration, error) {
		cert := newCert(t, 0)
		pcA := &udpConn{PacketConn: listenUDP(t, "127.0.0.1:0"), got: make(chan struct{})}
		a := serveOn(t, &h3.Server{Handler: okHandler}, pcA, cert)
		c := a.dial(t, &quic.Config{MaxIdleTimeout: idle})
		if res := c.get("/"); res.status != http.StatusOK {
			t.Fatalf("GET from server A: %d", res.status)
		}
		pcA.cut()
		select {
		case <-a.served:
		case <-time.After(failAfter):
			t.Fatal("server A's Serve did not return once its socket was gone")
		}
		certB := cert
		if !sameKey {
			certB = newCert(t, 0)
		}
		serveOn(t, &h3.Server{Handler: okHandler}, listenUDP(t, a.addr), certB)
		start := time.Now()
		s := c.open()
		s.Write(headersFrame(getFields("/again")))
		s.Close()
		err := connClosed(t, c.qc)
		return time.Since(start), err
	}

	t.Run("same key", func(t *testing.T) {
		t.Parallel()
		took, err := restart(t, true, 30*time.Second)
		var sr *quic.StatelessResetError
		if !errors.As(err, &sr) {
			t.Fatalf("connection ended with %v after %v, want a stateless reset", err, took)
		}
		if took > 5*time.Second {
			t.Errorf("stateless reset after %v", took)
		}
		t.Logf("stateless reset after %v", took)
	})

	t.Run("other key", func(t *testing.T) {
		t.Parallel()
		took, err := restart(t, false, 2*time.Second)
		var sr *quic.StatelessResetError
		if errors.As(err, &sr) {
			t.Fatalf("a server with another key reset the connection (after %v)", took)
		}
		var it *quic.IdleTimeoutError
		if !errors.As(err, &it) {
			t.Errorf("connection ended with %v after %v, want the client's idle timeout", err, took)
		}
	})
}

// sessionCache passes the session tickets the client gets on.
type sessionCache struct {
	tls.ClientSessionCache
	put chan *tls.ClientSessionState
}

func (c *sessionCache) Put(key string, cs *tls.ClientSessionState) {
	c.ClientSessionCache.Put(key, cs)
	if cs != nil {
		select {
		case c.put <- cs:
		default:
		}
	}
}

// Test0RTTOff: a client that resumes a session cannot send 0-RTT data:
// the server's tickets do not allow early data.
func Test0RTTOff(t *testing.T) {
	t.Parallel()
	ts := startServer(t, &h3.Server{Handler: okHandler})
	cache := &sessionCache{ClientSessionCache: tls.NewLRUClientSessionCache(8), put: make(chan *tls.ClientSessionState, 8)}
	tc := ts.cert.clientConfig()
	tc.ClientSessionCache = cache
	conf := &quic.Config{Allow0RTT: true}
	dial := func() *client {
		ctx, cancel := context.WithTimeout(context.Background(), failAfter)
		defer cancel()
		qc, err := quic.DialAddrEarly(ctx, ts.addr, tc, conf)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		t.Cleanup(func() { qc.CloseWithError(0, "") })
		select {
		case <-qc.HandshakeComplete():
		case <-time.After(failAfter):
			t.Fatal("handshake not complete")
		}
		c := &client{t: t, qc: qc}
		c.openControl()
		return c
	}

	c1 := dial()
	if res := c1.get("/"); res.status != http.StatusOK {
		t.Fatalf("GET: %d", res.status)
	}
	select {
	case cs := <-cache.put:
		if _, st, err := cs.ResumptionState(); err != nil {
			t.Fatalf("session ticket: %v", err)
		} else if st.EarlyData {
			t.Errorf("the server's session ticket allows early data")
		}
	case <-time.After(failAfter):
		t.Fatal("no session ticket")
	}
	c1.qc.CloseWithError(0, "")

	c2 := dial()
	cs := c2.qc.ConnectionState()
	if !cs.TLS.DidResume {
		t.Fatal("second connection did not resume the session: 0-RTT is not tested")
	}
	if cs.Used0RTT {
		t.Error("second connection used 0-RTT")
	}
	if res := c2.get("/"); res.status != http.StatusOK {
		t.Fatalf("GET on the resumed connection: %d", res.status)
	}
}

// TestStreamLimit: a client has at most MaxConcurrentStreams request
// streams open at once; their credit comes back when they are done.
func TestStreamLimit(t *testing.T) {
	t.Parallel()
	var entered atomic.Int64
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	ts := startServer(t, &h3.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
		w.Write([]byte("ok"))
	})})
	t.Cleanup(free)
	c := ts.dial(t, nil)
	get := headersFrame(getFields("/"))
	streams := make([]*quic.Stream, 0, h3.MaxConcurrentStreams)
	for i := range h3.MaxConcurrentStreams {
		s, err := c.qc.OpenStream()
		if err != nil {
			t.Fatalf("stream %d of %d: %v", i+1, h3.MaxConcurrentStreams, err)
		}
		s.Write(get)
		s.Close()
		streams = append(streams, s)
	}
	waitFor(t, fmt.Sprintf("%d handlers", h3.MaxConcurrentStreams), func() bool { return entered.Load() == h3.MaxConcurrentStreams })

	_, err := c.qc.OpenStream()
	var limit *quic.StreamLimitReachedError
	if !errors.As(err, &limit) {
		t.Fatalf("stream %d: %v, want StreamLimitReachedError", h3.MaxConcurrentStreams+1, err)
	}
	// No credit comes while they are held: the wait is the assertion.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err = c.qc.OpenStreamSync(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("stream %d with all %d held: %v, want no credit", h3.MaxConcurrentStreams+1, h3.MaxConcurrentStreams, err)
	}

	free()
	for i, s := range streams {
		if res, err := readResponse(s); err != nil || res.status != http.StatusOK {
			t.Fatalf("stream %d: %v %v", i+1, res, err)
		}
	}
	if res := c.get("/after"); res.status != http.StatusOK {
		t.Fatalf("GET once the streams were done: %d", res.status)
	}
}
