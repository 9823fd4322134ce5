package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/queue-dev/queue/h1"
	"github.com/queue-dev/queue/headers"
	"github.com/queue-dev/queue/internal/engine"
	"github.com/queue-dev/queue/internal/pool"
)

const (
	// maxHeaderBytes bounds a response head and its trailers.
	maxHeaderBytes = 64 << 10
	// readBufSize is the upstream read buffer: it holds a response head and
	// a small body, which are written to the client straight out of it
	// (Peek/Discard). A larger body is read into a pooled 64 KiB copy buffer
	// held only while it is copied, so a request in flight pins 4 KiB of
	// read buffer (memory at 1000 connections, docs/performance.md), and a 64 KiB
	// response takes two reads and one write to the client. (A first read
	// of 64 KiB saves a read on a 16 KiB response, but splits a 64 KiB one,
	// whose first read finds only part of it, into two writes, which costs
	// more CPU a request.)
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
// (BenchmarkProxy, memory per connection in ../bench). Byte buffers come
// from internal/pool; the bufio readers and writers, whose buffers bufio
// makes itself, are pooled whole here.
var (
	readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readBufSize) }}
	writerPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, writeBufSize) }}
)

// serveH1 proxies r over an HTTP/1.1 upstream connection. It returns an
// error only when nothing was written to w yet; a failure after the
// response started aborts it (see abort). It runs in three steps: the
// request is prepared once (prepareH1), sent and its response head read
// (sendH1), again on a new connection when the idle-close race allows,
// and the response passed on (finishH1).
func (p *Proxy) serveH1(w http.ResponseWriter, r *http.Request, o *headers.Outbound) error {
	var q h1Request
	err := p.prepareH1(&q, w, r, o)
	defer pool.Put(q.buf) // nil when the body was not read into one
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		retry, err := p.sendH1(&q, w, o, attempt)
		switch {
		case retry:
			continue
		case err != nil:
			return err
		}
		return p.finishH1(&q, w, o)
	}
}

// h1Request is a request as serveH1 prepared it, the same for every
// attempt. The rewrite of its header (headers.Outbound) is not in it but
// passed beside it: it lives on ServeHTTP's stack, and what is stored in
// an h1Request is taken to leak (its body is handed to the connection's
// writes).
type h1Request struct {
	r        *http.Request
	target   string    // origin-form or "*" (upstreamTarget)
	now      time.Time // when the request was ready: the pool's expiry check
	deadline time.Time // --timeout's, or zero
	hasBody  bool
	// body is the whole request body in hand, lent by the engine
	// (engine.HeldBody) or read into buf: it can be sent again. nil with
	// hasBody: the body is streamed (stream).
	body   []byte
	buf    *[]byte
	stream bool          // the body is read from the client as it is sent
	keep   engine.Keeper // the client response's, or nil

	// The attempt that got a response head (sendH1), for finishH1: its
	// connection, its streaming body writer (nil unless stream) and the
	// head. Kept here rather than returned, so that the attempt's
	// outcome is not copied out of sendH1 and into finishH1.
	c  *h1Conn
	bw *bodyWriter
	rh respHead
}

// prepareH1 checks r's target and Host, takes its deadline and holds its
// body when it is small enough to hold (smallBody), so that it can be
// sent again.
func (p *Proxy) prepareH1(q *h1Request, w http.ResponseWriter, r *http.Request, o *headers.Outbound) error {
	target, err := upstreamTarget(r, o)
	if err != nil {
		return err
	}
	q.r, q.target = r, target
	q.now = time.Now() // one clock read for the deadline and the pool's expiry check
	q.deadline = p.deadlineAt(r, q.now)
	// ContentLength first: a bodyless request (most) skips the interface
	// comparisons.
	q.hasBody = r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody
	if q.hasBody && r.ContentLength > 0 {
		if hb, ok := r.Body.(engine.HeldBody); ok {
			q.body = hb.Held() // it came whole with the head: no copy
		}
	}
	if q.body == nil && q.hasBody && r.ContentLength > 0 && r.ContentLength <= smallBody {
		q.buf = pool.Get(int(r.ContentLength))
		q.body = (*q.buf)[:r.ContentLength]
		rc := http.NewResponseController(w)
		if !q.deadline.IsZero() {
			rc.SetReadDeadline(q.deadline) // a client that sends its body slowly is cut at --timeout
		}
		if _, err := io.ReadFull(r.Body, q.body); err != nil {
			// The deadline stays: the serving engine must not wait for
			// the rest of a body that did not come in time before it
			// closes.
			return bodyError(err)
		}
		if !q.deadline.IsZero() {
			rc.SetReadDeadline(time.Time{})
		}
		q.now = time.Now() // the body may have taken a while: the pool's expiry check wants the time
	}
	// A streamed body is read from the client as it is sent: once it went
	// out on a connection that failed, it cannot be sent again.
	q.stream = q.hasBody && q.body == nil
	q.keep = keeperOf(w)
	return nil
}

