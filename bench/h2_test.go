package bench

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/queue-dev/queue/proxy"
	"golang.org/x/net/http2/hpack"
)

// BenchmarkProxyRawH2 is BenchmarkProxyRaw for an h2c client: a raw HTTP/2
// client (prior knowledge, RFC 9113 section 3.3) -> queue -> the raw
// HTTP/1.1 upstream. The client allocates nothing per request: its request
// HEADERS frames are built once and only their stream ids are patched, and
// it reads frames with a minimal reader into one reused buffer. So B/op and
// allocs/op are queue's own (the raw upstream allocates nothing either). The
// allocs/op of h2c-h1/1KiB/serial is the figure for "allocations per proxied
// h2c->h1 request".
//
//	h2c-h1/1KiB/serial  one stream at a time: HEADERS out, the response's
//	                    HEADERS and DATA in
//	h2c-h1/1KiB/m32     32 streams in flight: 32 HEADERS frames in one
//	                    write, then every frame until all 32 have ended; an
//	                    op is still one request (b.N/32 batches, and the
//	                    remainder in a last smaller one)
//
// Each response is checked: its header block must start with :status 200
// (the HPACK static entry 8, 0x88, which is how every HPACK encoder writes
// it; the rest of the block is not decoded, so that the client does not
// allocate), and its DATA must add up to 1024 bytes before END_STREAM.
func BenchmarkProxyRawH2(b *testing.B) {
	up := newRawUpstream(b, h2BodyLen)
	q := newQueue(b, up, proxy.HTTP1)
	b.Run("h2c-h1/1KiB/serial", func(b *testing.B) {
		benchRawH2(b, q, 1)
	})
	b.Run("h2c-h1/1KiB/m32", func(b *testing.B) {
		benchRawH2(b, q, h2Batch)
	})
}

