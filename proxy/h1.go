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
	"net/textproto"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/queue-dev/queue/h1"
	"github.com/queue-dev/queue/headers"
	"github.com/valyala/bytebufferpool"
	"golang.org/x/net/http/httpguts"
)

const (
	// maxHeaderBytes bounds a response head and its trailers.
	maxHeaderBytes = 64 << 10
	// readBufSize is the upstream read buffer: it holds a response head and
	// a small body, which are written to the client straight out of it
	// (Peek/Discard). A larger body is read into a pooled 64 KiB copy buffer
	// held only while it is copied, so a request in flight pins 4 KiB of
	// read buffer (memory at 1000 connections, README), and a 64 KiB
	// response takes two reads and one write to the client.
	readBufSize = 4 << 10
	// directRead is the remaining body size from which the copy reads
	// straight from the connection instead of through the read buffer.
	directRead = readBufSize
	// lazyWriteDeadline is how much of a response is written before the
	// client's write deadline is armed: a smaller response fits the socket
	// buffers and cannot block on a slow reader, so most responses never
	// pay for the deadline (two timer updates, and on HTTP/2 a timer).
	lazyWriteDeadline = 64 << 10
	// reapPeriod is how often in-flight exchanges are checked for clients
	// that went away (see reap).
	reapPeriod = 100 * time.Millisecond
	// writeBufSize holds a request head and small bodies in one write.
	writeBufSize = 4 << 10
	// smallBody is the largest request body read whole before the request
	// is sent. Holding it makes a retry possible when a reused connection
	// turns out closed, and saves the goroutine that a streamed body needs.
	// Bodies this small cannot deadlock the exchange: they fit in the
	// kernel's socket buffers whether or not the upstream reads them.
	smallBody = 64 << 10
	// copyBufSize is the copy buffer of a large response body (see
	// readBufSize).
	copyBufSize = 64 << 10
	// max1xx bounds the informational responses skipped before the final one.
	max1xx = 16
	// retireSlack is how long after the first idle connection expires the
	// pool retires expired ones: one run then closes the connections that a
	// burst left idle at about the same time, not one run each. get never
	// hands out an expired connection, so the slack only lets a file
	// descriptor linger.
	retireSlack = 100 * time.Millisecond
)

// DefaultIdleConnTimeout is the idle timeout of upstream connections that
// queue's --upstream-idle-timeout defaults to.
//
// An upstream that closes an idle keep-alive connection may do so just as a
// request is sent on it: the request then fails with nothing read, and only
// a replayable one can be sent again (serveH1). Closing idle connections
// first, before the upstream does, keeps that race from starting. The
// shortest idle timeouts of common app servers are gunicorn's 2 s, then
// Node.js's and uvicorn's 5 s, puma's 20 s and nginx's 75 s (Go's net/http
// has none unless IdleTimeout is set); 1.5 s stays half a second under the
// shortest, which covers the upstream's timer granularity and scheduling on
// a loaded pod. The price is a new connection for a request that comes more
// than 1.5 s after the last one on an otherwise idle instance: a loopback
// connect, tens of microseconds, against an app that is idle anyway. Under
// load connections are reused within milliseconds and never reach it; after
// a burst the pool shrinks back within 1.5 s.
const DefaultIdleConnTimeout = 1500 * time.Millisecond

// Buffers are pooled and attached to a connection only while it carries a
// request: an idle upstream connection holds no buffer memory
// (BenchmarkProxy, memory per connection in ../bench).
var (
	readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readBufSize) }}
	writerPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, writeBufSize) }}
	copyPool   = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }} // a streamed request body's
)

// bodyPools hold request bodies by size class (4, 16, 64 KiB), as *[]byte
// so that Put does not allocate (staticcheck SA6002).
var bodyPools [3]sync.Pool

func getBody(n int) *[]byte {
	i, size := 0, 4<<10
	for size < n {
		i, size = i+1, size<<2
	}
	if b, ok := bodyPools[i].Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, size)
	return &b
}

func putBody(b *[]byte) {
	switch cap(*b) {
	case 4 << 10:
		bodyPools[0].Put(b)
	case 16 << 10:
		bodyPools[1].Put(b)
	case 64 << 10:
		bodyPools[2].Put(b)
	}
}

// h1Transport is a pool of HTTP/1.1 connections to one upstream.
//
// An idle connection expires after the idle timeout, or earlier when the
// upstream advertised a shorter Keep-Alive timeout (expiry). get never hands
// out an expired connection; one timer for the pool retires expired ones
// while it holds any, so the pool shrinks back after a burst with no
// traffic. The timer is armed by put and disarms itself once no idle
// connection is left to expire: an empty pool sets no timer.
type h1Transport struct {
	addr        string
	dialer      net.Dialer
	dialContext func(ctx context.Context, network, addr string) (net.Conn, error) // dialer.DialContext; tests replace it
	maxIdle     int
	maxHeader   int
	idleTimeout time.Duration // 0: idle connections never expire by age alone

	mu       sync.Mutex
	idle     []*h1Conn // LIFO: the most recently used connection is the warmest
	closed   bool
	retire   *time.Timer // runs retireIdle; created on first use
	retireAt time.Time   // when retire fires; zero while it is not armed

	liveMu    sync.Mutex
	live      map[*h1Conn]struct{} // every open connection, for the reaper
	reaping   atomic.Bool          // the reaper runs: from a request's start until nothing is in flight
	stopReap  chan struct{}
	closeOnce sync.Once
}