// framing returns how the request head declares q's body.
func (q *h1Request) framing() framing {
	return framing{length: q.r.ContentLength, body: q.hasBody, chunked: q.stream && q.r.ContentLength < 0}
}

// sendH1 makes one attempt at q: a connection (pooled on the first attempt,
// new on the next), the request sent, the response head read into w's
// header. On success the connection (q.c) is watched and carries the
// response (q.rh its head; q.bw, a streaming body writer, is running when
// the body streams). On failure the connection is closed, and retry
// reports that the request may be sent again: the upstream closed an idle
// connection as it was reused.
func (p *Proxy) sendH1(q *h1Request, w http.ResponseWriter, o *headers.Outbound, attempt int) (retry bool, err error) {
	r := q.r
	var c *h1Conn
	var bw *bodyWriter
	ctx := r.Context()
	if attempt == 0 {
		// A request that cannot be sent twice takes no pooled
		// connection the upstream has closed already (get's check).
		c, err = p.h1.get(ctx, q.now, q.stream || !mayReplay(r, 1))
	} else {
		c, err = p.h1.dial(ctx)
	}
	if err != nil {
		// A refused connect reached nothing: it is tried again, within
		// --upstream-retry-window (reconnect).
		err = p.reconnect(ctx, q.deadline, err, func() (err error) {
			c, err = p.h1.dial(ctx)
			return err
		})
		if err != nil {
			return false, err
		}
	}
	c.watch(r)
	c.keeper = q.keep
	c.setDeadline(q.deadline)
	if p.start > 0 {
		c.setReadDeadline(earliest(q.deadline, p.start))
	}
	// The head is built in the write buffer's space (AvailableBuffer).
	var cache *[]byte
	if q.keep != nil {
		cache = q.keep.ConnCache()
	}
	head := appendHead(c.bw.AvailableBuffer(), r, o, q.target, q.framing(), cache)
	if q.stream {
		c.bw.Write(head)
		bw = startBody(w, c, r, q.deadline)
	} else {
		err = c.exchange(head, q.body)
	}
	if err == nil {
		q.rh, err = c.readHead(w.Header(), r.Method, p.h1.maxHeader)
	}
	if err == nil {
		q.c, q.bw = c, bw
		return false, nil
	}
	c.unwatch(r)
	// Read before bw.stop: stop's interrupt fails the body's read, and a
	// server may cancel the request's context when a body read fails
	// (net/http's HTTP/1 server does), which would then read as a client
	// gone.
	gone := ctx.Err()
	werr := bw.stop(c)
	c.close()
	switch {
	case gone != nil:
		return false, gone
	case werr != nil && !isStale(err) && (errors.Is(werr, errClientGone) || errors.Is(werr, errBadRequest) || errors.Is(werr, errBodyTimeout)):
		// The client's body failed, which woke the response read. Not
		// when the upstream closed the connection before responding:
		// that came first, and the body writer's timeout is only
		// bw.stop's interrupt.
		return false, werr
	case attempt == 0 && c.reused && !q.stream && isStale(err) && mayReplay(r, 1):
		// The upstream closed an idle connection as we reused it (the
		// idle-close race): nothing of a response was read, and the
		// request is whole in hand (no body, or one held), so an
		// idempotent one is sent again, once (mayReplay), on a new
		// connection: get might return another stale one. A POST or PATCH
		// gets 502: the upstream may have read it before it closed, and
		// applying it twice is the worse harm. get's check spares it the
		// commoner case, a connection whose close had arrived before the
		// request.
		return true, err
	}
	return false, err
}