// benchRawH2 is one h2c connection (prior knowledge) to queue at q with k
// GET /1k streams in flight at a time: k HEADERS frames in one write, then
// every frame until all k have ended; an op is one request (b.N/k batches,
// the remainder in a last smaller one). The connection is dialled again,
// off the clock, before its stream ids run out. 100 requests warm the
// pools and the upstream connections first.
func benchRawH2(b *testing.B, q string, k int) {
	c := dialRawH2(b, q)
	for n := 100; n > 0; n -= k {
		c.do(b, min(n, k))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for n := b.N; n > 0; n -= k {
		m := min(n, k)
		if c.exhausted(m) {
			b.StopTimer()
			c.redial(b)
			b.StartTimer()
		}
		c.do(b, m)
	}
}

// BenchmarkH2IdleConn measures what an idle HTTP/2 connection costs queue:
// 500 h2c connections (prior knowledge), each having exchanged SETTINGS
// both ways and served one GET /1k to completion, then left idle. It
// reports
//
//	B/conn           (HeapInuse+StackInuse after - before) / 500
//	goroutines/conn  (runtime.NumGoroutine() after - before) / 500
//
// each read after two runtime.GC() calls (the second frees what sync.Pools
// kept as victims), net of a baseline measured the same way with 500 plain
// TCP connections to a server that only accepts and holds them (no
// goroutine, no buffer per connection). queue runs in this process, so the
// raw figures include the client's side of each connection and the
// accepted socket's own net.Conn; the baseline holds exactly those two (a
// dialled and an accepted *net.TCPConn per connection, the client keeping
// nothing else: one reader and buffer are reused across all its
// connections), so the figures are what queue keeps per idle connection
// beyond a bare accepted socket. Kernel socket buffers and the runtime's
// poll descriptors (allocated off the Go heap) are in neither.
//
// The measurement runs once per invocation, before an empty b.Loop (whose
// ns/op is suppressed); the gross figures and the baseline are logged.
func BenchmarkH2IdleConn(b *testing.B) {
	const n = 500
	up := newRawUpstream(b, h2BodyLen)
	q := newQueue(b, up, proxy.HTTP1)
	hold := newHoldServer(b, n+1)
	rc := newRawH2Conn()

	// One connection to each, kept open to the end: one-time state (the
	// upstream connection, the HTTP/2 server's pools, the accept loops) is
	// in both readings, and no connection is being torn down while
	// measuring.
	warm := make([]net.Conn, 0, 2)
	b.Cleanup(func() {
		for _, c := range warm {
			c.Close()
		}
	})
	dialHold := func() (net.Conn, error) {
		c, err := net.DialTimeout("tcp", hold.addr, h2Timeout)
		if err != nil {
			return nil, err
		}
		if err := hold.wait(); err != nil {
			c.Close()
			return nil, err
		}
		// As dialQueue does, so that both leave the same state behind.
		c.SetDeadline(time.Now().Add(h2Timeout))
		c.SetDeadline(time.Time{})
		return c, nil
	}
	dialQueue := func() (net.Conn, error) {
		c, err := net.DialTimeout("tcp", q, h2Timeout)
		if err != nil {
			return nil, err
		}
		if err := rc.start(c); err != nil {
			c.Close()
			return nil, err
		}
		c.SetDeadline(time.Time{})
		rc.detach()
		return c, nil
	}
	for _, dial := range []func() (net.Conn, error){dialHold, dialQueue} {
		c, err := dial()
		if err != nil {
			b.Fatal(err)
		}
		warm = append(warm, c)
	}

	base, err := measureIdle(n, dialHold)
	hold.closeAll() // and measureIdle closed the client's side
	if err != nil {
		b.Fatal(err)
	}
	got, err := measureIdle(n, dialQueue)
	if err != nil {
		b.Fatal(err)
	}

	for b.Loop() {
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(got.heap-base.heap)/n, "B/conn")
	b.ReportMetric(float64(got.goroutines-base.goroutines)/n, "goroutines/conn")
	b.Logf("%d connections: queue %d B, %d goroutines; baseline (bare TCP, both ends) %d B, %d goroutines",
		n, got.heap, got.goroutines, base.heap, base.goroutines)
}

// idleCost is the growth of the process while n connections are open.
type idleCost struct {
	heap       int64 // HeapInuse + StackInuse, bytes
	goroutines int
}

// measureIdle opens n connections with dial, one after another, and returns
// what the process grew by while they are open; it closes them before
// returning.
func measureIdle(n int, dial func() (net.Conn, error)) (idleCost, error) {
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	before := idleSnapshot()
	for range n {
		c, err := dial()
		if err != nil {
			return idleCost{}, err
		}
		conns = append(conns, c)
	}
	after := idleSnapshot()
	runtime.KeepAlive(conns)
	return idleCost{after.heap - before.heap, after.goroutines - before.goroutines}, nil
}

func idleSnapshot() idleCost {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return idleCost{int64(m.HeapInuse + m.StackInuse), runtime.NumGoroutine()}
}

// holdServer accepts connections and holds them, with nothing per
// connection but the net.Conn in a slice sized in advance.
type holdServer struct {
	addr     string
	ln       net.Listener
	accepted chan net.Conn
	held     []net.Conn
	timer    *time.Timer
}

func newHoldServer(b *testing.B, max int) *holdServer {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	h := &holdServer{
		addr:     ln.Addr().String(),
		ln:       ln,
		accepted: make(chan net.Conn, max),
		held:     make([]net.Conn, 0, max),
		timer:    time.NewTimer(h2Timeout),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			select {
			case h.accepted <- c:
			default:
				c.Close() // more than max: not held
			}
		}
	}()
	b.Cleanup(func() {
		ln.Close()
		<-done
		h.closeAll()
		for {
			select {
			case c := <-h.accepted:
				c.Close()
			default:
				return
			}
		}
	})
	return h
}

// wait holds the next accepted connection, waiting at most h2Timeout.
func (h *holdServer) wait() error {
	h.timer.Reset(h2Timeout)
	select {
	case c := <-h.accepted:
		h.timer.Stop()
		h.held = append(h.held, c)
		return nil
	case <-h.timer.C:
		return errors.New("hold server: no connection accepted in time")
	}
}

