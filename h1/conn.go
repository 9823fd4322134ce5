package h1

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/queue-dev/queue/internal/clock"
	"github.com/queue-dev/queue/internal/gostack"
	"github.com/queue-dev/queue/internal/httpsem"
	"github.com/queue-dev/queue/internal/netio"
	"github.com/queue-dev/queue/internal/panics"
	"github.com/queue-dev/queue/internal/peer"
	"github.com/queue-dev/queue/internal/pool"
)

// Connection states, for Shutdown: only an idle connection may be closed
// under a client's feet.
const (
	stateIdle   int32 = iota // waiting for the first byte of a request
	stateActive              // reading a head, or a request in a handler
	stateClosed              // closed by Shutdown while idle
	stateGone                // hijacked or handed to H2
)

// conn is one client connection. Everything in it is touched by the
// connection's goroutine only, but for the fields marked otherwise; while a
// handler runs, the request body may be read on another goroutine (the
// proxy's body writer), which then owns the read side (rbuf, r, w, body).
type conn struct {
	s         *Server
	nc        net.Conn        // what requests are read from and responses written to
	tcp       *net.TCPConn    // nc's socket when nc is plain TCP, for raw writes; else nil
	raw       syscall.RawConn // the TCP socket (under TLS too): idle reads and peeks
	closer    *countedConn    // the accepted connection; closing it releases MaxConns
	tls       *tls.ConnectionState
	tlsConfig *tls.Config // terminate TLS first, with this
	remote    string

	// The read side. Unread bytes are (*rbuf)[r:w]. rbuf is nil while the
	// connection idles with nothing buffered.
	rbuf *[]byte
	r, w int
	rdl  time.Time // the read deadline in force

	headDeadline bool // the header timeout bounds the head being read
	glitches     int  // requests refused by queue itself, less those served since (MaxGlitches)

	head *[]byte // the current request's head; its strings point here
	req  *http.Request
	// *reqState holds what serves a request (the parsed head, the body
	// reader, the response, the raw writer), made at the first complete
	// head (init) with the request, so that a connection that never sends
	// one (a stalled or hostile client) does not carry it.
	*reqState

	ctx    context.Context
	cancel context.CancelFunc

	state     atomic.Int32  // stateIdle...; Shutdown reads it
	watch     atomic.Bool   // a handler runs and the socket is not read: the watcher peeks it
	busy      bool          // the request is counted in the watcher's ticks (Server.begin); the conn's goroutine's
	unwatched bool          // the handler gave up the watch for this request (Unwatch); likewise
	peekRound uint32        // the watcher's round this connection was last peeked at in (maxPeeks); the watcher's alone
	since     atomic.Uint32 // Server.ticks when the request began

	rawRead    func(fd uintptr) bool // c.readRaw, bound once
	stepFn     func(fd uintptr) bool // c.step, bound once
	sess       session               // the read session in progress (session.go)
	inSession  atomic.Bool           // a session's read runs: Hijack must refuse
	directRead func(fd uintptr) bool // c.readDirectRaw, bound once
	dp         []byte                // readDirect's destination
	rn         int
	rerr       error
	peekBuf    [1]byte
	peekFn     func(fd uintptr) // c.peek, bound at the first peerGone
	gone       bool             // peek's answer

	// linger is set when the connection is to close while the client may
	// still be sending: a request refused, a body left unread (close).
	linger bool
}

// reqState is the part of a connection that serves its requests
// (conn.reqState).
type reqState struct {
	q    request
	body body
	res  response
	vw   netio.VecWriter // writes to tcp, when set
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{s: s, closer: &countedConn{Conn: nc, s: s}}
	c.nc = c.closer
	if tc, ok := nc.(*net.TCPConn); ok {
		c.tcp = tc
		c.raw, _ = tc.SyscallConn()
	}
	c.remote = nc.RemoteAddr().String()
	c.rawRead = c.readRaw
	c.stepFn = c.step
	c.directRead = c.readDirectRaw
	return c
}

// countedConn releases its MaxConns place when closed, however often.
type countedConn struct {
	net.Conn
	s      *Server
	closed atomic.Bool
}

func (c *countedConn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.s.open.Add(-1)
	}
	return c.Conn.Close()
}

// NetConn returns the connection counted.
func (c *countedConn) NetConn() net.Conn { return c.Conn }