func newH1Transport(addr string, dial time.Duration, maxIdle, maxHeader int, idleTimeout time.Duration) *h1Transport {
	t := &h1Transport{
		addr:        addr,
		dialer:      net.Dialer{Timeout: dial},
		maxIdle:     orDefault(maxIdle, 1024),
		maxHeader:   orDefault(maxHeader, maxHeaderBytes),
		idleTimeout: max(idleTimeout, 0),
		live:        map[*h1Conn]struct{}{},
		stopReap:    make(chan struct{}),
	}
	t.dialContext = t.dialer.DialContext
	return t
}

// reap interrupts the exchanges whose client went away, every reapPeriod,
// while any exchange is in flight; watch starts it again after that.
//
// One goroutine for the whole pool replaces a context.AfterFunc per
// request, which costs about 600 ns and 5 allocations (measured with a
// microbenchmark of AfterFunc+stop on a fresh WithCancel); a request pays
// two atomic stores and a load instead. The price is that an upstream
// learns of a departed client up to reapPeriod (plus the serving engine's
// own watch period, h1.Server) later.
func (t *h1Transport) reap() {
	tick := time.NewTicker(reapPeriod)
	defer tick.Stop()
	var conns []*h1Conn
	for {
		select {
		case <-t.stopReap:
			return
		case <-tick.C:
		}
		conns = conns[:0]
		t.liveMu.Lock()
		for c := range t.live {
			conns = append(conns, c)
		}
		t.liveMu.Unlock()
		busy := false
		for _, c := range conns {
			r := c.req.Load()
			if r != nil && r.Context().Err() != nil && c.req.CompareAndSwap(r, nil) {
				c.interrupt()
			}
			busy = busy || r != nil
		}
		if !busy {
			// Nothing in flight: stop, so that an idle sidecar has no
			// ticker. A watch that began after the scan saw reaping true
			// and started nobody: rescan for it before leaving.
			t.reaping.Store(false)
			if !t.anyWatched() || !t.reaping.CompareAndSwap(false, true) {
				return
			}
		}
	}
}

// anyWatched reports whether a connection carries a request.
func (t *h1Transport) anyWatched() bool {
	t.liveMu.Lock()
	defer t.liveMu.Unlock()
	for c := range t.live {
		if c.req.Load() != nil {
			return true
		}
	}
	return false
}

// h1Conn is one upstream connection. Its buffers are attached while it
// carries a request and returned to the pools when it goes idle.
type h1Conn struct {
	nc       net.Conn
	br       *bufio.Reader
	bw       *bufio.Writer
	reused   bool
	t        *h1Transport
	req      atomic.Pointer[http.Request] // the request being carried, for the reaper
	broken   atomic.Bool
	rdl, wdl time.Time // the deadlines set now: setting the same again is skipped

	// keepAlive is the upstream's Keep-Alive timeout from the last response
	// on the connection, or 0; expires is when the connection, idle, is to
	// be closed (zero: never). Both are touched only by the connection's
	// owner: the request it carries, or the pool under its lock.
	keepAlive time.Duration
	expires   time.Time

	// tcp and raw are nc's socket when it is TCP, else nil: raw reads try
	// the socket before they flush the client's response (Read).
	tcp        *net.TCPConn
	raw        syscall.RawConn
	readFn     func(uintptr) bool // c.rawRead, bound once
	rp         []byte
	rn         int
	rerr       error
	flushFirst http.Flusher // flushed if a read has to wait; then flushed is set
	flushed    bool
	bufs       net.Buffers
	vec        [2][]byte

	// head holds the response head while its exchange lasts: the fields
	// passed to the client point into it (h1.ParseResponse), so it is
	// given back only once the client's response is written (detach).
	// vals is the scratch for their value slices.
	head *[]byte
	vals []string
}

// watch tells the reaper that c carries r, and starts the reaper if it
// is not running.
func (c *h1Conn) watch(r *http.Request) {
	c.req.Store(r)
	if t := c.t; !t.reaping.Load() && t.reaping.CompareAndSwap(false, true) {
		go t.reap()
	}
}

// unwatch ends the watch. False means the reaper interrupted the exchange
// (or is about to): the connection must not be reused.
func (c *h1Conn) unwatch(r *http.Request) bool { return c.req.CompareAndSwap(r, nil) }

func (c *h1Conn) interrupt() {
	c.broken.Store(true)
	c.nc.SetDeadline(aLongTimeAgo)
}

// setDeadline sets the connection's read and write deadlines unless they
// are set to t already: deadlines are rounded (Proxy.deadline), so
// consecutive requests on a connection mostly share one and skip the
// runtime timer update (about 160 ns). It never undoes an interrupt.
func (c *h1Conn) setDeadline(t time.Time) {
	if t.Equal(c.rdl) && t.Equal(c.wdl) {
		return
	}
	c.rdl, c.wdl = t, t
	c.nc.SetDeadline(t)
	if c.broken.Load() {
		c.nc.SetDeadline(aLongTimeAgo)
	}
}

// setReadDeadline is setDeadline for reads only.
func (c *h1Conn) setReadDeadline(t time.Time) {
	if t.Equal(c.rdl) {
		return
	}
	c.rdl = t
	c.nc.SetReadDeadline(t)
	if c.broken.Load() {
		c.nc.SetDeadline(aLongTimeAgo)
	}
}

