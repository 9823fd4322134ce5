package proxy

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/queue-dev/queue/headers"
	"github.com/queue-dev/queue/internal/hpackw"
	"github.com/queue-dev/queue/internal/pool"
	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2cStream is one request's stream on an upstream connection: the
// connection keeps the objects and reuses them (reserve, release), with
// their buffers and channels. Its handler's goroutine encodes and sends
// the request and reads the response; the read loop fills in what the
// upstream sends; a request body that streams has a goroutine of its own
// (pump). Everything but the channels and the handler's own buffers is
// under the connection's mutex.
type h2cStream struct {
	c        *h2cConn
	wake     chan struct{} // the handler: something came, or the stream failed
	bodyWake chan struct{} // the body's sender: room, or the stream ended
	bodyDone chan error    // the body's sender returned
	block    []byte        // the handler's: the request's header block
	lower    []byte        // the handler's: a field name lowercased
	scratch  []byte        // the handler's: a forwarding field's value
	out      recvBuf       // the handler's: the bytes it took from in

	id            uint32
	queued        bool // in the read loop's wake list
	status        int  // the response's, once its head is in
	fields        []hpack.HeaderField
	trailers      []hpack.HeaderField
	gotTrailers   bool
	in            recvBuf // DATA received and not taken yet
	padding       int64   // padding received, given back with the next WINDOW_UPDATE
	recvUnacked   int64   // taken and not given back yet
	contentLength int64
	ended         bool // END_STREAM came
	sentEnd       bool // END_STREAM went
	rstSent       bool
	rstRecv       bool
	refused       bool // the upstream did not process it (REFUSED_STREAM, GOAWAY)
	rstCode       http2.ErrCode
	timedOut      bool
	stopBody      bool  // the handler is done: the body's sender stops
	failure       error // why the stream failed, when queue failed it
	sendWindow    int64
	recvWindow    int64
	due           time.Time // the handler's wait ends by then (tick), or zero
	bodyRead      atomic.Bool
}

// reset makes s ready for the next request; under the connection's mutex.
func (s *h2cStream) reset() {
	clear(s.fields)
	clear(s.trailers)
	s.in.free()
	s.out.free()
	*s = h2cStream{
		c: s.c, wake: s.wake, bodyWake: s.bodyWake, bodyDone: s.bodyDone,
		block: s.block[:0], lower: s.lower[:0], scratch: s.scratch[:0],
		fields: s.fields[:0], trailers: s.trailers[:0],
	}
	select {
	case <-s.wake:
	default:
	}
	select {
	case <-s.bodyWake:
	default:
	}
}

// recvBuf holds received DATA in a pooled buffer: (*p)[:n].
type recvBuf struct {
	p *[]byte
	n int
}

func (b *recvBuf) append(d []byte) {
	if b.p == nil {
		b.p = pool.Get(max(len(d), 4<<10))
	}
	if b.n+len(d) > len(*b.p) {
		np := pool.Get(max(b.n+len(d), 2*len(*b.p)))
		copy(*np, (*b.p)[:b.n])
		pool.Put(b.p)
		b.p = np
	}
	b.n += copy((*b.p)[b.n:], d)
}

func (b *recvBuf) bytes() []byte { return (*b.p)[:b.n] }

func (b *recvBuf) free() {
	pool.Put(b.p)
	*b = recvBuf{}
}

// errRefusedStream is a stream the upstream did not process: it may be
// sent again (RFC 9113 section 8.7), under mayReplay's rule.
var errRefusedStream = errors.New("the upstream refused the stream")

// encodeRequest encodes q's head for HTTP/2 into s.block: the pseudo
// fields, then what appendHead writes for HTTP/1.1, names lowercased,
// with no Host (:authority is) and no hop-by-hop field. It reports the
// head's size as SETTINGS_MAX_HEADER_LIST_SIZE counts it.
func (s *h2cStream) encodeRequest(q *h1Request, o *headers.Outbound) int64 {
	r := q.r
	b := s.block[:0]
	size := int64(0)
	field := func(name, value string) {
		b = hpackw.AppendField(b, name, value)
		size += int64(len(name) + len(value) + 32)
	}
	field(":method", r.Method)
	field(":scheme", "http")
	if r.Method != http.MethodConnect {
		field(":authority", o.Host)
	}
	field(":path", q.target)
	for k, vv := range r.Header {
		if !o.Forward(k) {
			continue
		}
		name := lowerName(&s.lower, k)
		for _, v := range vv {
			if validFieldValue(v) {
				field(name, v)
			}
		}
	}
	if o.TETrailers {
		field("te", "trailers")
	}
	if len(r.Trailer) > 0 && r.Header["Trailer"] == nil {
		// An HTTP/1.1 server takes the declaration out of the header
		// (net/http moves it to Request.Trailer); an HTTP/2 upstream may
		// keep only declared trailers (net/http's server does).
		var names []byte
		for k := range r.Trailer {
			if !forbiddenTrailer(k) {
				if len(names) > 0 {
					names = append(names, ", "...)
				}
				names = append(names, k...)
			}
		}
		if len(names) > 0 {
			field("trailer", string(names))
		}
	}
	var cache *[]byte
	if q.keep != nil {
		cache = q.keep.ConnCache()
	}
	b, size = appendForwardingHPACK(b, size, o, cache, &s.scratch)
	switch {
	case q.hasBody && r.ContentLength >= 0:
		var d [20]byte
		field("content-length", string(strconv.AppendInt(d[:0], r.ContentLength, 10)))
	case !q.hasBody && (r.Method == http.MethodPost || r.Method == http.MethodPut || r.Method == http.MethodPatch):
		field("content-length", "0")
	}
	s.block = b
	return size
}

