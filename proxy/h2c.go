package proxy

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync"
	"time"

	"github.com/queue-dev/queue/internal/hpackw"
	"github.com/queue-dev/queue/internal/pool"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// The h2c upstream client: queue's own HTTP/2 client with prior knowledge
// (RFC 9113 section 3.3), on x/net's Framer for reading frames and its
// HPACK decoder, with requests encoded by internal/hpackw. doc.go
// describes its goroutines and buffers; h2.go runs an exchange on it.

const (
	// h2cStreamWindow is the receive window of each upstream stream:
	// what an upstream may send ahead of the client's reading, held in the
	// stream's buffer. 256 KiB lets a loopback upstream send a large
	// response in a few round trips of WINDOW_UPDATE, and bounds what one
	// stream can make queue hold.
	h2cStreamWindow = 256 << 10
	// h2cConnWindow is the connection's receive window. It is given back
	// as DATA arrives (what a stream may hold is bounded by its own
	// window), in one WINDOW_UPDATE per quarter of it, not per frame.
	h2cConnWindow = 64 << 20
	// h2cMaxFrame is the largest frame queue reads (the protocol's
	// default; SETTINGS_MAX_FRAME_SIZE is not raised).
	h2cMaxFrame = 16 << 10
	// h2cMaxStreams is how many streams a connection carries at most:
	// fewer when the upstream's SETTINGS_MAX_CONCURRENT_STREAMS says so,
	// never more (RFC 9113 section 6.5.2 suggests no fewer than 100;
	// HAProxy's backends carry 100 too). Past it the pool opens another
	// connection. A server runs one read loop and one writer a connection
	// (Go's, gRPC's): 512 streams at once on one connection to a Go h2c
	// server cost it 62 µs of CPU a request and queue 37, on 100-stream
	// connections 45 and 27, queue's thread waking half as often
	// (h2load -c16 -m32, perf stat, 2026-11-27).
	h2cMaxStreams = 100
	// h2cMaxQueued bounds the write queue: a request body's DATA waits for
	// room beyond it, so an upstream that stops reading its socket does
	// not make queue hold more than this per connection.
	h2cMaxQueued = 256 << 10
	// h2cWriteTimeout bounds one write to the upstream: an upstream that
	// does not read its socket that long is broken, and its connection is
	// closed.
	h2cWriteTimeout = 10 * time.Second
	// h2cPingAfter is how long a connection with streams waiting may stay
	// silent before it is sent a PING; h2cPingTimeout how long the PING
	// may go unanswered before the connection is given up (its streams
	// get 502).
	h2cPingAfter   = 15 * time.Second
	h2cPingTimeout = 5 * time.Second
)

// h2cTransport is the h2c client's pool: a few multiplexed connections
// to the one upstream. A request takes a stream on the first connection
// that has one free (get); another connection is dialled only when none
// has, or all are going away, and one dial at a time serves all the
// requests that wait for it.
type h2cTransport struct {
	addr        string
	dial        func(ctx context.Context, network, addr string) (net.Conn, error)
	dialTimeout time.Duration
	outage      *outage
	maxHeader   int           // bound of a response head (and its trailers)
	idleTimeout time.Duration // a connection without streams is closed after it; 0: never
	pingAfter   time.Duration
	pingTimeout time.Duration

	mu      sync.Mutex
	conns   []*h2cConn
	dialing *h2cDial // the dial in progress, or nil
	closed  bool
}

// h2cDial is a dial that requests share: done closes when c or err is set.
type h2cDial struct {
	done chan struct{}
	c    *h2cConn
	err  error
}

func newH2CTransport(addr string, dial time.Duration, maxHeader int, idle time.Duration) *h2cTransport {
	d := &net.Dialer{Timeout: dial}
	return &h2cTransport{
		addr: addr, dial: d.DialContext, dialTimeout: dial,
		maxHeader:   orDefault(maxHeader, maxHeaderBytes),
		idleTimeout: idle, pingAfter: h2cPingAfter, pingTimeout: h2cPingTimeout,
	}
}