// Read and Write make h1Conn the buffers' underlying reader and writer. It
// hides net.TCPConn's ReadFrom from bufio.Writer, whose ReadFrom would
// otherwise hand a request body to io.Copy and its 32 KiB allocation.
//
// Read flushes c.flushFirst, when set, only if the read would wait: bytes
// already there are read first, so that a response arriving in pieces
// goes to the client in few writes, and a stream still goes out as soon as
// the upstream pauses.
func (c *h1Conn) Read(p []byte) (int, error) {
	if c.flushFirst == nil {
		return c.nc.Read(p)
	}
	if c.raw == nil {
		c.flushFirst.Flush()
		c.flushFirst, c.flushed = nil, true
		return c.nc.Read(p)
	}
	c.rp, c.rn, c.rerr = p, 0, nil
	err := c.raw.Read(c.readFn)
	c.rp = nil
	if err != nil {
		return 0, err // a deadline, or the connection closed
	}
	return c.rn, c.rerr
}

// rawRead is the callback of Read's raw read: a read, and on EAGAIN the
// flush, once, before the runtime waits for the socket.
func (c *h1Conn) rawRead(fd uintptr) bool {
	for {
		n, err := syscall.Read(int(fd), c.rp)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			if f := c.flushFirst; f != nil {
				c.flushFirst, c.flushed = nil, true
				f.Flush()
			}
			return false
		case err != nil:
			c.rerr = err
		case n == 0:
			c.rerr = io.EOF
		}
		c.rn = max(n, 0)
		return true
	}
}

func (c *h1Conn) Write(p []byte) (int, error) { return c.nc.Write(p) }

// send writes a request head and its held body in one write (writev).
func (c *h1Conn) send(head, body []byte) error {
	var err error
	switch {
	case len(body) == 0:
		_, err = c.nc.Write(head)
	case c.tcp != nil:
		c.bufs = append(c.vec[:0], head, body)
		_, err = c.bufs.WriteTo(c.tcp)
		c.vec = [2][]byte{}
	default:
		if _, err = c.nc.Write(head); err == nil {
			_, err = c.nc.Write(body)
		}
	}
	if err != nil {
		return sendError(err)
	}
	return nil
}

func (c *h1Conn) attach() {
	c.br = readerPool.Get().(*bufio.Reader)
	c.br.Reset(c)
	c.bw = writerPool.Get().(*bufio.Writer)
	c.bw.Reset(c)
}

func (c *h1Conn) detach() {
	if c.head != nil {
		h1.PutBuffer(c.head)
		c.head = nil
	}
	if c.br != nil {
		c.br.Reset(nil)
		readerPool.Put(c.br)
		c.br = nil
	}
	c.releaseWriter()
}

// releaseWriter gives the write buffer back as soon as the request is
// sent: a request spends most of its life waiting for the response, and
// holding 4 KiB for nothing meanwhile adds up over 1000 connections
// (memory at 1000 connections, README).
func (c *h1Conn) releaseWriter() {
	if c.bw != nil {
		c.bw.Reset(nil)
		writerPool.Put(c.bw)
		c.bw = nil
	}
}

// close closes the connection for good.
func (c *h1Conn) close() {
	c.nc.Close()
	c.detach()
	c.t.liveMu.Lock()
	delete(c.t.live, c)
	c.t.liveMu.Unlock()
}

// aLongTimeAgo is a deadline that interrupts any pending I/O at once.
var aLongTimeAgo = time.Unix(1, 0)

// get takes the warmest idle connection, or dials a new one when there is
// none or it has expired.
func (t *h1Transport) get(ctx context.Context) (*h1Conn, error) {
	t.mu.Lock()
	if n := len(t.idle); n > 0 {
		c := t.idle[n-1]
		t.idle[n-1] = nil
		t.idle = t.idle[:n-1]
		if c.expires.IsZero() {
			t.mu.Unlock()
			return c.reuse(), nil
		}
		now := time.Now()
		if now.Before(c.expires) {
			t.mu.Unlock()
			return c.reuse(), nil
		}
		// The warmest connection has expired, so the colder ones below it
		// most likely have too: rather than close them one by one here,
		// the request dials and the retire timer runs at once.
		if n > 1 {
			t.armLocked(now, now)
		}
		t.mu.Unlock()
		c.close()
		return t.dial(ctx)
	}
	t.mu.Unlock()
	return t.dial(ctx)
}

func (c *h1Conn) reuse() *h1Conn {
	c.reused = true
	c.attach()
	return c
}

// dial opens a new connection. serveH1 also calls it to replay a request:
// another idle connection might be as stale as the one that failed.
func (t *h1Transport) dial(ctx context.Context) (*h1Conn, error) {
	nc, err := t.dialContext(ctx, "tcp", t.addr)
	if err != nil {
		return nil, fmt.Errorf("dial upstream: %w", err)
	}
	c := &h1Conn{nc: nc, t: t}
	if tc, ok := nc.(*net.TCPConn); ok {
		c.tcp = tc
		c.raw, _ = tc.SyscallConn()
		c.readFn = c.rawRead
	}
	t.liveMu.Lock()
	t.live[c] = struct{}{}
	t.liveMu.Unlock()
	c.attach()
	return c, nil
}