// abort ends the connection at once, under a handler's feet: the socket
// is shut down, which the client sees as the connection closing and which
// fails the connection's reads and writes, and the descriptor is closed as
// soon as no read holds it. A read session holds it while it serves a
// request (session.go), and net.Conn.Close would wait for that.
func (c *conn) abort() {
	if c.raw != nil {
		c.raw.Control(func(fd uintptr) { syscall.Shutdown(int(fd), syscall.SHUT_RDWR) })
	}
	go c.nc.Close()
}

func (c *conn) closeConn() {
	c.closer.Close()
	c.releaseRead()
}

func (c *conn) releaseRead() {
	pool.Put(c.rbuf)
	c.rbuf, c.r, c.w = nil, 0, 0
}

// serve runs the connection until it closes, is hijacked or is handed
// over.
func (c *conn) serve() {
	defer c.s.remove(c)
	if c.tlsConfig != nil {
		if ok := c.handshake(); !ok || c.state.Load() == stateGone {
			if !ok {
				c.closeConn()
			}
			return
		}
	}
	defer func() {
		if c.cancel != nil {
			c.cancel()
		}
	}()

	if c.tcp != nil {
		c.serveSessions() // session.go
	} else {
		first := true
		for {
			n, err := c.readHead(first)
			if err != nil {
				c.headError(err)
				break
			}
			first = false
			if !c.serveRequest(n) {
				break
			}
		}
	}
	if c.state.Load() != stateGone {
		if c.linger || c.rbuf != nil && c.r < c.w {
			c.lingerClose()
		}
		c.closeConn()
	}
}

// lingerTime and lingerBytes bound how long, and how much of, what a
// client still sends on a closing connection is read and dropped
// (lingerClose): the last response has reached a client on loopback or a
// pod network long before either runs out, and a client cannot make
// queue read on by sending more, fast or slow. Without the byte bound a
// client that sends one chunk-size line of 64 MiB of extension characters
// had its 400 at the first buffer and then all 64 MiB read within the
// second (TestLingerBounded); net/http reads at most 256 KiB of a body its
// handler left unread.
const (
	lingerTime  = time.Second
	lingerBytes = 256 << 10
)

// lingerClose is the first half of closing a connection whose client may
// still be sending (a refused request with more bytes behind it, a body
// left unread): a socket closed with bytes unread answers them with a
// reset, and a client whose kernel takes the reset before its program has
// read the response loses the response too (RFC 9112 section 9.6: close
// in stages; nginx's lingering_close, net/http's closeWriteAndWait). So
// the writing side is shut down first (the client reads the response, then
// end of file), and what the client still sends is read and dropped until
// it closes, for lingerTime or lingerBytes at most; closeConn follows (a
// client still sending then gets a reset). Server.Shutdown and Close end it
// sooner: the connection is idle, serving nothing more.
func (c *conn) lingerClose() {
	c.releaseRead()
	tc, ok := c.closer.Conn.(*net.TCPConn) // under TLS too: the socket itself
	if !ok || !c.state.CompareAndSwap(stateActive, stateIdle) {
		return
	}
	if t, ok := c.nc.(*tls.Conn); ok {
		t.CloseWrite() // close_notify: the response was whole
	}
	if tc.CloseWrite() != nil {
		return
	}
	tc.SetReadDeadline(time.Now().Add(lingerTime))
	buf := pool.Get(bufSize)
	defer pool.Put(buf)
	for read := 0; read < lingerBytes; {
		n, err := tc.Read(*buf)
		if err != nil {
			return
		}
		read += n
	}
}

// headError answers a head that could not be read: a 400, 414 or 431 for
// one the engine refuses, nothing when the connection ended or the client
// does not speak HTTP (errNotHTTP), and the
// connection to H2 when it began with the HTTP/2 preface.
func (c *conn) headError(err error) {
	var e *Error
	switch {
	case errors.Is(err, errHandoff):
		c.handoff()
	case errors.As(err, &e) && e.Status != 0:
		c.writeError(e.Status)
	}
}

var (
	errHandoff = errors.New("HTTP/2 preface")
	errStop    = errors.New("connection done")
)

