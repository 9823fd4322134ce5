package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/queue-dev/queue/internal/clock"
	"github.com/queue-dev/queue/internal/engine"
	"github.com/queue-dev/queue/internal/netio"
	"github.com/queue-dev/queue/internal/pool"
)

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
	outage      *outage       // told of every connect that succeeds; nil: no retry window

	mu       sync.Mutex
	idle     []*h1Conn // LIFO: the most recently used connection is the warmest
	closed   bool
	retire   *time.Timer // runs retireIdle; created on first use
	retireAt time.Time   // when retire fires; zero while it is not armed
	// retireBefore is retireAt less retireSlack: a connection that expires
	// before it needs the timer moved earlier (put).
	retireBefore time.Time

	liveMu    sync.Mutex
	live      map[*h1Conn]struct{} // every open connection, for the reaper
	reaper    *clock.Busy          // ticks (reap) while exchanges are in flight
	reapConns []*h1Conn            // the reaper's snapshot, reused; guarded by the reaper's lock
}

func newH1Transport(addr string, dial time.Duration, maxIdle, maxHeader int, idleTimeout time.Duration) *h1Transport {
	t := &h1Transport{
		addr: addr,
		// No TCP keep-alive probes on the upstream's loopback connections:
		// the pool retires idle ones itself, and each dial saves four
		// system calls.
		dialer:      net.Dialer{Timeout: dial, KeepAlive: -1},
		maxIdle:     orDefault(maxIdle, 1024),
		maxHeader:   orDefault(maxHeader, maxHeaderBytes),
		idleTimeout: max(idleTimeout, 0),
		live:        map[*h1Conn]struct{}{},
	}
	t.reaper = clock.NewBusy(reapPeriod, t.reap)
	t.dialContext = t.dialer.DialContext
	return t
}

// reap interrupts the exchanges whose client went away. It is the tick of
// a timer armed only while an exchange is in flight (clock.Busy: watch and
// unwatch count them), so that a lone request leaves no tick behind to
// wake an idle sidecar reapPeriod later.
//
// One timer for the whole pool replaces a context.AfterFunc per request,
// which allocates on every request; a request pays two atomic stores and two adds instead, and a lock where the count
// touches zero. The price is that an upstream learns of a departed client
// up to reapPeriod (plus the serving engine's own watch period, h1.Server)
// later.
func (t *h1Transport) reap() {
	conns := t.reapConns[:0]
	t.liveMu.Lock()
	for c := range t.live {
		conns = append(conns, c)
	}
	t.liveMu.Unlock()
	for _, c := range conns {
		// The request is read only while c.req holds reaping in its
		// place: its exchange cannot end meanwhile (unwatch waits), so
		// the request, which the serving engine reuses for its next one
		// (a connection's, an HTTP/2 stream's), is still this exchange's.
		r := c.req.Load()
		if r == nil || r == reaping || !c.req.CompareAndSwap(r, reaping) {
			continue
		}
		if r.Context().Err() != nil {
			c.req.Store(nil)
			c.interrupt()
		} else {
			c.req.Store(r)
		}
	}
	clear(conns)
	t.reapConns = conns[:0]
}

// h1Conn is one upstream connection. Its buffers are attached while it
// carries a request and returned to the pools when it goes idle.
type h1Conn struct {
	nc       net.Conn
	br       *bufio.Reader
	bw       *bufio.Writer
	reused   bool
	t        *h1Transport
	req      atomic.Pointer[http.Request] // the request being carried, for the reaper (reaping while it reads it)
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
	firstFn    func(uintptr) bool // c.readFirst, bound once
	peekFn     func(uintptr)      // c.peek, bound once
	peeked     bool               // peek's verdict: nothing to read, the connection open
	firstFD    uintptr            // while readFirst fills br: the socket Read reads
	inFirst    bool               // readFirst is filling br (Read reads firstFD)
	preErr     error              // waitResponse's error, for Read
	rp         []byte
	rn         int
	rerr       error
	out        [2][]byte    // exchange's request, sent by readFirst
	sendErr    error        // readFirst's error sending out
	waited     bool         // exchange waited for the response: readBlock need not
	flushFirst http.Flusher // flushed if a read has to wait; then flushed is set
	flushed    bool
	cp         copier          // the response body's copy (copyResponse)
	vw         netio.VecWriter // writes to tcp (raw sendmsg, internal/netio)
	vec        [3][]byte
	chunkHead  [18]byte // a streamed body's chunk-size line (sendPiece)

	// head and vals hold a response head and its value slices when the
	// client's response is not one of queue's engines' (no keeper): the
	// fields are then copied (ownStrings) before the connection goes back,
	// and head is given back with it (detach).
	head *[]byte
	vals []string
	// keeper is the client response's engine.Keeper while an exchange
	// for one of queue's engines runs (readHead, own), else nil.
	keeper engine.Keeper
}