// finishH1 passes on the response whose head sendH1 read on q.c: a 101
// to the tunnel, else the body to w; then the connection goes back to the
// pool when the exchange ended cleanly. A failure once the response
// started aborts it.
func (p *Proxy) finishH1(q *h1Request, w http.ResponseWriter, o *headers.Outbound) error {
	r, c, bw, rh := q.r, q.c, q.bw, &q.rh
	ctx := r.Context()
	c.keepAlive = rh.KeepAlive
	if c.keeper == nil {
		// Not one of queue's engines: the fields must not point into
		// c.head, which goes back with the connection, and HTTP/2's
		// HPACK encoder keeps field strings in its table for the life of
		// the connection.
		ownStrings(w.Header())
	}
	if rh.Status == http.StatusSwitchingProtocols {
		bw.stop(c) // a streaming body writer must be done before the buffers go
		if !c.unwatch(r) {
			c.close()
			return ctx.Err()
		}
		if !o.WebSocket || q.stream {
			c.close()
			return fmt.Errorf("%w: unrequested 101", errBadResponse)
		}
		return p.tunnel(w, c, rh)
	}
	if p.start > 0 {
		c.setReadDeadline(q.deadline) // the response started: back to the whole deadline
	}
	err := c.copyResponse(w, rh, q.deadline, p.idle)
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

// framing is how a request head declares its body (RFC 9112 section 6).
type framing struct {
	length  int64 // the body's Content-Length, when it has one
	body    bool  // the request has a body
	chunked bool  // the body is streamed with no length: Transfer-Encoding: chunked
}

// appendHead appends the request line and the rewritten header to b,
// the body declared as f says. It does not allocate while the head fits in
// b's capacity. cache, when not nil, is the client connection's
// (engine.Keeper's ConnCache): see appendForwarding.
func appendHead(b []byte, r *http.Request, o *headers.Outbound, target string, f framing, cache *[]byte) []byte {
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
	b = appendForwarding(b, o, cache)
	switch {
	case f.chunked:
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
	case f.body:
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, f.length, 10)
		b = append(b, "\r\n"...)
	case r.Method == http.MethodPost || r.Method == http.MethodPut || r.Method == http.MethodPatch:
		b = append(b, "Content-Length: 0\r\n"...)
	}
	return append(b, "\r\n"...)
}

// appendForwarding appends the forwarding fields: X-Forwarded-For,
// -Proto, -Host and Forwarded. On one client connection they depend only on
// Host when the request keeps none of its own (Outbound.KeepsFields), so
// the connection's cache holds the last ones built, after the Host they
// were built for (two bytes of length, then the Host): a keep-alive
// connection builds them once, as long as its Host stays the same.
func appendForwarding(b []byte, o *headers.Outbound, cache *[]byte) []byte {
	cacheable := cache != nil && !o.KeepsFields() && len(o.Host) <= maxCachedHost
	if cacheable {
		if c := *cache; len(c) > 2 {
			if n := int(c[0])<<8 | int(c[1]); n+2 <= len(c) && string(c[2:2+n]) == o.Host {
				return append(b, c[2+n:]...)
			}
		}
	}
	start := len(b)
	b = append(b, "X-Forwarded-For: "...)
	b = o.AppendXFF(b)
	b = append(b, "\r\nX-Forwarded-Proto: "...)
	b = append(b, o.Proto...)
	b = append(b, "\r\nX-Forwarded-Host: "...)
	b = append(b, o.ForwardedHost...)
	b = append(b, "\r\nForwarded: "...)
	b = o.AppendForwarded(b)
	b = append(b, "\r\n"...)
	if cacheable {
		c := append((*cache)[:0], byte(len(o.Host)>>8), byte(len(o.Host)))
		c = append(c, o.Host...)
		*cache = append(c, b[start:]...)
	}
	return b
}

// maxCachedHost bounds the Host whose forwarding fields a connection
// caches: the cache is a few hundred bytes for as long as the connection
// lives.
const maxCachedHost = 255