// handshake completes TLS within the header timeout and reports whether it
// succeeded. A connection that negotiated h2 is handed to H2 (its state is
// then stateGone).
func (c *conn) handshake() bool {
	tc := tls.Server(c.closer, c.tlsConfig)
	dl := time.Now().Add(c.s.headerTimeout())
	c.closer.SetDeadline(dl)
	if err := tc.Handshake(); err != nil {
		c.s.logger().Debug("TLS handshake error", "remote_addr", c.remote, "err", err)
		return false
	}
	c.closer.SetDeadline(time.Time{})
	st := tc.ConnectionState()
	if st.NegotiatedProtocol == "h2" {
		c.state.Store(stateGone)
		if c.s.H2 == nil {
			tc.Close()
			return true
		}
		c.s.H2(tc)
		return true
	}
	c.tls = &st
	c.nc = tc
	c.tcp = nil // reads and writes go through TLS; raw stays for peeks
	return true
}

// handoff gives the connection, with what was read of it, to H2.
func (c *conn) handoff() {
	c.state.Store(stateGone)
	if c.s.H2 == nil {
		c.closeConn()
		return
	}
	b := append([]byte(nil), (*c.rbuf)[c.r:c.w]...)
	c.releaseRead()
	c.s.H2(&replayConn{Conn: c.nc, buf: b})
}