// lowerName returns k lowercased, in *buf's storage (valid until the
// next call) when k has uppercase.
func lowerName(buf *[]byte, k string) string {
	for i := 0; i < len(k); i++ {
		if c := k[i]; 'A' <= c && c <= 'Z' {
			dst := append((*buf)[:0], k...)
			for j := i; j < len(dst); j++ {
				if c := dst[j]; 'A' <= c && c <= 'Z' {
					dst[j] = c + 'a' - 'A'
				}
			}
			*buf = dst
			return unsafeString(dst)
		}
	}
	return k
}

// validFieldValue reports a value HTTP/2 carries: no CR, LF or NUL and no
// whitespace at either end (RFC 9113 section 8.2.1).
func validFieldValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c == '\r' || c == '\n' || c == 0 {
			return false
		}
	}
	n := len(v)
	return n == 0 || v[0] != ' ' && v[0] != '\t' && v[n-1] != ' ' && v[n-1] != '\t'
}

// appendForwardingHPACK is appendForwarding for HTTP/2: the forwarding
// fields HPACK-encoded, cached on the client connection the same way
// (after a tag byte, so that an HTTP/1.1 cache is never taken for one).
func appendForwardingHPACK(b []byte, size int64, o *headers.Outbound, cache, scratch *[]byte) ([]byte, int64) {
	cacheable := cache != nil && !o.KeepsFields() && len(o.Host) <= maxCachedHost
	if cacheable {
		if c := *cache; len(c) > 7 && c[0] == 'H' {
			n := int(c[1])<<8 | int(c[2])
			if n+7 <= len(c) && string(c[7:7+n]) == o.Host {
				sz := int64(c[3])<<24 | int64(c[4])<<16 | int64(c[5])<<8 | int64(c[6])
				return append(b, c[7+n:]...), size + sz
			}
		}
	}
	start := len(b)
	v := o.AppendXFF((*scratch)[:0])
	b = hpackw.AppendField(b, "x-forwarded-for", unsafeString(v))
	sz := int64(len("x-forwarded-for") + len(v) + 32)
	b = hpackw.AppendField(b, "x-forwarded-proto", o.Proto)
	sz += int64(len("x-forwarded-proto") + len(o.Proto) + 32)
	b = hpackw.AppendField(b, "x-forwarded-host", o.ForwardedHost)
	sz += int64(len("x-forwarded-host") + len(o.ForwardedHost) + 32)
	*scratch = v
	v = o.AppendForwarded((*scratch)[:0])
	b = hpackw.AppendField(b, "forwarded", unsafeString(v))
	sz += int64(len("forwarded") + len(v) + 32)
	*scratch = v
	if cacheable && sz < 1<<31 {
		c := append((*cache)[:0], 'H', byte(len(o.Host)>>8), byte(len(o.Host)), byte(sz>>24), byte(sz>>16), byte(sz>>8), byte(sz))
		c = append(c, o.Host...)
		*cache = append(c, b[start:]...)
	}
	return b, size + sz
}

// open sends the request's head, and a held body with it when the
// windows take it whole: the stream gets its id and goes on the wire in
// the order of the ids (RFC 9113 section 5.1.1), under the mutex. It
// reports whether the body is left for pump.
func (s *h2cStream) open(q *h1Request, size int64) (pump bool, err error) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil || c.goingAway {
		return false, errRefusedStream // nothing went out: another connection takes it
	}
	if c.maxList > 0 && size > c.maxList {
		return false, fmt.Errorf("%w: request head of %d bytes over the upstream's limit of %d", errBadRequest, size, c.maxList)
	}
	s.id = c.nextID
	c.nextID += 2
	c.streams[s.id] = s
	switch {
	case !q.hasBody:
		c.queueHeaders(s.id, s.block, true)
		s.sentEnd = true
	case q.body != nil && int64(len(q.body)) <= min(s.sendWindow, c.sendWindow) && len(c.wq) < h2cMaxQueued:
		c.queueHeaders(s.id, s.block, false)
		c.queueData(s.id, q.body, true)
		s.sendWindow -= int64(len(q.body))
		c.sendWindow -= int64(len(q.body))
		s.sentEnd = true
	default:
		c.queueHeaders(s.id, s.block, false)
		pump = true
	}
	c.kickLocked()
	return pump, nil
}