// get returns a stream reserved on a connection that can open it: a
// pooled one unless fresh, else one dialled (shared with the other
// requests that wait for a connection, unless fresh).
func (t *h2cTransport) get(ctx context.Context, fresh bool) (*h2cStream, error) {
	for {
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			return nil, errors.New("h2c transport closed")
		}
		if !fresh {
			for _, c := range t.conns {
				if s := c.reserve(); s != nil {
					t.mu.Unlock()
					return s, nil
				}
			}
		}
		d := t.dialing
		if d == nil || fresh {
			d = &h2cDial{done: make(chan struct{})}
			if !fresh {
				t.dialing = d
			}
			t.mu.Unlock()
			// Not the request's context: the connection is the pool's,
			// and other requests wait for it (the dialer has its timeout).
			d.c, d.err = t.connect(context.Background())
			t.mu.Lock()
			if t.dialing == d {
				t.dialing = nil
			}
			var s *h2cStream
			if d.err == nil {
				t.conns = append(t.conns, d.c)
				s = d.c.reserve()
			}
			close(d.done)
			t.mu.Unlock()
			if d.err != nil {
				return nil, d.err
			}
			if s != nil {
				return s, nil
			}
			d.c.mu.Lock()
			none := d.c.maxStreams == 0
			d.c.mu.Unlock()
			if none {
				return nil, fmt.Errorf("%w: SETTINGS_MAX_CONCURRENT_STREAMS 0", errBadResponse)
			}
			continue // the new connection is full already: look again
		}
		t.mu.Unlock()
		select {
		case <-d.done:
			if d.err != nil {
				return nil, d.err
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// remove takes c out of the pool: no new stream goes to it.
func (t *h2cTransport) remove(c *h2cConn) {
	t.mu.Lock()
	for i, x := range t.conns {
		if x == c {
			t.conns = append(t.conns[:i], t.conns[i+1:]...)
			t.conns[len(t.conns):cap(t.conns)][0] = nil
			break
		}
	}
	t.mu.Unlock()
}

// closeIdle closes the connections that carry no stream.
func (t *h2cTransport) closeIdle() {
	t.mu.Lock()
	var idle []*h2cConn
	for _, c := range t.conns {
		c.mu.Lock()
		if c.active == 0 {
			idle = append(idle, c)
		}
		c.mu.Unlock()
	}
	t.mu.Unlock()
	for _, c := range idle {
		c.fail(errIdleRetired)
	}
}

// connect dials the upstream and exchanges the preface and SETTINGS:
// the connection is handed out only once the upstream's SETTINGS are in,
// so that its stream limit and windows hold from the first stream.
func (t *h2cTransport) connect(ctx context.Context) (*h2cConn, error) {
	nc, err := t.dial(ctx, "tcp", t.addr)
	if err != nil {
		return nil, fmt.Errorf("dial upstream: %w", err)
	}
	t.outage.up()
	c := newH2CConn(t, nc)
	if err := c.handshake(ctx); err != nil {
		nc.Close()
		return nil, fmt.Errorf("h2c handshake: %w", err)
	}
	go c.readLoop()
	go c.writeLoop()
	return c, nil
}

// h2cConn is one upstream connection. Its read loop (readLoop) owns the
// Framer, the HPACK decoder and the header block being read; everything
// the read loop shares with the requests' goroutines is under mu.
type h2cConn struct {
	t   *h2cTransport
	nc  net.Conn
	br  h2cReader
	bw  h2cWriter
	fr  *http2.Framer
	dec *hpack.Decoder

	// The read loop's own.
	block     []byte // the header block being gathered
	blockID   uint32 // its stream, or 0
	endStream bool   // the block's HEADERS ended the stream
	// The block being decoded (onField): its fields, into scratch, moved
	// to the stream under mu once the block is whole and found good.
	scratch     []hpack.HeaderField
	curTrailers bool // the block is a stream's trailers
	curSize     int  // the decoded block's size so far (RFC 9113 section 6.5.2's reckoning)
	curBad      bool // the block broke a rule: the stream is reset after it
	curStatus   int  // its :status
	wakes       []*h2cStream

	mu          sync.Mutex
	streams     map[uint32]*h2cStream // open upstream streams, by id
	free        []*h2cStream          // stream objects for reuse
	nextID      uint32
	active      int    // streams reserved and not released
	maxStreams  uint32 // the upstream's SETTINGS_MAX_CONCURRENT_STREAMS, at most h2cMaxStreams
	initWindow  int64  // the upstream's SETTINGS_INITIAL_WINDOW_SIZE
	maxFrame    int    // the upstream's SETTINGS_MAX_FRAME_SIZE
	maxList     int64  // the upstream's SETTINGS_MAX_HEADER_LIST_SIZE, or 0
	sendWindow  int64  // the connection's send window
	recvUnacked int64  // DATA received and not yet given back
	goingAway   bool   // GOAWAY came or the connection is retired: no new stream
	lastID      uint32 // GOAWAY's last stream id
	err         error  // the connection failed
	idleSince   time.Time
	lastRead    time.Time // when the read loop last read
	pingDue     time.Time // a PING is out: the connection fails if nothing comes back by then
	timer       *time.Timer
	timerAt     time.Time // when timer fires, or zero
	bodyWaiters []*h2cStream

	// The writer: frames are appended to wq, and the connection's writer
	// goroutine (writeLoop) writes the whole queue.
	wq, wspare []byte
	writing    bool          // the writer has the queue to write, or a flush is writing it
	wwake      chan struct{} // wakes the writer (writeLoop); size 1
	done       chan struct{} // closed when the connection fails
	werr       error
	wdl        time.Time // the write deadline last set
}

func newH2CConn(t *h2cTransport, nc net.Conn) *h2cConn {
	c := &h2cConn{
		t: t, nc: nc, wwake: make(chan struct{}, 1), done: make(chan struct{}),
		streams: map[uint32]*h2cStream{}, nextID: 1,
		maxStreams: h2cMaxStreams, initWindow: 65535, maxFrame: 16 << 10, sendWindow: 65535,
		idleSince: time.Now(),
	}
	c.lastRead = c.idleSince
	c.br.init(nc, pool.Frame)
	c.bw.init(nc)
	c.fr = http2.NewFramer(nil, &c.br)
	c.fr.SetMaxReadFrameSize(h2cMaxFrame)
	c.fr.SetReuseFrames()
	c.dec = hpack.NewDecoder(4096, c.onField)
	c.dec.SetMaxStringLength(t.maxHeader)
	c.timer = time.AfterFunc(time.Hour, c.tick)
	c.timer.Stop()
	return c
}

// handshake writes the preface, SETTINGS and the connection's window, and
// reads the upstream's first frame, which must be SETTINGS (RFC 9113
// section 3.4), within the dial timeout.
func (c *h2cConn) handshake(ctx context.Context) error {
	deadline := time.Now().Add(c.t.dialTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	c.nc.SetDeadline(deadline)
	defer c.nc.SetDeadline(time.Time{})
	b := append([]byte(nil), http2.ClientPreface...)
	b = hpackw.AppendFrameHeader(b, 3*6, byte(http2.FrameSettings), 0, 0)
	b = appendSetting(b, http2.SettingEnablePush, 0)
	b = appendSetting(b, http2.SettingInitialWindowSize, h2cStreamWindow)
	b = appendSetting(b, http2.SettingMaxHeaderListSize, uint32(c.t.maxHeader))
	b = hpackw.AppendFrameHeader(b, 4, byte(http2.FrameWindowUpdate), 0, 0)
	b = binary.BigEndian.AppendUint32(b, h2cConnWindow-65535)
	if _, err := c.bw.Write(b); err != nil {
		return err
	}
	f, err := c.fr.ReadFrame()
	if err != nil {
		return err
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok || sf.IsAck() {
		return fmt.Errorf("%w: first frame %v, want SETTINGS", errBadResponse, f.Header().Type)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.settingsLocked(sf)
}

func appendSetting(b []byte, id http2.SettingID, v uint32) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(id))
	return binary.BigEndian.AppendUint32(b, v)
}

// reserve takes a stream on c if it can open one, or returns nil. Called
// under the transport's mutex.
func (c *h2cConn) reserve() *h2cStream {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.goingAway || c.err != nil || c.active >= int(c.maxStreams) || c.nextID >= 1<<31-2*uint32(c.active)-2 {
		return nil
	}
	c.active++
	var s *h2cStream
	if n := len(c.free); n > 0 {
		s = c.free[n-1]
		c.free[n-1] = nil
		c.free = c.free[:n-1]
	} else {
		s = &h2cStream{c: c, wake: make(chan struct{}, 1), bodyWake: make(chan struct{}, 1), bodyDone: make(chan error, 1)}
	}
	if c.timerAt.IsZero() && c.t.pingAfter > 0 {
		c.armLocked(time.Now().Add(c.t.pingAfter)) // tick watches the streams' silence
	}
	s.sendWindow = c.initWindow
	s.recvWindow = h2cStreamWindow
	s.contentLength = -1
	return s
}

// release ends s's part on c: a stream still open upstream is reset
// (RST_STREAM CANCEL) before the handler goes on, so that the upstream
// never has more of queue's streams open than queue's clients have
// requests, and the stream object goes back for reuse.
func (c *h2cConn) release(s *h2cStream) {
	c.mu.Lock()
	if s.id != 0 && c.streams[s.id] == s {
		delete(c.streams, s.id)
		if !s.rstSent && !s.rstRecv && !(s.ended && s.sentEnd) && c.err == nil {
			c.queueRST(s.id, http2.ErrCodeCancel)
		}
	}
	s.reset()
	c.free = append(c.free, s)
	c.active--
	if c.active == 0 {
		c.idleSince = time.Now()
		if c.t.idleTimeout > 0 {
			c.armLocked(c.idleSince.Add(c.t.idleTimeout))
		}
	}
	closing := c.goingAway && c.active == 0
	c.kickLocked()
	c.mu.Unlock()
	if closing {
		c.fail(errGoingAway)
	}
}

var errGoingAway = errors.New("h2c connection went away")

// queueRST queues RST_STREAM; under mu.
func (c *h2cConn) queueRST(id uint32, code http2.ErrCode) {
	c.wq = hpackw.AppendFrameHeader(c.wq, 4, byte(http2.FrameRSTStream), 0, id)
	c.wq = binary.BigEndian.AppendUint32(c.wq, uint32(code))
}

// fail ends the connection with err: every stream on it fails, the pool
// drops it, the socket closes (which ends the read loop).
func (c *h2cConn) fail(err error) {
	c.t.remove(c)
	c.mu.Lock()
	if c.err == nil {
		c.err = err
		close(c.done)
		c.goingAway = true
		for _, s := range c.streams {
			c.wakeLocked(s)
		}
		c.wakeBodies()
		c.timer.Stop()
	}
	c.mu.Unlock()
	c.nc.Close()
}

// wakeLocked wakes the goroutine waiting on s's response.
func (c *h2cConn) wakeLocked(s *h2cStream) {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// wakeBodies wakes the streams whose request body waits for room (send
// window or queue); under mu.
func (c *h2cConn) wakeBodies() {
	for i, s := range c.bodyWaiters {
		select {
		case s.bodyWake <- struct{}{}:
		default:
		}
		c.bodyWaiters[i] = nil
	}
	c.bodyWaiters = c.bodyWaiters[:0]
}

// armLocked has the connection's one timer fire by at.
func (c *h2cConn) armLocked(at time.Time) {
	if c.err != nil || !c.timerAt.IsZero() && !at.Before(c.timerAt) {
		return
	}
	c.timerAt = at
	c.timer.Reset(time.Until(at))
}

// tick is the connection's timer: it fails the streams whose deadline
// passed, closes the connection after its idle timeout, sends a PING on a
// connection whose streams wait in silence and gives the connection up
// when the PING goes unanswered.
func (c *h2cConn) tick() {
	c.mu.Lock()
	now := time.Now()
	c.timerAt = time.Time{}
	var next time.Time
	later := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for _, s := range c.streams {
		if s.due.IsZero() {
			continue
		}
		if !s.due.After(now) {
			s.timedOut = true
			s.due = time.Time{}
			c.wakeLocked(s)
			continue
		}
		later(s.due)
	}
	var fail error
	switch {
	case c.err != nil:
	case c.active == 0 && c.t.idleTimeout > 0 && !now.Before(c.idleSince.Add(c.t.idleTimeout)):
		c.goingAway = true
		fail = errIdleRetired
	case c.active == 0:
		if c.t.idleTimeout > 0 {
			later(c.idleSince.Add(c.t.idleTimeout))
		}
	case c.t.pingAfter <= 0:
	case !c.pingDue.IsZero() && !now.Before(c.pingDue):
		fail = errPingTimeout
	case c.pingDue.IsZero() && !now.Before(c.lastRead.Add(c.t.pingAfter)):
		c.pingDue = now.Add(c.t.pingTimeout)
		c.wq = hpackw.AppendFrameHeader(c.wq, 8, byte(http2.FramePing), 0, 0)
		c.wq = append(c.wq, "queueh2c"...)
		c.kickLocked()
		later(c.pingDue)
	case !c.pingDue.IsZero():
		later(c.pingDue)
	default:
		later(c.lastRead.Add(c.t.pingAfter))
	}
	if fail == nil && !next.IsZero() {
		c.armLocked(next)
	}
	c.mu.Unlock()
	if fail != nil {
		c.fail(fail)
	}
}

var (
	errIdleRetired = errors.New("h2c connection retired idle")
	errPingTimeout = errors.New("h2c connection did not answer a PING")
)

// flushLocked writes the queue now unless the writer is writing it; the
// mutex is released during each write. Only for the read loop's last
// GOAWAY: everything else goes through kickLocked.
func (c *h2cConn) flushLocked() {
	if c.writing || len(c.wq) == 0 {
		return
	}
	c.writing = true
	c.writeLoopLocked()
}

// kickLocked has the queue written by the connection's writer (writeLoop)
// unless it is writing already. Under mu.
func (c *h2cConn) kickLocked() {
	if c.writing || len(c.wq) == 0 {
		return
	}
	c.writing = true
	select {
	case c.wwake <- struct{}{}:
	default:
	}
}

// writeLoop is the connection's writer, a goroutine that waits on wwake
// until the connection fails. Nobody else waits on the upstream's socket:
// not a request's goroutine, which a handler could not stop there, nor
// the read loop. Woken, it first lets the goroutines already runnable run
// (runtime.Gosched), so that the requests that came together (from one
// wake-up of the netpoller) queue their frames before it writes: one
// write to the upstream for all of them rather than one each, which under
// load was a system call a request.
func (c *h2cConn) writeLoop() {
	for {
		select {
		case <-c.wwake:
		case <-c.done:
			return
		}
		runtime.Gosched()
		c.mu.Lock()
		c.writeLoopLocked()
		c.mu.Unlock()
	}
}

func (c *h2cConn) writeLoopLocked() {
	for len(c.wq) > 0 && c.werr == nil {
		b := c.wq
		c.wq = c.wspare[:0]
		c.mu.Unlock()
		// The write deadline is pushed at most once a second: a timer
		// update per write would cost more than the write.
		if now := time.Now(); now.Add(h2cWriteTimeout - time.Second).After(c.wdl) {
			c.wdl = now.Add(h2cWriteTimeout)
			c.nc.SetWriteDeadline(c.wdl)
		}
		_, err := c.bw.Write(b)
		c.mu.Lock()
		if cap(b) <= 4*h2cMaxQueued {
			c.wspare = b[:0]
		}
		if err != nil {
			c.werr = err
			c.wq = c.wq[:0]
		}
		c.wakeBodies()
	}
	c.writing = false
	if c.werr != nil && c.err == nil {
		err := c.werr
		go c.fail(fmt.Errorf("write to upstream: %w", err))
	}
}

// queueHeaders queues a header block as HEADERS and CONTINUATION frames
// within the upstream's frame size; under mu.
func (c *h2cConn) queueHeaders(id uint32, block []byte, end bool) {
	first := true
	for first || len(block) > 0 {
		n := min(len(block), c.maxFrame)
		var flags http2.Flags
		t := http2.FrameContinuation
		if first {
			t = http2.FrameHeaders
			if end {
				flags |= http2.FlagHeadersEndStream
			}
		}
		if n == len(block) {
			flags |= http2.FlagHeadersEndHeaders
		}
		c.wq = hpackw.AppendFrameHeader(c.wq, n, byte(t), byte(flags), id)
		c.wq = append(c.wq, block[:n]...)
		block = block[n:]
		first = false
	}
}

// queueData queues p as DATA frames of at most the upstream's frame
// size; the caller took the window. Under mu.
func (c *h2cConn) queueData(id uint32, p []byte, end bool) {
	for first := true; first || len(p) > 0; first = false {
		n := min(len(p), c.maxFrame)
		var flags http2.Flags
		if end && n == len(p) {
			flags = http2.FlagDataEndStream
		}
		c.wq = hpackw.AppendFrameHeader(c.wq, n, byte(http2.FrameData), byte(flags), id)
		c.wq = append(c.wq, p[:n]...)
		p = p[n:]
	}
}

// settingsLocked applies the upstream's SETTINGS and queues the ACK.
func (c *h2cConn) settingsLocked(f *http2.SettingsFrame) error {
	err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingMaxConcurrentStreams:
			c.maxStreams = min(s.Val, h2cMaxStreams)
		case http2.SettingInitialWindowSize:
			// RFC 9113 section 6.9.2: the change applies to every open
			// stream's window, which may go negative.
			d := int64(s.Val) - c.initWindow
			c.initWindow = int64(s.Val)
			for _, st := range c.streams {
				st.sendWindow += d
			}
		case http2.SettingMaxFrameSize:
			c.maxFrame = int(s.Val)
		case http2.SettingMaxHeaderListSize:
			c.maxList = int64(s.Val)
		}
		return nil
	})
	if err != nil {
		return err
	}
	c.wq = hpackw.AppendFrameHeader(c.wq, 0, byte(http2.FrameSettings), byte(http2.FlagSettingsAck), 0)
	c.wakeBodies()
	return nil
}

// readLoop reads the upstream's frames until the connection fails.
func (c *h2cConn) readLoop() {
	c.mu.Lock()
	c.kickLocked() // the SETTINGS ACK
	if c.t.idleTimeout > 0 {
		c.armLocked(time.Now().Add(c.t.idleTimeout))
	}
	c.mu.Unlock()
	for {
		if c.br.Buffered() == 0 {
			c.wakeAll() // before the read waits: what came together wakes a handler once
		}
		fh, err := c.fr.ReadFrameHeader()
		if err == nil {
			err = c.frame(fh)
		}
		if err != nil {
			c.wakeAll()
			var ce http2.ConnectionError
			if errors.As(err, &ce) {
				c.mu.Lock()
				c.wq = hpackw.AppendFrameHeader(c.wq, 8, byte(http2.FrameGoAway), 0, 0)
				c.wq = binary.BigEndian.AppendUint32(c.wq, 0)
				c.wq = binary.BigEndian.AppendUint32(c.wq, uint32(ce))
				c.flushLocked()
				c.mu.Unlock()
				err = fmt.Errorf("%w: %w", errBadResponse, err)
			} else {
				err = fmt.Errorf("read from upstream: %w", err)
			}
			c.fail(err)
			return
		}
	}
}

// wakeAll wakes the handlers of the streams that something came for.
func (c *h2cConn) wakeAll() {
	if len(c.wakes) == 0 {
		return
	}
	c.mu.Lock()
	c.lastRead = time.Now()
	for i, s := range c.wakes {
		s.queued = false
		c.wakeLocked(s)
		c.wakes[i] = nil
	}
	c.wakes = c.wakes[:0]
	c.mu.Unlock()
}

// pend has s's handler woken before the read loop next waits; under mu.
func (c *h2cConn) pend(s *h2cStream) {
	if !s.queued {
		s.queued = true
		c.wakes = append(c.wakes, s)
	}
}

// frame reads the payload of the frame fh heads and acts on it. HEADERS
// and CONTINUATION are read here, straight into the block being gathered
// (the Framer would make a HeadersFrame for each); other frames through
// the Framer, which reuses its DataFrame.
func (c *h2cConn) frame(fh http2.FrameHeader) error {
	switch fh.Type {
	case http2.FrameHeaders, http2.FrameContinuation:
		return c.headerFrame(fh)
	}
	if c.blockID != 0 {
		return http2.ConnectionError(http2.ErrCodeProtocol) // RFC 9113 section 6.10
	}
	f, err := c.fr.ReadFrameForHeader(fh)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch f := f.(type) {
	case *http2.DataFrame:
		return c.dataLocked(f)
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		if err := c.settingsLocked(f); err != nil {
			return err
		}
		c.kickLocked()
	case *http2.PingFrame:
		if f.IsAck() {
			c.pingDue, c.lastRead = time.Time{}, time.Now()
			return nil
		}
		c.wq = hpackw.AppendFrameHeader(c.wq, 8, byte(http2.FramePing), byte(http2.FlagPingAck), 0)
		c.wq = append(c.wq, f.Data[:]...)
		c.kickLocked()
	case *http2.GoAwayFrame:
		c.goAwayLocked(f.LastStreamID)
	case *http2.WindowUpdateFrame:
		if f.StreamID == 0 {
			c.sendWindow += int64(f.Increment)
			if c.sendWindow > 1<<31-1 {
				return http2.ConnectionError(http2.ErrCodeFlowControl)
			}
			c.wakeBodies()
			return nil
		}
		if s := c.streams[f.StreamID]; s != nil {
			s.sendWindow += int64(f.Increment)
			if s.sendWindow > 1<<31-1 {
				c.resetLocked(s, http2.ErrCodeFlowControl)
			}
			c.wakeBodies()
		}
	case *http2.RSTStreamFrame:
		if s := c.streams[f.StreamID]; s != nil {
			delete(c.streams, s.id)
			s.rstRecv, s.rstCode = true, f.ErrCode
			c.pend(s)
			c.wakeBodies()
		}
	case *http2.PushPromiseFrame:
		return http2.ConnectionError(http2.ErrCodeProtocol) // push is off (SETTINGS_ENABLE_PUSH 0)
	}
	return nil
}

// goAwayLocked drains c: no new stream goes to it, and the streams above
// the upstream's last one, which it did not process (RFC 9113 section
// 6.8), fail as refused, to be sent again on another connection.
func (c *h2cConn) goAwayLocked(last uint32) {
	if !c.goingAway {
		go c.t.remove(c)
	}
	c.goingAway, c.lastID = true, last
	for id, s := range c.streams {
		if id > last {
			delete(c.streams, id)
			s.refused, s.rstRecv = true, true
			c.pend(s)
		}
	}
	c.wakeBodies()
	if c.active == 0 {
		go c.fail(errGoingAway)
	}
}

// resetLocked resets s upstream with code and fails its exchange.
func (c *h2cConn) resetLocked(s *h2cStream, code http2.ErrCode) {
	if c.streams[s.id] == s {
		delete(c.streams, s.id)
	}
	if !s.rstSent && !s.rstRecv {
		c.queueRST(s.id, code)
		c.kickLocked()
	}
	s.rstSent = true
	if s.failure == nil {
		s.failure = fmt.Errorf("%w: stream reset: %v", errBadResponse, code)
	}
	c.wakeLocked(s) // not pend: the handler calls this too
	c.wakeBodies()
}

// dataLocked takes a DATA frame: the connection's window is given back at
// once (a stream holds no more than its own window), the stream's as its
// handler takes the bytes.
func (c *h2cConn) dataLocked(f *http2.DataFrame) error {
	n := int64(f.Length)
	c.recvUnacked += n
	if c.recvUnacked >= h2cConnWindow/4 {
		c.wq = hpackw.AppendFrameHeader(c.wq, 4, byte(http2.FrameWindowUpdate), 0, 0)
		c.wq = binary.BigEndian.AppendUint32(c.wq, uint32(c.recvUnacked))
		c.recvUnacked = 0
		c.kickLocked()
	}
	s := c.streams[f.StreamID]
	if s == nil {
		if f.StreamID >= c.nextID {
			return http2.ConnectionError(http2.ErrCodeProtocol) // an idle stream (section 5.1)
		}
		return nil // a stream queue reset or closed: dropped
	}
	if s.ended || s.status == 0 {
		c.resetLocked(s, http2.ErrCodeProtocol) // DATA before the head, or after END_STREAM
		return nil
	}
	s.recvWindow -= n
	if s.recvWindow < 0 {
		c.resetLocked(s, http2.ErrCodeFlowControl)
		return nil
	}
	data := f.Data()
	s.padding += n - int64(len(data))
	if len(data) > 0 {
		s.in.append(data)
	}
	if f.StreamEnded() {
		s.ended = true
		if s.sentEnd {
			delete(c.streams, s.id)
		}
	}
	c.pend(s)
	return nil
}

// headerFrame reads a HEADERS or CONTINUATION frame's payload into the
// block and decodes the block once it is whole.
func (c *h2cConn) headerFrame(fh http2.FrameHeader) error {
	if fh.Type == http2.FrameContinuation && (c.blockID == 0 || fh.StreamID != c.blockID) ||
		fh.Type == http2.FrameHeaders && (c.blockID != 0 || fh.StreamID == 0) {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	start := len(c.block)
	if start+int(fh.Length) > c.t.maxHeader+h2cMaxFrame {
		return http2.ConnectionError(http2.ErrCodeEnhanceYourCalm) // a block past any head queue takes
	}
	c.block = append(c.block, make([]byte, fh.Length)...)
	p := c.block[start:]
	if _, err := io.ReadFull(&c.br, p); err != nil {
		return err
	}
	if fh.Type == http2.FrameHeaders {
		c.blockID = fh.StreamID
		c.endStream = fh.Flags.Has(http2.FlagHeadersEndStream)
		pad := 0
		if fh.Flags.Has(http2.FlagHeadersPadded) {
			if len(p) < 1 {
				return http2.ConnectionError(http2.ErrCodeProtocol)
			}
			pad = int(p[0])
			p = p[1:]
		}
		if fh.Flags.Has(http2.FlagHeadersPriority) {
			if len(p) < 5 {
				return http2.ConnectionError(http2.ErrCodeProtocol)
			}
			p = p[5:]
		}
		if pad > len(p) {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		p = p[:len(p)-pad]
		c.block = append(c.block[:start], p...)
	}
	if !fh.Flags.Has(http2.FlagHeadersEndHeaders) {
		return nil
	}
	return c.decodeBlock()
}

// decodeBlock decodes the gathered block (onField, into c.scratch) and
// hands it to its stream as its head or trailers.
func (c *h2cConn) decodeBlock() error {
	id, block := c.blockID, c.block
	c.blockID, c.block = 0, c.block[:0]
	c.mu.Lock()
	s := c.streams[id]
	if s == nil && id >= c.nextID {
		c.mu.Unlock()
		return http2.ConnectionError(http2.ErrCodeProtocol) // an idle stream (section 5.1)
	}
	c.curTrailers = s != nil && s.status != 0
	c.mu.Unlock()
	// The block is decoded whether or not a stream wants it: the decoder's
	// table must follow the upstream's encoder (RFC 7541 section 2.2).
	c.curSize, c.curBad, c.curStatus = 0, false, 0
	_, err := c.dec.Write(block)
	if err == nil {
		err = c.dec.Close()
	}
	defer func() {
		clear(c.scratch)
		c.scratch = c.scratch[:0]
	}()
	if err != nil {
		return http2.ConnectionError(http2.ErrCodeCompression)
	}
	if s == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.streams[id] != s:
		return nil // reset meanwhile
	case s.ended, c.curBad, c.curTrailers && !c.endStream:
		c.resetLocked(s, http2.ErrCodeProtocol)
		return nil
	case c.curTrailers:
		s.trailers = append(s.trailers, c.scratch...)
		s.gotTrailers = true
	case c.curStatus == 0:
		c.resetLocked(s, http2.ErrCodeProtocol) // no :status
		return nil
	case c.curStatus < 200:
		// An informational head is dropped (but 101, refused by onField).
		if c.endStream {
			c.resetLocked(s, http2.ErrCodeProtocol)
		}
		return nil
	default:
		s.fields = append(s.fields, c.scratch...)
		s.status = c.curStatus
	}
	if c.endStream {
		s.ended = true
		if s.sentEnd {
			delete(c.streams, s.id)
		}
	}
	c.pend(s)
	return nil
}

// onField takes one decoded field of the block being decoded, into
// c.scratch. The strings are the decoder's, immutable: they are kept as
// they are, with no copy.
func (c *h2cConn) onField(f hpack.HeaderField) {
	if c.curBad {
		return
	}
	c.curSize += len(f.Name) + len(f.Value) + 32
	if c.curSize > c.t.maxHeader {
		c.curBad = true
		return
	}
	if f.IsPseudo() {
		// Only :status, once, before the regular fields, not in trailers
		// (RFC 9113 section 8.3).
		if f.Name != ":status" || c.curTrailers || len(c.scratch) > 0 || c.curStatus != 0 || len(f.Value) != 3 {
			c.curBad = true
			return
		}
		code := 0
		for i := 0; i < 3; i++ {
			ch := f.Value[i]
			if ch < '0' || ch > '9' {
				c.curBad = true
				return
			}
			code = code*10 + int(ch-'0')
		}
		if code < 100 || code == http.StatusSwitchingProtocols {
			c.curBad = true // HTTP/2 has no 101 (section 8.6)
			return
		}
		c.curStatus = code
		return
	}
	c.scratch = append(c.scratch, f)
}