// put returns a connection whose exchange completed cleanly to the pool.
func (t *h1Transport) put(c *h1Conn) {
	if c.br.Buffered() > 0 || c.broken.Load() {
		c.close() // bytes after the response: the framing cannot be trusted
		return
	}
	// A deadline left on an idle connection is harmless (nothing waits on
	// it) and the next request sets or clears it (setDeadline): not
	// clearing it here saves two runtime timer updates per request.
	c.detach()
	var now time.Time
	c.expires = time.Time{}
	if limit := t.idleLimit(c.keepAlive); limit > 0 {
		// The upstream's clock started when it finished writing the
		// response, a little earlier: idleLimit's margin covers that, and a
		// slow client that held the response much longer can still meet a
		// closed connection, which the replay in serveH1 is for.
		now = time.Now()
		c.expires = now.Add(limit)
	}
	t.mu.Lock()
	if t.closed || len(t.idle) >= t.maxIdle {
		t.mu.Unlock()
		c.close()
		return
	}
	t.idle = append(t.idle, c)
	// Once armed, the timer stays armed while connections are idle, and
	// retireIdle re-arms it: most puts only compare.
	if at := c.expires.Add(retireSlack); !c.expires.IsZero() && (t.retireAt.IsZero() || at.Before(t.retireAt)) {
		t.armLocked(at, now)
	}
	t.mu.Unlock()
}

// idleLimit is how long a connection may stay idle: the idle timeout, or
// less when the upstream's Keep-Alive timeout (keepAlive, 0 if none) says it
// will close the connection sooner. The pool closes it a quarter of that
// timeout (at most a second) before the upstream would. 0 means no limit.
func (t *h1Transport) idleLimit(keepAlive time.Duration) time.Duration {
	limit := t.idleTimeout
	if keepAlive > 0 {
		keepAlive -= min(keepAlive/4, time.Second)
		if limit == 0 || keepAlive < limit {
			limit = keepAlive
		}
	}
	return limit
}

// armLocked sets the retire timer to fire at at; t.mu is held.
func (t *h1Transport) armLocked(at, now time.Time) {
	t.retireAt = at
	if t.retire == nil {
		t.retire = time.AfterFunc(at.Sub(now), t.retireIdle)
		return
	}
	t.retire.Reset(at.Sub(now))
}

// retireIdle closes the idle connections that have expired and arms the
// timer again for the earliest of the others; with none left that expire,
// it stays unarmed until put arms it. The idle list keeps its order.
func (t *h1Transport) retireIdle() {
	now := time.Now()
	var expired []*h1Conn
	var next time.Time
	t.mu.Lock()
	kept := t.idle[:0]
	for _, c := range t.idle { // from the bottom, the coldest, up
		switch {
		case c.expires.IsZero():
			kept = append(kept, c)
		case !now.Before(c.expires):
			expired = append(expired, c)
		default:
			kept = append(kept, c)
			if next.IsZero() || c.expires.Before(next) {
				next = c.expires
			}
		}
	}
	clear(t.idle[len(kept):])
	t.idle = kept
	t.retireAt = time.Time{}
	if !next.IsZero() && !t.closed {
		t.armLocked(next.Add(retireSlack), now)
	}
	t.mu.Unlock()
	for _, c := range expired {
		c.close()
	}
}

// closeIdle closes the pool: its idle connections now, and the others as
// their requests end.
func (t *h1Transport) closeIdle() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	t.closed = true
	if t.retire != nil {
		t.retire.Stop()
		t.retireAt = time.Time{}
	}
	t.mu.Unlock()
	for _, c := range idle {
		c.close()
	}
	t.closeOnce.Do(func() { close(t.stopReap) })
}