// sendData sends p as DATA within the windows and the queue's bound,
// waiting for room; end ends the stream. It fails once the stream or the
// connection did, or the handler stopped the body.
func (s *h2cStream) sendData(p []byte, end bool) error {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		switch {
		case s.stopBody || s.rstSent || s.rstRecv || s.failure != nil:
			return errStreamOver
		case c.err != nil:
			return c.err
		}
		var n int64 // what goes now: the windows may be negative (SETTINGS)
		if len(p) > 0 {
			n = max(0, min(int64(len(p)), s.sendWindow, c.sendWindow, int64(h2cMaxQueued-len(c.wq))))
		}
		if n == 0 && (len(p) > 0 || len(c.wq) >= h2cMaxQueued) {
			// Wait for a WINDOW_UPDATE, SETTINGS, a write or the end.
			c.bodyWaiters = append(c.bodyWaiters, s)
			c.mu.Unlock()
			<-s.bodyWake
			c.mu.Lock()
			continue
		}
		last := end && n == int64(len(p))
		c.queueData(s.id, p[:n], last)
		s.sendWindow -= n
		c.sendWindow -= n
		p = p[n:]
		if last {
			s.sentEnd = true
			if s.ended {
				delete(c.streams, s.id)
			}
		}
		// The writer is a goroutine of its own: the body's sender must
		// not sit in a write to an upstream that stopped reading, where
		// the handler could not stop it.
		c.kickLocked()
		if len(p) == 0 {
			return nil
		}
	}
}

var errStreamOver = errors.New("h2c stream over")

// sendTrailers ends the stream with the request's trailers.
func (s *h2cStream) sendTrailers(tr http.Header) error {
	var b, lower []byte
	for k, vv := range tr {
		if forbiddenTrailer(k) || !httpguts.ValidHeaderFieldName(k) {
			continue
		}
		name := lowerName(&lower, k)
		for _, v := range vv {
			if validFieldValue(v) {
				b = hpackw.AppendField(b, name, v)
			}
		}
	}
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case s.stopBody || s.rstSent || s.rstRecv || s.failure != nil:
		return errStreamOver
	case c.err != nil:
		return c.err
	}
	c.queueHeaders(s.id, b, true)
	s.sentEnd = true
	if s.ended {
		delete(c.streams, s.id)
	}
	c.kickLocked()
	return nil
}

// pump sends the request body (held, or read from the client as it
// comes) on its own goroutine, so that the response is read while the body
// is still going (a gRPC bidirectional stream), and then the request's
// trailers. A failure to read the client's body resets the stream and
// fails the exchange with bodyError's verdict. held is the body when it
// is whole in hand, else nil. It takes no *h1Request: one passed to a
// goroutine would move every request's h1Request to the heap.
func (s *h2cStream) pump(r *http.Request, held []byte) {
	var err error
	defer func() { s.bodyDone <- err }()
	if held != nil {
		s.bodyRead.Store(true)
		err = s.sendData(held, true)
		return
	}
	bufp := pool.Get(pool.Copy)
	defer pool.Put(bufp)
	buf := *bufp
	var sent int64
	for {
		n, rerr := r.Body.Read(buf)
		sent += int64(n)
		if rerr == io.EOF || r.ContentLength >= 0 && sent == r.ContentLength {
			s.bodyRead.Store(true)
		}
		if n > 0 {
			if err = s.sendData(buf[:n], false); err != nil {
				return
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			err = bodyError(rerr)
			s.fail(err)
			return
		}
	}
	if r.ContentLength >= 0 && sent != r.ContentLength {
		err = fmt.Errorf("%w: body of %d bytes, want %d", errClientGone, sent, r.ContentLength)
		s.fail(err)
		return
	}
	if len(r.Trailer) > 0 {
		err = s.sendTrailers(r.Trailer)
		return
	}
	err = s.sendData(nil, true)
}

// fail resets the stream for a failure of queue's side (the client's
// body) and wakes the handler.
func (s *h2cStream) fail(err error) {
	c := s.c
	c.mu.Lock()
	if s.failure == nil {
		s.failure = err
	}
	if s.id != 0 && c.streams[s.id] == s {
		delete(c.streams, s.id)
		if !s.rstSent && !s.rstRecv {
			c.queueRST(s.id, http2.ErrCodeCancel)
			s.rstSent = true
		}
	}
	c.wakeLocked(s)
	c.kickLocked()
	c.mu.Unlock()
}

// unsafeString is b as a string without a copy; b must not change while
// the string is in use.
func unsafeString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}