// closeAll closes the held connections (not the warm-up one, held first).
func (h *holdServer) closeAll() {
	for len(h.held) > 1 {
		h.held[len(h.held)-1].Close()
		h.held[len(h.held)-1] = nil
		h.held = h.held[:len(h.held)-1]
	}
}

// The raw HTTP/2 client.

const (
	h2ClientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

	h2FrameData         = 0x0
	h2FrameHeaders      = 0x1
	h2FrameRSTStream    = 0x3
	h2FrameSettings     = 0x4
	h2FramePushPromise  = 0x5
	h2FramePing         = 0x6
	h2FrameGoAway       = 0x7
	h2FrameWindowUpdate = 0x8
	h2FrameContinuation = 0x9

	h2FlagEndStream  = 0x1
	h2FlagAck        = 0x1
	h2FlagEndHeaders = 0x4
	h2FlagPadded     = 0x8
	h2FlagPriority   = 0x20

	h2SettingEnablePush        = 0x2
	h2SettingInitialWindowSize = 0x4

	h2MaxWindow = 1<<31 - 1
	// h2MaxFrame is the largest frame the server may send: the client
	// announces no SETTINGS_MAX_FRAME_SIZE, so the protocol's default.
	h2MaxFrame = 16 << 10
	// h2WindowUpdateAt is how much DATA the client consumes before it gives
	// it back to the connection window in one WINDOW_UPDATE. The window
	// starts at 2^31-1, so it never falls under 2^30.
	h2WindowUpdateAt = 1 << 30
	// h2MaxStreamID: the client opens a new connection before its stream
	// ids pass it (they end at 2^31-1).
	h2MaxStreamID = 1 << 30
	h2Batch       = 32
	h2Timeout     = 10 * time.Second
	h2BodyLen     = 1 << 10
)

// h2RequestBlocks returns the HPACK header block of the benchmark's GET
// /1k, as one encoder with default indexing writes it for the first request
// on a connection (literals that enter the dynamic table) and for every
// later one (references to the table only).
func h2RequestBlocks() (first, later []byte, err error) {
	fields := []hpack.HeaderField{
		{Name: ":method", Value: "GET"},
		{Name: ":scheme", Value: "http"},
		{Name: ":authority", Value: "bench"},
		{Name: ":path", Value: "/1k"},
		{Name: "user-agent", Value: "raw"},
		{Name: "accept", Value: "*/*"},
	}
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	encode := func() ([]byte, error) {
		buf.Reset()
		for _, f := range fields {
			if err := enc.WriteField(f); err != nil {
				return nil, err
			}
		}
		return bytes.Clone(buf.Bytes()), nil
	}
	if first, err = encode(); err != nil {
		return nil, nil, err
	}
	if later, err = encode(); err != nil {
		return nil, nil, err
	}
	// Each field an indexed reference of one byte (RFC 7541 section 6.1).
	if len(later) != len(fields) {
		return nil, nil, fmt.Errorf("second header block % x is not %d indexed fields", later, len(fields))
	}
	for _, c := range later {
		if c&0x80 == 0 {
			return nil, nil, fmt.Errorf("second header block % x is not %d indexed fields", later, len(fields))
		}
	}
	return first, later, nil
}

func appendH2FrameHeader(dst []byte, length int, typ, flags byte, stream uint32) []byte {
	return append(dst, byte(length>>16), byte(length>>8), byte(length), typ, flags,
		byte(stream>>24), byte(stream>>16), byte(stream>>8), byte(stream))
}