// serveH1 proxies r over an HTTP/1.1 upstream connection. It returns an
// error only when nothing was written to w yet; a failure after the
// response started aborts it (see abort).
func (p *Proxy) serveH1(w http.ResponseWriter, r *http.Request, o *headers.Outbound) error {
	target := r.RequestURI
	if r.Method == http.MethodConnect || target == "" || (target[0] != '/' && target != "*") {
		// CONNECT and absolute-form targets are for forward proxies; an
		// origin's sidecar has no use for them.
		return fmt.Errorf("%w: target %q", errBadRequest, truncate(target))
	}
	if !httpguts.ValidHostHeader(o.Host) {
		return fmt.Errorf("%w: host %q", errBadRequest, truncate(o.Host))
	}
	ctx := r.Context()
	deadline := p.deadline(r)
	hasBody := r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0
	var body []byte
	if hasBody && r.ContentLength > 0 && r.ContentLength <= smallBody {
		buf := getBody(int(r.ContentLength))
		defer putBody(buf)
		body = (*buf)[:r.ContentLength]
		rc := http.NewResponseController(w)
		if !deadline.IsZero() {
			rc.SetReadDeadline(deadline) // a client that sends its body slowly is cut at --timeout
		}
		_, err := io.ReadFull(r.Body, body)
		if err != nil {
			// The deadline stays: net/http must not wait for the rest of
			// a body that did not come in time before it closes.
			return bodyError(err)
		}
		if !deadline.IsZero() {
			rc.SetReadDeadline(time.Time{})
		}
	}
	// A streamed body is read from the client as it is sent: once it went
	// out on a connection that failed, it cannot be sent again.
	stream := hasBody && body == nil

	for attempt := 0; ; attempt++ {
		var c *h1Conn
		var err error
		if attempt == 0 {
			c, err = p.h1.get(ctx)
		} else {
			c, err = p.h1.dial(ctx)
		}
		if err != nil {
			return err
		}
		c.watch(r)
		c.setDeadline(deadline)
		if p.start > 0 {
			c.setReadDeadline(earliest(deadline, p.start))
		}
		// The head is built in the write buffer's space (AvailableBuffer).
		head := appendHead(c.bw.AvailableBuffer(), r, o, target, r.ContentLength, hasBody, stream && r.ContentLength < 0)
		var bw *bodyWriter
		if stream {
			c.bw.Write(head)
			bw = startBody(w, c, r, deadline)
		} else {
			err = c.send(head, body)
			c.releaseWriter()
		}
		var rh respHead
		if err == nil {
			rh, err = c.readHead(w.Header(), r.Method, p.h1.maxHeader)
		}
		if err != nil {
			c.unwatch(r)
			// Read before bw.stop: net/http's HTTP/1 server cancels the
			// request's context when a body read fails, and stop's
			// interrupt is such a failure.
			gone := ctx.Err()
			werr := bw.stop(c)
			c.close()
			switch {
			case gone != nil:
				return gone
			case werr != nil && !isStale(err) && (errors.Is(werr, errClientGone) || errors.Is(werr, errBadRequest) || errors.Is(werr, errBodyTimeout)):
				// The client's body failed, which woke the response read.
				// Not when the upstream closed the connection before
				// responding: that came first, and the body writer's
				// timeout is only bw.stop's interrupt.
				return werr
			case attempt == 0 && c.reused && !stream && isStale(err):
				// The upstream closed an idle connection as we reused it
				// (the idle-close race): nothing of a response was read, and
				// the request is whole in hand (no body, or one held), so
				// it is sent again, once, on a new connection: get might
				// return another stale one. net/http's Transport replays
				// only idempotent methods (RFC 9110 section 9.2.2); queue
				// also replays a POST or PATCH whose body it holds, as its
				// HTTP/1.1 client always has: on a reused loopback
				// connection that closes before a single byte of response
				// this is nearly always the race, not an app that failed
				// halfway through the request, and a 502 for a request the
				// app never saw is the likelier harm.
				continue
			}
			return err
		}
		c.keepAlive = rh.KeepAlive
		if r.ProtoMajor != 1 {
			// Only queue's HTTP/1.1 engine writes the head before the
			// exchange ends; HTTP/2's HPACK encoder keeps field strings in
			// its table for the life of the connection. Its fields must
			// not point into c.head.
			ownStrings(w.Header())
		}
		if rh.Status == http.StatusSwitchingProtocols {
			bw.stop(c) // a streaming body writer must be done before the buffers go
			if !c.unwatch(r) {
				c.close()
				return ctx.Err()
			}
			if !o.WebSocket || stream {
				c.close()
				return fmt.Errorf("%w: unrequested 101", errBadResponse)
			}
			return p.tunnel(w, c, &rh)
		}
		if p.start > 0 {
			c.setReadDeadline(deadline) // the response started: back to the whole deadline
		}
		err = c.copyResponse(w, &rh, deadline, p.idle)
		clean := c.unwatch(r) && err == nil && !rh.Close
		if werr := bw.stop(c); werr != nil {
			clean = false
		}
		if clean {
			p.h1.put(c)
		} else {
			c.close()
		}
		switch {
		case err == nil:
		case errors.Is(err, errClientGone) || ctx.Err() != nil:
			// Nothing can reach the client any more; the request is over.
		default:
			abort()
		}
		return nil
	}
}

// bodyError classifies a failure to read the client's body: the client went
// away (its connection closed, reset or timed out: 499, nothing written) or
// sent a malformed body (bad chunk framing: 400).
func bodyError(err error) error {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		// --timeout passed while the client was still sending: a timeout
		// (504 before any response byte, StatusFor), and the connection
		// closes.
		return fmt.Errorf("%w: read body: %w", errBodyTimeout, err)
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.As(err, &ne):
		return fmt.Errorf("%w: read body: %w", errClientGone, err)
	}
	return fmt.Errorf("%w: read body: %w", errBadRequest, err)
}

// errBodyTimeout marks a request body that did not arrive within --timeout.
var errBodyTimeout = timeoutError{}

type timeoutError struct{}

func (timeoutError) Error() string   { return "request body timed out" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// isStale reports an error that a reused connection gives when the upstream
// closed it while idle: sending the request hit a reset or a broken pipe
// (sendError), or the first read of the response met EOF or a reset before
// any byte (readBlock). A reset after part of a response was read is not
// stale: the upstream saw the request.
func isStale(err error) bool { return errors.Is(err, errNothingRead) }

var errNothingRead = errors.New("upstream closed the connection before responding")

// sendError wraps a failure to write a request whose body is held. A reset
// or a broken pipe means the upstream had closed the connection, before it
// could send anything.
func sendError(err error) error {
	if errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
		return fmt.Errorf("%w: write request: %w", errNothingRead, err)
	}
	return fmt.Errorf("write request: %w", err)
}