// readHead reads response heads until a final one (or a 101). Informational
// responses other than 101 are skipped. For one of queue's engines
// (c.keeper, engine.Keeper) the final head is copied into the response's
// keep buffer and its fields handed over in place (engine.ResponseHead,
// KeepHead), so that the engine writes them out without a header map; for
// another writer, or a head that needs it (h1.ParseResponseFields), they
// are added to h.
func (c *h1Conn) readHead(h http.Header, method string, max int) (respHead, error) {
	for i := 0; ; i++ {
		b, err := c.readBlock(max, i == 0)
		if err != nil {
			return respHead{}, err
		}
		var (
			rh       respHead
			head     *engine.ResponseHead
			asFields bool
		)
		if c.keeper != nil && !is101(b) {
			kb := c.keeper.KeepBuffer(len(b))
			copy(kb, b)
			head = c.keeper.KeepHead()
			head.Reset()
			rh, asFields, err = parseResponseFields(kb, &head.Fields)
			if err != nil {
				return rh, err
			}
			if !asFields {
				head.Reset() // b goes by the map: own copies it again
			}
		}
		if !asFields {
			vals := &c.vals
			if c.keeper != nil {
				vals = c.keeper.KeepValues() // the head is written after the exchange
			}
			b = c.own(b)
			rh, err = parseResponse(b, h, vals)
			if err != nil {
				return rh, err
			}
		}
		if rh.Status >= 200 || rh.Status == http.StatusSwitchingProtocols {
			if asFields {
				head.ContentLength, head.Date = rh.ContentLength, rh.Date
				head.Status = rh.Status // handed over
			}
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
		if asFields {
			continue
		}
		conn := h[headers.Connection] // queue's own "close", if any
		clear(h)
		if conn != nil {
			h[headers.Connection] = conn
		}
	}
}

// is101 reports whether the response head b is a 101, whose fields the
// tunnel writes from the map.
func is101(b []byte) bool { return len(b) > 12 && string(b[9:12]) == "101" }

// readBlock reads the next response head and returns it, valid until the
// next read of the connection. The head is usually in the read buffer
// whole; a head larger than the buffer is gathered line by line into
// c.head.
func (c *h1Conn) readBlock(max int, first bool) ([]byte, error) {
	if c.br == nil && !c.waited {
		c.waitResponse()
	}
	if c.br == nil {
		c.attachReader() // not TCP, or the wait failed: reads go to the connection
	}
	c.waited = false
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
			br.Discard(n) // the bytes stay in place until the next read
			return buf[:n], nil
		}
		if br.Buffered() == br.Size() || br.Buffered() > max {
			break
		}
		if _, err := br.Peek(br.Buffered() + 1); err != nil {
			return nil, fmt.Errorf("read response head: %w", noEOF(err))
		}
	}
	acc := pool.Get(min(max, pool.Max))
	defer pool.Put(acc)
	bb := (*acc)[:0] // grows past the pooled buffer only for a limit over pool.Max
	lineStart := true
	for {
		line, err := br.ReadSlice('\n')
		bb = append(bb, line...)
		if len(bb) > max {
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
			c.head = growBuf(c.head, len(bb))
			b := (*c.head)[:len(bb)]
			copy(b, bb)
			return b, nil
		}
		lineStart = true
	}
}

// own copies the head b where a map's fields may point into it until the
// response is written: the client response's keep buffer (engine.Keeper,
// queue's engines, which write the head after the handler returns), else
// c.head, which goes back with the connection.
func (c *h1Conn) own(b []byte) []byte {
	var dst []byte
	if c.keeper != nil {
		dst = c.keeper.KeepBuffer(len(b))
	} else {
		if c.head != nil && &(*c.head)[:1][0] == &b[0] {
			return b // gathered there by readBlock
		}
		c.head = growBuf(c.head, len(b))
		dst = (*c.head)[:len(b)]
	}
	copy(dst, b)
	return dst
}

// growBuf returns b, or a pooled buffer of at least n bytes in its place.
func growBuf(b *[]byte, n int) *[]byte {
	if b == nil || cap(*b) < n {
		pool.Put(b)
		b = pool.Get(n)
	}
	return b
}

// noEOF turns a clean EOF in the middle of a message into
// io.ErrUnexpectedEOF.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// keeperOf finds w's engine.Keeper through the layers' wrappers, or nil. It is
// engine.As for a keeper, written out: it runs on every request, and a type
// assertion to a type parameter looks its method table up in the runtime's
// itab table each time (about 140 instructions a request), where one to a
// named interface is cached at its call site.
func keeperOf(w http.ResponseWriter) engine.Keeper {
	for {
		if k, ok := w.(engine.Keeper); ok {
			return k
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return nil
		}
		w = u.Unwrap()
	}
}