// rawH2Conn is one client connection. Every buffer it writes from or reads
// into is allocated by newRawH2Conn; a request only patches stream ids.
type rawH2Conn struct {
	c   net.Conn
	br  *bufio.Reader
	hdr [9]byte
	buf []byte // payload of the last frame read

	handshake []byte // preface, SETTINGS, connection WINDOW_UPDATE
	first     []byte // HEADERS frame of the connection's first request
	reqs      []byte // h2Batch HEADERS frames of later requests
	reqLen    int    // length of one frame in reqs
	ack       []byte // SETTINGS ACK
	pong      []byte // PING ACK, payload copied in
	wu        []byte // connection WINDOW_UPDATE, increment patched in

	addr string // for redial

	nextID    uint32
	unacked   int       // DATA bytes consumed since the last WINDOW_UPDATE
	refreshAt time.Time // when the deadline is next pushed back
	settings  bool      // the server's SETTINGS arrived (and were acked)
	settled   bool      // the server acked the client's SETTINGS

	// Per stream of the exchange in progress.
	state [h2Batch]uint8 // streamOpen, streamHeaders, streamEnded
	body  [h2Batch]int
}

const (
	streamOpen = iota
	streamHeaders
	streamEnded
)

func newRawH2Conn() *rawH2Conn {
	first, later, err := h2RequestBlocks()
	if err != nil {
		panic(err)
	}
	c := &rawH2Conn{br: bufio.NewReaderSize(nil, 64<<10), buf: make([]byte, h2MaxFrame)}

	c.handshake = append(c.handshake, h2ClientPreface...)
	c.handshake = appendH2FrameHeader(c.handshake, 12, h2FrameSettings, 0, 0)
	c.handshake = binary.BigEndian.AppendUint16(c.handshake, h2SettingEnablePush)
	c.handshake = binary.BigEndian.AppendUint32(c.handshake, 0)
	c.handshake = binary.BigEndian.AppendUint16(c.handshake, h2SettingInitialWindowSize)
	c.handshake = binary.BigEndian.AppendUint32(c.handshake, h2MaxWindow)
	c.handshake = appendH2FrameHeader(c.handshake, 4, h2FrameWindowUpdate, 0, 0)
	c.handshake = binary.BigEndian.AppendUint32(c.handshake, h2MaxWindow-65535)

	c.first = appendH2FrameHeader(nil, len(first), h2FrameHeaders, h2FlagEndStream|h2FlagEndHeaders, 0)
	c.first = append(c.first, first...)
	c.reqLen = 9 + len(later)
	for range h2Batch {
		c.reqs = appendH2FrameHeader(c.reqs, len(later), h2FrameHeaders, h2FlagEndStream|h2FlagEndHeaders, 0)
		c.reqs = append(c.reqs, later...)
	}
	c.ack = appendH2FrameHeader(nil, 0, h2FrameSettings, h2FlagAck, 0)
	c.pong = appendH2FrameHeader(make([]byte, 0, 17), 8, h2FramePing, h2FlagAck, 0)[:17]
	c.wu = appendH2FrameHeader(make([]byte, 0, 13), 4, h2FrameWindowUpdate, 0, 0)[:13]
	return c
}

// dialRawH2 connects to addr and completes a first request (the one that
// fills the server's HPACK table); the connection closes at cleanup.
func dialRawH2(b *testing.B, addr string) *rawH2Conn {
	b.Helper()
	c := newRawH2Conn()
	c.addr = addr
	b.Cleanup(func() {
		if c.c != nil {
			c.c.Close()
		}
	})
	c.redial(b)
	return c
}

// redial replaces the connection with a new one to the same address.
func (c *rawH2Conn) redial(b *testing.B) {
	b.Helper()
	if c.c != nil {
		c.c.Close()
		c.c = nil
	}
	conn, err := net.DialTimeout("tcp", c.addr, h2Timeout)
	if err != nil {
		b.Fatal(err)
	}
	c.c = conn // closed at cleanup from here on
	if err := c.start(conn); err != nil {
		b.Fatal(err)
	}
}

// exhausted reports whether k more streams would take the stream ids past
// h2MaxStreamID.
func (c *rawH2Conn) exhausted(k int) bool {
	return c.nextID+2*uint32(k) > h2MaxStreamID
}