// appendHead appends the request line and the rewritten header to b. It
// does not allocate while the head fits in b's capacity.
func appendHead(b []byte, r *http.Request, o *headers.Outbound, target string, n int64, hasBody, chunked bool) []byte {
	b = append(b, r.Method...)
	b = append(b, ' ')
	b = append(b, target...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, o.Host...)
	b = append(b, "\r\n"...)
	for k, vv := range r.Header {
		if !o.Forward(k) {
			continue
		}
		for _, v := range vv {
			b = append(b, k...)
			b = append(b, ": "...)
			b = append(b, v...)
			b = append(b, "\r\n"...)
		}
	}
	if o.TETrailers {
		b = append(b, "Te: trailers\r\n"...)
	}
	if o.WebSocket {
		b = append(b, "Connection: Upgrade\r\nUpgrade: websocket\r\n"...)
	}
	b = append(b, "X-Forwarded-For: "...)
	b = o.AppendXFF(b)
	b = append(b, "\r\nX-Forwarded-Proto: "...)
	b = append(b, o.Proto...)
	b = append(b, "\r\nX-Forwarded-Host: "...)
	b = append(b, o.ForwardedHost...)
	b = append(b, "\r\nForwarded: "...)
	b = o.AppendForwarded(b)
	b = append(b, "\r\n"...)
	switch {
	case chunked:
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
	case hasBody:
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, n, 10)
		b = append(b, "\r\n"...)
	case r.Method == http.MethodPost || r.Method == http.MethodPut || r.Method == http.MethodPatch:
		b = append(b, "Content-Length: 0\r\n"...)
	}
	return append(b, "\r\n"...)
}

// readHead reads response heads until a final one (or a 101) and adds its
// fields to h. Informational responses other than 101 are skipped.
func (c *h1Conn) readHead(h http.Header, method string, max int) (respHead, error) {
	for i := 0; ; i++ {
		b, err := c.readBlock(max, i == 0)
		if err != nil {
			return respHead{}, err
		}
		rh, err := parseResponse(b, h, &c.vals)
		if err != nil {
			return rh, err
		}
		if rh.Status >= 200 || rh.Status == http.StatusSwitchingProtocols {
			if method == http.MethodHead || rh.Status == http.StatusNoContent || rh.Status == http.StatusNotModified {
				rh.Chunked, rh.ContentLength = false, 0
			} else if !rh.Chunked && rh.ContentLength < 0 && rh.Status != http.StatusSwitchingProtocols {
				rh.Close = true // the body runs until the upstream closes
			}
			return rh, nil
		}
		if i == max1xx {
			return rh, fmt.Errorf("%w: too many 1xx responses", errBadResponse)
		}
		conn := h[headers.Connection] // queue's own "close", if any
		clear(h)
		if conn != nil {
			h[headers.Connection] = conn
		}
	}
}

// readBlock reads the next response head into c.head and returns it. The
// head is usually in the read buffer whole and is copied out at once; a
// head larger than the buffer is gathered line by line.
func (c *h1Conn) readBlock(max int, first bool) ([]byte, error) {
	br := c.br
	if _, err := br.Peek(1); err != nil {
		if first && (err == io.EOF || errors.Is(err, syscall.ECONNRESET)) {
			return nil, fmt.Errorf("%w: %w", errNothingRead, err)
		}
		return nil, fmt.Errorf("read response: %w", err)
	}
	for {
		buf, _ := br.Peek(br.Buffered())
		if n := h1.HeadEnd(buf); n > 0 {
			if n > max {
				return nil, fmt.Errorf("%w: head over %d bytes", errBadResponse, max)
			}
			b := c.headBuf(n)
			copy(b, buf)
			br.Discard(n)
			return b, nil
		}
		if br.Buffered() == br.Size() || br.Buffered() > max {
			break
		}
		if _, err := br.Peek(br.Buffered() + 1); err != nil {
			return nil, fmt.Errorf("read response head: %w", noEOF(err))
		}
	}
	bb := bytebufferpool.Get()
	defer bytebufferpool.Put(bb)
	lineStart := true
	for {
		line, err := br.ReadSlice('\n')
		bb.Write(line)
		if bb.Len() > max {
			return nil, fmt.Errorf("%w: head over %d bytes", errBadResponse, max)
		}
		switch {
		case err == bufio.ErrBufferFull:
			lineStart = false
			continue
		case err != nil:
			return nil, fmt.Errorf("read response head: %w", noEOF(err))
		}
		if lineStart && (len(line) == 1 || (len(line) == 2 && line[0] == '\r')) {
			b := c.headBuf(bb.Len())
			copy(b, bb.B)
			return b, nil
		}
		lineStart = true
	}
}

// headBuf returns c.head, taken or grown to n bytes.
func (c *h1Conn) headBuf(n int) []byte {
	if c.head == nil || cap(*c.head) < n {
		h1.PutBuffer(c.head)
		c.head = h1.GetBuffer(n)
	}
	return (*c.head)[:n]
}

// noEOF turns a clean EOF in the middle of a message into
// io.ErrUnexpectedEOF.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// copyResponse writes the status and streams the body to w. Errors wrap
// errClientGone when the client could not be written.
func (c *h1Conn) copyResponse(w http.ResponseWriter, rh *respHead, deadline time.Time, idle time.Duration) error {
	w.WriteHeader(rh.Status)
	f, _ := w.(http.Flusher)
	cp := copier{c: c, w: w, rw: w, f: f, dirty: true, deadline: deadline, idle: idle}
	defer cp.release()
	if err := cp.body(w, rh); err != nil {
		return err
	}
	// The response's fields point into c.head, which goes back to its
	// pool with the connection: they must be written now. For queue's
	// HTTP/1.1 engine this write is the one it would make on return (head
	// and body in one writev); net/http's HTTP/2 server copied the fields
	// at WriteHeader.
	if f != nil {
		f.Flush()
	}
	return nil
}