// replayConn reads buf before the connection itself.
type replayConn struct {
	net.Conn
	buf []byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.buf) > 0 {
		n := copy(p, c.buf)
		c.buf = c.buf[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// NetConn returns the connection a replayed connection reads after its
// replayed bytes: a *tls.Conn for a TLS connection.
func (c *replayConn) NetConn() net.Conn { return c.Conn }

// Pending reports the replayed bytes not read yet.
func (c *replayConn) Pending() int { return len(c.buf) }

// setReadDeadline sets the read deadline unless it is in force already.
func (c *conn) setReadDeadline(t time.Time) {
	if !t.Equal(c.rdl) {
		c.rdl = t
		c.nc.SetReadDeadline(t)
	}
}

// deadlineIn is clock.Deadline(time.Now(), d).
func deadlineIn(d time.Duration) time.Time { return clock.Deadline(time.Now(), d) }

// readHead reads until the buffer holds a whole request head and returns
// its length. The first bytes of a connection decide: the HTTP/2 preface
// goes to H2 (errHandoff), a byte that cannot start a request line is a
// 400 at once.
func (c *conn) readHead(first bool) (int, error) {
	if c.r == c.w {
		// Nothing buffered: wait for the next request for as long as the
		// idle (or, on a new connection, the header) timeout allows.
		c.idle(first)
		err := c.fill()
		if !c.state.CompareAndSwap(stateIdle, stateActive) {
			return 0, errStop // Shutdown closed it
		}
		if err != nil {
			return 0, errStop
		}
	} else {
		c.state.Store(stateActive)
	}
	c.headDeadline = false
	for {
		if n, err := c.headStep(first); n > 0 || err != nil {
			return n, err
		}
		if err := c.fill(); err != nil {
			return 0, errStop
		}
	}
}

// idle marks the connection idle, waiting for a request, for as long as the
// idle (or, on a new connection, the header) timeout allows.
func (c *conn) idle(first bool) {
	c.state.Store(stateIdle)
	if first {
		c.setReadDeadline(deadlineIn(c.s.headerTimeout()))
	} else {
		c.setReadDeadline(deadlineIn(c.s.idleTimeout()))
	}
}

// headStep looks at the buffered bytes, at least one: it returns the length
// of a whole head at their start, or an error, or 0 when more must be read,
// for which it has made room and armed the header deadline.
func (c *conn) headStep(first bool) (int, error) {
	max := c.s.Limits.head()
	b := (*c.rbuf)[c.r:c.w]
	if first && isPrefaceStart(b) {
		if len(b) >= len(preface) {
			return 0, errHandoff
		}
	} else if n := headEnd(b); n > 0 {
		if n > max {
			return 0, errHeadTooLarge
		}
		return n, nil
	} else if !startsRequest(b) {
		if notHTTP(b) {
			return 0, errNotHTTP
		}
		return 0, errRequestLine
	} else if len(b) > max {
		return 0, errHeadTooLarge
	}
	if !c.headDeadline {
		// Part of a head came: the rest must follow within the header
		// timeout (slowloris).
		c.headDeadline = true
		if t := deadlineIn(c.s.headerTimeout()); c.rdl.IsZero() || t.Before(c.rdl) {
			c.setReadDeadline(t)
		}
	}
	if c.w == len(*c.rbuf) && c.r == 0 {
		if len(*c.rbuf) >= max {
			return 0, errHeadTooLarge
		}
		c.grow(max)
	} else if c.tcp != nil {
		c.shrink()
	}
	return 0, nil
}

// shrink moves a part of a head whose rest has not come into the smallest
// buffer with room for more: a client that stalls mid-head (slowloris)
// pins that, 512 bytes for a typical half head, not the read buffer
// (readSize). A head that goes on coming grows it again (grow).
func (c *conn) shrink() {
	m := c.w - c.r
	size := pool.Size(m + 1)
	if size == 0 || len(*c.rbuf) <= size {
		return
	}
	nb := pool.Get(size)
	c.w = copy(*nb, (*c.rbuf)[c.r:c.w])
	c.r = 0
	pool.Put(c.rbuf)
	c.rbuf = nb
}

// startsRequest reports whether b, an incomplete head, may be the start of
// a request, after the empty lines a server ignores (RFC 9112 section
// 2.2): as far as it goes, a method (of at most maxMethod bytes), SP, a
// target, SP and "HTTP/" DIGIT "." DIGIT CRLF, so that bytes that cannot
// start a request line are refused as soon as they come, not when the
// header timeout ends. The fields after a complete request line are judged
// once the head is complete.
func startsRequest(b []byte) bool {
	for len(b) >= 2 && b[0] == '\r' && b[1] == '\n' {
		b = b[2:]
	}
	if len(b) == 1 && b[0] == '\r' {
		return true // an empty line's LF may follow
	}
	i := 0
	for i < len(b) && httpsem.IsTchar(b[i]) {
		i++
	}
	if i > maxMethod {
		return false
	}
	if i == len(b) {
		return true
	}
	if i == 0 || b[i] != ' ' {
		return false
	}
	i++
	j := i
	for i < len(b) && b[i] > ' ' && b[i] < 0x7f {
		i++
	}
	if i == len(b) {
		return true
	}
	if i == j || b[i] != ' ' {
		return false
	}
	for k, c := range b[i+1:] {
		if k == len(versionPattern) {
			break // the request line is complete
		}
		if p := versionPattern[k]; p == 'D' && !isDigit(c) || p != 'D' && c != p {
			return false
		}
	}
	return true
}

// notHTTP reports whether b, which startsRequest refused, has a request
// line's method and target but a version that is not HTTP's (errNotHTTP).
func notHTTP(b []byte) bool {
	for len(b) >= 2 && b[0] == '\r' && b[1] == '\n' {
		b = b[2:]
	}
	sp1 := indexByte(b, ' ')
	if sp1 <= 0 {
		return false
	}
	sp2 := indexByte(b[sp1+1:], ' ')
	if sp2 <= 0 {
		return false
	}
	return !mayBeHTTPVersion(b[sp1+1+sp2+1:])
}

// mayBeHTTPVersion reports whether v, a request line's version or the
// start of one, begins as HTTP's does ("HTTP/", in any case: a version in
// the wrong case is HTTP, malformed). Past "HTTP/" it looks no further.
func mayBeHTTPVersion(v []byte) bool {
	n := min(len(v), 5)
	return strings.EqualFold(str(v[:n]), "HTTP/"[:n])
}

// versionPattern is the end of a request line; D stands for a digit.
const versionPattern = "HTTP/D.D\r\n"

// grow moves the buffered bytes into a larger buffer, up to max.
func (c *conn) grow(max int) {
	nb := pool.Get(min(2*len(*c.rbuf), max+1))
	copy(*nb, (*c.rbuf)[c.r:c.w])
	c.w -= c.r
	c.r = 0
	pool.Put(c.rbuf)
	c.rbuf = nb
}

// fill reads once into the buffer's free space, taking a buffer if the
// connection holds none. It returns io.EOF when the peer closed.
func (c *conn) fill() error {
	c.compact()
	if c.tcp != nil {
		// Wait for readability before a buffer is taken: an idle
		// keep-alive connection holds no buffer at all.
		c.rn, c.rerr = 0, nil
		if err := c.raw.Read(c.rawRead); err != nil {
			return err
		}
		c.w += c.rn
		return c.rerr
	}
	if c.rbuf == nil {
		c.rbuf = pool.Get(bufSize)
	}
	n, err := c.nc.Read((*c.rbuf)[c.w:])
	c.w += n
	if n > 0 {
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}

// compact moves the unread bytes to the buffer's start when the buffer is
// used up or has room only there.
func (c *conn) compact() {
	if c.rbuf != nil && c.r > 0 && (c.r == c.w || c.w == len(*c.rbuf)) {
		copy(*c.rbuf, (*c.rbuf)[c.r:c.w])
		c.w -= c.r
		c.r = 0
	}
}

// readRaw reads once into the buffer's free space, from within a raw
// read's callback (fill's, or a session's step): it takes a buffer only once
// the socket has bytes, gives it back if it had none after all, and leaves
// the result in rn and rerr.
func (c *conn) readRaw(fd uintptr) bool {
	if c.rbuf == nil {
		c.rbuf = pool.Get(readSize)
	}
	n, again, err := netio.ReadFD(fd, (*c.rbuf)[c.w:])
	if again {
		if c.r == c.w {
			c.releaseRead()
		}
		return false // wait for readability, then call again
	}
	c.rn, c.rerr = n, err
	return true
}

// peerGone reports whether the client closed or reset its connection
// (netio.PeerGone).
func (c *conn) peerGone() bool {
	if c.raw == nil {
		return false
	}
	if c.peekFn == nil {
		c.peekFn = c.peek // made on first use: most connections never need it
	}
	c.raw.Control(c.peekFn)
	return c.gone
}

// peek is peerGone's Control callback, bound once (peekFn).
func (c *conn) peek(fd uintptr) { c.gone = netio.PeerGone(fd, &c.peekBuf) }

// write writes b to the client: a raw write on plain TCP (internal/netio).
func (c *conn) write(b []byte) error {
	if c.tcp != nil {
		_, err := c.vw.Write(b)
		return err
	}
	_, err := c.nc.Write(b)
	return err
}

// readDirect reads into p from the connection itself, bypassing the
// buffer, which is empty.
func (c *conn) readDirect(p []byte) (int, error) {
	if c.tcp != nil && len(p) > 0 {
		c.dp, c.rn, c.rerr = p, 0, nil
		err := c.raw.Read(c.directRead)
		c.dp = nil
		if err != nil {
			return 0, err
		}
		return c.rn, c.rerr
	}
	n, err := c.nc.Read(p)
	if n == 0 && err == nil {
		err = io.ErrNoProgress
	}
	return n, err
}

// readDirectRaw is readDirect's raw read callback.
func (c *conn) readDirectRaw(fd uintptr) bool {
	n, again, err := netio.ReadFD(fd, c.dp)
	if again {
		return false
	}
	c.rn, c.rerr = n, err
	return true
}

// init makes the request state the connection reuses, at its first
// request: a connection that never sends a whole head (a port scan, a
// stalled client) costs no more than its buffer and goroutine.
func (c *conn) init() {
	// Serving a request takes the stack to 8 KiB: grow it in one copy
	// now, with few frames on it, not in two deep in the request. Not at
	// accept: a connection that never sends a whole head keeps the small
	// stack it started with.
	gostack.Grow()
	c.reqState = new(reqState)
	if c.tcp != nil {
		c.vw.Reset(c.raw)
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	if ap, err := netip.ParseAddrPort(c.remote); err == nil {
		// Parsed once for the connection's life: see peer.From.
		c.ctx = peer.With(c.ctx, ap)
	}
	c.req = (&http.Request{}).WithContext(c.ctx)
	c.req.Header = http.Header{}
	c.req.RemoteAddr = c.remote
	c.req.TLS = c.tls
	c.q.r, c.q.url = c.req, &url.URL{}
	c.body.c = c
	c.res.c = c
	c.res.hdr = http.Header{}
}

// serveRequest parses the head of n bytes at the start of the buffer, runs
// the handler and finishes the response. It reports whether the
// connection may carry another request.
func (c *conn) serveRequest(n int) bool {
	return c.begin(n) && c.run()
}

// begin parses the head of n bytes at the start of the buffer into the
// request that run serves. A malformed head is answered here, and begin
// reports false: the connection closes.
func (c *conn) begin(n int) bool {
	if c.req == nil {
		c.init()
	}
	c.head = pool.Get(n)
	head := (*c.head)[:n]
	copy(head, (*c.rbuf)[c.r:c.r+n])
	c.r += n
	if c.r == c.w && c.tcp != nil {
		c.releaseRead() // nothing pipelined: hold no buffer while the handler runs
	}
	r := c.req
	clear(r.Header)
	r.Trailer = nil
	r.Host = ""
	if e := c.q.parse(head, c.s.Limits); e != nil {
		pool.Put(c.head)
		c.head = nil
		if e.Status != 0 {
			c.writeError(e.Status)
		}
		return false
	}
	h := &c.q.head
	c.body.reset(h)
	if h.Framing == NoBody {
		r.Body = http.NoBody
	} else {
		r.Body = &c.body
		if h.Framing == Chunked {
			r.Trailer = c.body.trailerMap()
		}
		// The deadline that bounded the head (header or idle timeout)
		// does not bound the body: an upload takes as long as the
		// handler lets it. A body already buffered is read without the
		// socket, and keeps the deadline (two timer updates fewer).
		if !c.body.whole() {
			c.setReadDeadline(time.Time{})
		}
	}
	c.res.reset(r, h)
	return true
}

// unwatch takes the request out of the watcher's care: it is no longer
// peeked at, and no longer keeps the watcher ticking. It runs on the
// connection's goroutine (the handler's, for Unwatch).
func (c *conn) unwatch() {
	c.watch.Store(false)
	if c.busy {
		c.busy = false
		c.s.end()
	}
}

// run serves the request begin parsed: it runs the handler and finishes
// the response, and reports whether the connection may carry another
// request.
func (c *conn) run() bool {
	defer func() {
		pool.Put(c.head)
		c.head = nil
		c.res.release() // after an abort or a hijack, finish did not run
	}()
	h := &c.q.head
	c.since.Store(c.s.ticks.Load())
	c.watch.Store(h.Framing == NoBody)
	c.busy, c.unwatched = true, false
	c.s.begin()
	aborted := c.runHandler()
	c.unwatch()

	if c.state.Load() == stateGone {
		return false // hijacked: the connection is the handler's
	}
	if aborted {
		return false
	}
	keep := c.res.finish()
	consumed := c.body.consume()
	if !consumed {
		keep = false // the rest of the body is not worth reading
	}
	if !c.res.refused && c.glitches > 0 {
		c.glitches-- // a request served takes one glitch back
	}
	// The client may be sending on (lingerClose) when its body was left
	// unread, or when queue closes after a 4xx or 5xx it chose to close
	// on. Not when the client asked for the close itself with a request
	// read whole: it sends nothing after such a request (RFC 9112 section
	// 9.6), and a kubelet probe answered 503 closes at once.
	if !keep && (!consumed || c.res.status >= 400 && !h.Close) {
		c.linger = true
	}
	return keep && c.ctx.Err() == nil && !c.s.shutdown.Load()
}

// runHandler calls the handler and reports whether it panicked. A panic
// with http.ErrAbortHandler is the handler's way to cut the response; any
// other is logged. Either way the connection closes.
func (c *conn) runHandler() (aborted bool) {
	defer func() {
		if v := recover(); v != nil {
			aborted = true
			if v != http.ErrAbortHandler {
				panics.Log(c.s.logger(), c.remote, v)
			}
		}
	}()
	c.s.Handler.ServeHTTP(&c.res, c.req)
	return false
}

// writeError answers a request the engine refuses itself, and the
// connection closes after it, lingering (lingerClose): every caller
// returns to close it, so that nothing after a refused request is read as
// another. A 4xx is a glitch (Server.Glitches): one that ends its
// connection by itself.
func (c *conn) writeError(code int) {
	c.linger = true
	if code >= 400 && code < 500 {
		c.s.glitches.Add(1)
	}
	text := http.StatusText(code)
	b := pool.Get(256)
	defer pool.Put(b)
	out := append((*b)[:0], "HTTP/1.1 "...)
	out = appendStatus(out, code)
	out = append(out, "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: "...)
	out = appendInt(out, int64(len(text)))
	out = append(out, "\r\n\r\n"...)
	out = append(out, text...)
	c.nc.SetWriteDeadline(time.Now().Add(time.Second))
	c.nc.Write(out)
}