// do runs k requests at once (k <= h2Batch) to completion.
func (c *rawH2Conn) do(b *testing.B, k int) {
	if err := c.exchange(c.reqs, c.reqLen, k); err != nil {
		b.Fatal(err)
	}
}

// start takes conn over: the preface and SETTINGS out, the first request
// (its header block enters the server's HPACK table) to completion, and
// SETTINGS exchanged both ways.
func (c *rawH2Conn) start(conn net.Conn) error {
	c.c = conn
	c.br.Reset(conn)
	c.nextID = 1
	c.unacked = 0
	c.refreshAt = time.Time{}
	c.settings, c.settled = false, false
	if err := c.refreshDeadline(); err != nil {
		return err
	}
	if _, err := conn.Write(c.handshake); err != nil {
		return err
	}
	if err := c.exchange(c.first, len(c.first), 1); err != nil {
		return err
	}
	for !c.settings || !c.settled {
		typ, flags, stream, p, err := c.readFrame()
		if err != nil {
			return err
		}
		if err := c.control(typ, flags, stream, p); err != nil {
			return err
		}
	}
	return nil
}

// detach forgets the connection (its state stays with the caller), so that
// the reader and buffers serve the next one.
func (c *rawH2Conn) detach() {
	c.c = nil
	c.br.Reset(nil)
}

// refreshDeadline pushes the connection's deadline h2Timeout ahead, at most
// once a second, so that every wait is bounded by 9 to 10 s without a
// syscall per request.
func (c *rawH2Conn) refreshDeadline() error {
	now := time.Now()
	if now.Before(c.refreshAt) {
		return nil
	}
	c.refreshAt = now.Add(time.Second)
	return c.c.SetDeadline(now.Add(h2Timeout))
}

// exchange sends the first k HEADERS frames of frames (each frameLen bytes
// long) on the next k stream ids in one write, and reads frames until all k
// streams have ended with :status 200 and h2BodyLen bytes of DATA.
func (c *rawH2Conn) exchange(frames []byte, frameLen, k int) error {
	if err := c.refreshDeadline(); err != nil {
		return err
	}
	base := c.nextID
	for i := range k {
		binary.BigEndian.PutUint32(frames[i*frameLen+5:], base+2*uint32(i))
		c.state[i] = streamOpen
		c.body[i] = 0
	}
	c.nextID += 2 * uint32(k)
	if _, err := c.c.Write(frames[:k*frameLen]); err != nil {
		return err
	}
	for open := k; open > 0; {
		typ, flags, stream, p, err := c.readFrame()
		if err != nil {
			return err
		}
		if typ != h2FrameData && typ != h2FrameHeaders {
			if err := c.control(typ, flags, stream, p); err != nil {
				return err
			}
			continue
		}
		if stream < base || stream >= c.nextID || stream%2 != 1 {
			return fmt.Errorf("frame type %d on stream %d, not one of the streams %d to %d in flight", typ, stream, base, c.nextID-2)
		}
		i := int(stream-base) / 2
		if c.state[i] == streamEnded {
			return fmt.Errorf("frame type %d on stream %d after END_STREAM", typ, stream)
		}
		if typ == h2FrameHeaders {
			block, err := h2Unpad(flags, p, flags&h2FlagPriority != 0)
			if err != nil {
				return fmt.Errorf("stream %d: HEADERS: %w", stream, err)
			}
			switch {
			case c.state[i] != streamOpen:
				return fmt.Errorf("stream %d: a second HEADERS frame (trailers)", stream)
			case flags&h2FlagEndHeaders == 0:
				return fmt.Errorf("stream %d: response header block continued in CONTINUATION frames", stream)
			case len(block) == 0 || block[0] != 0x88:
				// Not the indexed static entry 8, ":status: 200".
				return fmt.Errorf("stream %d: response header block % x does not start with :status 200 (0x88)", stream, block)
			}
			c.state[i] = streamHeaders
		} else {
			c.unacked += len(p) // flow control counts the padding
			data, err := h2Unpad(flags, p, false)
			if err != nil {
				return fmt.Errorf("stream %d: DATA: %w", stream, err)
			}
			if c.state[i] != streamHeaders {
				return fmt.Errorf("stream %d: DATA before HEADERS", stream)
			}
			c.body[i] += len(data)
			if c.unacked >= h2WindowUpdateAt {
				binary.BigEndian.PutUint32(c.wu[9:], uint32(c.unacked))
				if _, err := c.c.Write(c.wu); err != nil {
					return err
				}
				c.unacked = 0
			}
		}
		if flags&h2FlagEndStream != 0 {
			if c.state[i] != streamHeaders || c.body[i] != h2BodyLen {
				return fmt.Errorf("stream %d ended after %d bytes of DATA, want %d", stream, c.body[i], h2BodyLen)
			}
			c.state[i] = streamEnded
			open--
		}
	}
	return nil
}