// watch tells the reaper that c carries r; the first exchange in flight
// arms its timer.
func (c *h1Conn) watch(r *http.Request) {
	c.req.Store(r)
	c.t.reaper.Begin()
}

// unwatch ends the watch; every watch has one. False means the reaper
// interrupted the exchange (or is about to): the connection must not be
// reused.
func (c *h1Conn) unwatch(r *http.Request) bool {
	ok := c.req.CompareAndSwap(r, nil)
	for !ok && c.req.Load() == reaping {
		// The reaper is reading r: a few instructions. Wait for its
		// verdict, so that r is not reused under it.
		runtime.Gosched()
		ok = c.req.CompareAndSwap(r, nil)
	}
	c.t.reaper.End()
	return ok
}

// reaping stands in c.req for the request while the reaper reads it.
var reaping = new(http.Request)

func (c *h1Conn) interrupt() {
	c.broken.Store(true)
	c.nc.SetDeadline(aLongTimeAgo)
}

// setDeadline sets the connection's read and write deadlines unless they
// are set to t already: deadlines are rounded (Proxy.deadlineAt), so
// consecutive requests on a connection mostly share one and skip the
// runtime timer update. It never undoes an interrupt.
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
// otherwise hand a request body to io.Copy and its 32 KiB allocation. On
// TCP both are raw system calls (internal/netio says why).
//
// Read flushes c.flushFirst, when set, only if the read would wait: bytes
// already there are read first, so that a response arriving in pieces
// goes to the client in few writes, and a stream still goes out as soon as
// the upstream pauses.
func (c *h1Conn) Read(p []byte) (int, error) {
	if c.inFirst {
		// br's fill from within readFirst: the raw read is already
		// running, and holds the socket.
		n, again, err := netio.ReadFD(c.firstFD, p)
		if again {
			return 0, errAgain
		}
		return n, err
	}
	if err := c.preErr; err != nil {
		c.preErr = nil
		return 0, err
	}
	if c.raw == nil {
		if c.flushFirst != nil {
			c.flushFirst.Flush()
			c.flushFirst, c.flushed = nil, true
		}
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
	n, again, err := netio.ReadFD(fd, c.rp)
	if again {
		if f := c.flushFirst; f != nil {
			c.flushFirst, c.flushed = nil, true
			f.Flush()
		}
		return false
	}
	c.rn, c.rerr = n, err
	return true
}

func (c *h1Conn) Write(p []byte) (int, error) {
	if c.tcp != nil {
		return c.vw.Write(p)
	}
	return c.nc.Write(p)
}

// send writes a request head and its held body in one write (sendmsg).
func (c *h1Conn) send(head, body []byte) error {
	var err error
	switch {
	case c.tcp != nil:
		c.vec = [3][]byte{head, body}
		_, err = c.vw.Writev(c.vec[:2])
		c.vec = [3][]byte{}
	case len(body) == 0:
		_, err = c.nc.Write(head)
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

// attach takes the write buffer for an exchange. The read buffer comes
// later (readBlock): a request spends most of its life waiting for the
// upstream's answer, and holds no read buffer meanwhile.
func (c *h1Conn) attach() {
	c.bw = writerPool.Get().(*bufio.Writer)
	c.bw.Reset(c)
}

// attachReader takes the read buffer.
func (c *h1Conn) attachReader() {
	c.br = readerPool.Get().(*bufio.Reader)
	c.br.Reset(c)
}

// errAgain is Read's answer, within readFirst, when the socket has
// nothing yet.
var errAgain = errors.New("proxy: nothing to read yet")

// waitResponse waits for the first bytes of a response and reads them
// into the read buffer (br), taken only once the socket has some, as the
// serving engine does for a request: the wait holds no buffer. An error is
// kept for Read to return (c.preErr), so that the head's reader sees it
// where it would have seen it from the socket.
func (c *h1Conn) waitResponse() {
	if c.raw == nil {
		return
	}
	c.rerr = nil
	if err := c.raw.Read(c.firstFn); err != nil {
		c.rerr = err // a deadline, or the connection closed
	}
	if c.rerr != nil {
		c.preErr = c.rerr
		c.releaseReader()
	}
}

// exchange sends a request head and its held body (send) and waits for
// the response's first bytes (waitResponse), and gives the write buffer
// back in between. On TCP the request is written from within the wait,
// after the runtime began to watch the socket for the response: readiness
// that comes from then on is kept, so no read is tried before the socket
// has something to read. (A read first, as net.Conn.Read does, finds
// nothing nearly every time: a system call per request for EAGAIN.)
func (c *h1Conn) exchange(head, body []byte) error {
	if c.raw == nil {
		err := c.send(head, body)
		c.releaseWriter()
		return err
	}
	c.out, c.sendErr = [2][]byte{head, body}, nil
	c.waitResponse()
	c.waited = true
	if c.out[0] != nil { // the wait failed before readFirst ran
		c.out = [2][]byte{}
		c.releaseWriter()
	}
	err := c.sendErr
	c.sendErr = nil
	return err
}

// readFirst is waitResponse's raw read callback. Called first with
// exchange's request pending, it sends it and waits. Once the socket is
// readable it takes the read buffer and fills it straight from the socket
// (Read, with inFirst set), so the response is read once, into the buffer
// it is parsed and copied from; nothing there yet gives the buffer back.
func (c *h1Conn) readFirst(fd uintptr) bool {
	if c.out[0] != nil {
		err := c.send(c.out[0], c.out[1])
		c.out = [2][]byte{}
		c.releaseWriter()
		if err != nil {
			c.sendErr = err
			return true
		}
		return false
	}
	if c.br == nil {
		c.attachReader()
	}
	c.inFirst, c.firstFD = true, fd
	_, err := c.br.Peek(1)
	c.inFirst = false
	switch {
	case err == errAgain:
		c.releaseReader()
		return false
	case err != nil:
		c.rerr = err // bufio has handed it over: Read returns it again (preErr)
	}
	return true
}

// releaseReader gives the read buffer back.
func (c *h1Conn) releaseReader() {
	if c.br != nil {
		c.br.Reset(nil)
		readerPool.Put(c.br)
		c.br = nil
	}
}

func (c *h1Conn) detach() {
	c.keeper = nil
	if c.head != nil {
		pool.Put(c.head)
		c.head = nil
	}
	c.releaseReader()
	c.preErr = nil
	c.releaseWriter()
}

// releaseWriter gives the write buffer back as soon as the request is
// sent: a request spends most of its life waiting for the response, and
// holding 4 KiB for nothing meanwhile adds up over 1000 connections
// (memory at 1000 connections, docs/performance.md).
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
// none or it has expired by now, the time as the caller last read it.
//
// With check set, a connection whose close from the upstream has arrived
// already (open) is closed and the next one taken: serveH1 sets it for a
// request it may not send twice (mayReplay), which such a connection would
// fail with 502. It costs that request a system call per connection
// tried; a replayable request, which the replay covers, pays nothing.
func (t *h1Transport) get(ctx context.Context, now time.Time, check bool) (*h1Conn, error) {
	for {
		t.mu.Lock()
		n := len(t.idle)
		if n == 0 {
			break
		}
		c := t.idle[n-1]
		t.idle[n-1] = nil
		t.idle = t.idle[:n-1]
		if !c.expires.IsZero() && !now.Before(c.expires) {
			// The warmest connection has expired, so the colder ones below
			// it most likely have too: rather than close them one by one
			// here, the request dials and the retire timer runs at once.
			if n > 1 {
				t.armLocked(now, now)
			}
			t.mu.Unlock()
			c.close()
			return t.dial(ctx)
		}
		t.mu.Unlock()
		if check && !c.open() {
			c.close()
			continue
		}
		return c.reuse(), nil
	}
	t.mu.Unlock()
	return t.dial(ctx)
}

// open reports whether an idle connection is still open as far as its
// socket knows: neither the upstream's FIN nor a reset has arrived, nor any
// byte (an idle connection has none to read). One non-blocking peek
// (recv with MSG_PEEK), about a microsecond, through Control rather than
// Read, which would refuse to run past the read deadline a request left on
// the connection. A connection that is not TCP (tests' pipes) counts as
// open.
func (c *h1Conn) open() bool {
	if c.raw == nil {
		return true
	}
	c.peeked = false
	c.raw.Control(c.peekFn)
	return c.peeked
}

// peek is open's callback.
func (c *h1Conn) peek(fd uintptr) {
	var b [1]byte
	_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	c.peeked = err == syscall.EAGAIN
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
	t.outage.up()
	c := &h1Conn{nc: nc, t: t}
	if tc, ok := nc.(*net.TCPConn); ok {
		c.tcp = tc
		c.raw, _ = tc.SyscallConn()
		c.readFn = c.rawRead
		c.firstFn = c.readFirst
		c.peekFn = c.peek
		c.vw.Reset(c.raw)
	}
	t.liveMu.Lock()
	t.live[c] = struct{}{}
	t.liveMu.Unlock()
	c.attach()
	return c, nil
}

// put returns a connection whose exchange completed cleanly to the pool.
func (t *h1Transport) put(c *h1Conn) {
	if c.br != nil && c.br.Buffered() > 0 || c.broken.Load() {
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
	if !c.expires.IsZero() && (t.retireAt.IsZero() || c.expires.Before(t.retireBefore)) {
		t.armLocked(c.expires.Add(retireSlack), now)
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
	t.retireAt, t.retireBefore = at, at.Add(-retireSlack)
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
	t.reaper.Stop()
}