// body copies the response body as its framing says.
func (cp *copier) body(w http.ResponseWriter, rh *respHead) error {
	switch {
	case rh.Chunked:
		return cp.chunked(w.Header())
	case rh.ContentLength > 0:
		return cp.n(rh.ContentLength)
	case rh.ContentLength < 0 && rh.Close:
		return cp.untilEOF()
	}
	return nil
}

// copier moves a response body from the upstream's read buffer to the
// client. It flushes the client's response only when the next read would
// wait on the upstream, so a 1 KiB response goes out in the one write that
// net/http makes when the handler returns, and a stream (server-sent events,
// a long poll) goes out as the upstream writes it.
type copier struct {
	c     *h1Conn
	w     io.Writer
	f     http.Flusher
	dirty bool // written to w since the last flush

	deadline time.Time     // the whole request's, or zero
	idle     time.Duration // the most between two reads, or 0

	rw      http.ResponseWriter
	written int64   // body bytes written to the client
	armed   bool    // the client's write deadline is set
	buf     *[]byte // the copy buffer for large bodies, while held
}

// release gives back the copy buffer and clears the client's write
// deadline if it was armed.
func (cp *copier) release() {
	cp.c.flushFirst, cp.c.flushed = nil, false
	if cp.buf != nil {
		h1.PutBuffer(cp.buf)
		cp.buf = nil
	}
	if cp.armed {
		http.NewResponseController(cp.rw).SetWriteDeadline(time.Time{})
	}
}

// wrote counts body bytes and arms the client's write deadline once the
// response is large enough to block on a slow reader (lazyWriteDeadline):
// --timeout then cuts a client that reads slowly.
func (cp *copier) wrote(m int) {
	cp.written += int64(m)
	cp.dirty = true
	if !cp.armed && cp.written > lazyWriteDeadline && !cp.deadline.IsZero() {
		http.NewResponseController(cp.rw).SetWriteDeadline(cp.deadline)
		cp.armed = true
	}
}

// direct copies up to n bytes read straight from the connection into the
// copy buffer; the read buffer is empty. It flushes if the read waits, as
// fill does.
func (cp *copier) direct(n int64) (int, error) {
	if cp.idle > 0 {
		cp.c.setReadDeadline(earliest(cp.deadline, cp.idle))
	}
	if cp.buf == nil {
		cp.buf = h1.GetBuffer(copyBufSize)
	}
	b := *cp.buf
	if int64(len(b)) > n {
		b = b[:n]
	}
	cp.flushIfWaiting()
	m, rerr := cp.c.Read(b)
	cp.flushDone()
	if m > 0 {
		w, err := cp.w.Write(b[:m])
		cp.wrote(w)
		if err != nil {
			return w, fmt.Errorf("%w: %w", errClientGone, err)
		}
	}
	return m, rerr
}

func (cp *copier) fill() error {
	if cp.c.br.Buffered() > 0 {
		return nil
	}
	if cp.idle > 0 {
		cp.c.setReadDeadline(earliest(cp.deadline, cp.idle))
	}
	cp.flushIfWaiting()
	_, err := cp.c.br.Peek(1)
	cp.flushDone()
	return err
}

// flushIfWaiting has the next read flush what was written to the client
// if that read has to wait for the upstream (h1Conn.Read).
func (cp *copier) flushIfWaiting() {
	if cp.dirty && cp.f != nil {
		cp.c.flushFirst = cp.f
	}
}

// flushDone notes whether the read flushed.
func (cp *copier) flushDone() {
	if cp.c.flushed {
		cp.dirty = false
	}
	cp.c.flushFirst, cp.c.flushed = nil, false
}

// buffered writes up to n bytes that are already buffered.
func (cp *copier) buffered(n int64) (int, error) {
	br := cp.c.br
	if m := br.Buffered(); int64(m) < n {
		n = int64(m)
	}
	b, _ := br.Peek(int(n))
	m, err := cp.w.Write(b)
	br.Discard(m)
	cp.wrote(m)
	if err != nil {
		return m, fmt.Errorf("%w: %w", errClientGone, err)
	}
	return m, nil
}

func (cp *copier) n(n int64) error {
	for n > 0 {
		if n >= directRead && cp.c.br.Buffered() == 0 {
			m, err := cp.direct(n)
			n -= int64(m)
			if err != nil && (n > 0 || errors.Is(err, errClientGone)) {
				if errors.Is(err, errClientGone) {
					return err
				}
				return fmt.Errorf("read response body: %w", noEOF(err))
			}
			continue
		}
		if err := cp.fill(); err != nil {
			return fmt.Errorf("read response body: %w", noEOF(err))
		}
		m, err := cp.buffered(n)
		if err != nil {
			return err
		}
		n -= int64(m)
	}
	return nil
}

func (cp *copier) untilEOF() error {
	for {
		if cp.c.br.Buffered() == 0 {
			_, err := cp.direct(1 << 62)
			switch {
			case err == io.EOF:
				return nil
			case errors.Is(err, errClientGone):
				return err
			case err != nil:
				return fmt.Errorf("read response body: %w", err)
			}
			continue
		}
		if _, err := cp.buffered(int64(cp.c.br.Buffered())); err != nil {
			return err
		}
	}
}