// control handles a frame that is neither DATA nor HEADERS.
func (c *rawH2Conn) control(typ, flags byte, stream uint32, p []byte) error {
	switch typ {
	case h2FrameSettings:
		switch {
		case flags&h2FlagAck != 0:
			c.settled = true
		case len(p)%6 != 0:
			return fmt.Errorf("SETTINGS of %d bytes", len(p))
		default:
			if _, err := c.c.Write(c.ack); err != nil {
				return err
			}
			c.settings = true
		}
	case h2FramePing:
		if flags&h2FlagAck == 0 && len(p) == 8 {
			copy(c.pong[9:], p)
			if _, err := c.c.Write(c.pong); err != nil {
				return err
			}
		}
	case h2FrameGoAway:
		if len(p) < 8 {
			return errors.New("GOAWAY")
		}
		return fmt.Errorf("GOAWAY: last stream %d, error code %d, %q",
			binary.BigEndian.Uint32(p)&h2MaxWindow, binary.BigEndian.Uint32(p[4:]), p[8:])
	case h2FrameRSTStream:
		if len(p) != 4 {
			return fmt.Errorf("RST_STREAM on stream %d", stream)
		}
		return fmt.Errorf("RST_STREAM on stream %d: error code %d", stream, binary.BigEndian.Uint32(p))
	case h2FramePushPromise, h2FrameContinuation:
		return fmt.Errorf("unexpected frame type %d on stream %d", typ, stream)
	case h2FrameData, h2FrameHeaders:
		return fmt.Errorf("frame type %d on stream %d with no request in flight", typ, stream)
	}
	// WINDOW_UPDATE (the client's frames carry no flow-controlled data),
	// PRIORITY and unknown types: ignored.
	return nil
}

// readFrame reads one frame; its payload is valid until the next call.
func (c *rawH2Conn) readFrame() (typ, flags byte, stream uint32, payload []byte, err error) {
	if _, err = io.ReadFull(c.br, c.hdr[:]); err != nil {
		return 0, 0, 0, nil, err
	}
	n := int(c.hdr[0])<<16 | int(c.hdr[1])<<8 | int(c.hdr[2])
	if n > len(c.buf) {
		return 0, 0, 0, nil, fmt.Errorf("frame of %d bytes, over SETTINGS_MAX_FRAME_SIZE %d", n, len(c.buf))
	}
	payload = c.buf[:n]
	if _, err = io.ReadFull(c.br, payload); err != nil {
		return 0, 0, 0, nil, err
	}
	return c.hdr[3], c.hdr[4], binary.BigEndian.Uint32(c.hdr[5:]) & h2MaxWindow, payload, nil
}

// h2Unpad returns the data of a DATA or HEADERS payload: without its
// padding and, if priority, its priority fields.
func h2Unpad(flags byte, p []byte, priority bool) ([]byte, error) {
	if flags&h2FlagPadded != 0 {
		if len(p) < 1 || int(p[0]) > len(p)-1 {
			return nil, errors.New("bad padding")
		}
		p = p[1 : len(p)-int(p[0])]
	}
	if priority {
		if len(p) < 5 {
			return nil, errors.New("short priority fields")
		}
		p = p[5:]
	}
	return p, nil
}