// chunked decodes a chunked body (RFC 9112 section 7.1) and passes its
// trailers on through h with http.TrailerPrefix.
func (cp *copier) chunked(h http.Header) error {
	br := cp.c.br
	for {
		if err := cp.fill(); err != nil {
			return fmt.Errorf("read chunk: %w", noEOF(err))
		}
		line, err := readLine(br)
		if err != nil {
			return err
		}
		size, ok := h1.ParseChunkSize(line)
		if !ok {
			return fmt.Errorf("%w: chunk size", errBadResponse)
		}
		if size == 0 {
			return cp.trailers(h)
		}
		if err := cp.n(size); err != nil {
			return err
		}
		if err := cp.fill(); err != nil {
			return fmt.Errorf("read chunk: %w", noEOF(err))
		}
		if line, err := readLine(br); err != nil || len(line) != 0 {
			return fmt.Errorf("%w: chunk end", errBadResponse)
		}
	}
}

// readLine reads one line without its CRLF (or LF). Lines longer than the
// read buffer are refused.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		return nil, fmt.Errorf("%w: line too long", errBadResponse)
	}
	if err != nil {
		return nil, fmt.Errorf("read response body: %w", noEOF(err))
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

func (cp *copier) trailers(h http.Header) error {
	total := 0
	for {
		line, err := readLine(cp.c.br)
		if err != nil {
			return err
		}
		if len(line) == 0 {
			return nil
		}
		if total += len(line); total > maxHeaderBytes {
			return fmt.Errorf("%w: trailers too large", errBadResponse)
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			return fmt.Errorf("%w: trailer line", errBadResponse)
		}
		name, value := string(line[:colon]), trimOWS(string(line[colon+1:]))
		if !httpguts.ValidHeaderFieldName(name) || !httpguts.ValidHeaderFieldValue(value) {
			return fmt.Errorf("%w: trailer line", errBadResponse)
		}
		key := textproto.CanonicalMIMEHeaderKey(name)
		if forbiddenTrailer(key) {
			continue
		}
		h.Add(http.TrailerPrefix+key, value)
	}
}

// bodyWriter streams a request body whose size is unknown or too large to
// hold, on its own goroutine, so that the response can be read while the
// body is still being sent (a streaming upload, a bidirectional exchange)
// without either side waiting on the other.
type bodyWriter struct {
	done chan error
	rc   *http.ResponseController
	err  error
	over bool
}

func startBody(w http.ResponseWriter, c *h1Conn, r *http.Request, deadline time.Time) *bodyWriter {
	bw := &bodyWriter{done: make(chan error, 1), rc: http.NewResponseController(w)}
	// net/http's HTTP/1 server would otherwise discard the unread body as
	// soon as the response starts (see EnableFullDuplex). HTTP/2 is always
	// full duplex and reports ErrNotSupported, which is fine.
	bw.rc.EnableFullDuplex()
	go func() {
		if !deadline.IsZero() {
			bw.rc.SetReadDeadline(deadline) // a slow upload is cut at --timeout
		}
		err := c.writeBody(r)
		if !deadline.IsZero() && err == nil {
			// Before done: once the handler has returned, w is no longer
			// ours to touch (the stats wrapper is pooled).
			bw.rc.SetReadDeadline(time.Time{})
		}
		bw.done <- err
	}()
	return bw
}

// stop waits for the body writer. If it is still running (the response came
// first), it is interrupted: the client's body read is given a past
// deadline and the upstream connection, which will not be reused, too.
func (bw *bodyWriter) stop(c *h1Conn) error {
	if bw == nil || bw.over {
		if bw == nil {
			return nil
		}
		return bw.err
	}
	select {
	case bw.err = <-bw.done:
	default:
		bw.rc.SetReadDeadline(aLongTimeAgo)
		c.nc.SetDeadline(aLongTimeAgo)
		// The writer's own error, when it has one, says why (a malformed
		// body, a timeout); it may have woken the reader itself.
		if bw.err = <-bw.done; bw.err == nil {
			bw.err = errors.New("request body not sent whole")
		}
	}
	bw.over = true
	return bw.err
}

// writeBody sends the request body, chunked when its length is unknown,
// flushing each piece as it arrives from the client.
func (c *h1Conn) writeBody(r *http.Request) error {
	chunked := r.ContentLength < 0
	bufp := copyPool.Get().(*[]byte)
	defer copyPool.Put(bufp)
	buf := *bufp
	var sent int64
	for {
		n, rerr := r.Body.Read(buf)
		if n > 0 {
			sent += int64(n)
			if chunked {
				b := strconv.AppendInt(c.bw.AvailableBuffer(), int64(n), 16)
				c.bw.Write(append(b, "\r\n"...))
			}
			c.bw.Write(buf[:n])
			if chunked {
				c.bw.WriteString("\r\n")
			}
			if err := c.bw.Flush(); err != nil {
				return fmt.Errorf("write request body: %w", err)
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			c.nc.SetDeadline(aLongTimeAgo) // wake the response reader
			return bodyError(rerr)
		}
	}
	if !chunked {
		if sent != r.ContentLength {
			return fmt.Errorf("%w: body of %d bytes, want %d", errClientGone, sent, r.ContentLength)
		}
		return nil
	}
	c.bw.WriteString("0\r\n")
	for k, vv := range r.Trailer {
		if forbiddenTrailer(k) || !httpguts.ValidHeaderFieldName(k) {
			continue
		}
		for _, v := range vv {
			if httpguts.ValidHeaderFieldValue(v) {
				c.bw.WriteString(k + ": " + v + "\r\n")
			}
		}
	}
	c.bw.WriteString("\r\n")
	if err := c.bw.Flush(); err != nil {
		return fmt.Errorf("write request body: %w", err)
	}
	return nil
}
