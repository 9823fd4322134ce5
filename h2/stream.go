package h2

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queue-dev/queue/internal/httpsem"
	"github.com/queue-dev/queue/internal/panics"
	"golang.org/x/net/http2"
)

// stream is one request and its response. The connection keeps the
// streams it made and reuses them: the request, its header map, URL,
// body and the response writer are made once per stream the connection
// ever had open at the same time.
//
// The read loop fills the request; a worker runs the handler; both work
// under the connection's mutex for the fields they share (the states,
// the windows, the body's bytes).
type stream struct {
	c  *conn
	id uint32

	req   http.Request
	blank http.Request // req as made, with its context: unexported fields zero
	hdr   http.Header
	vals  []string // backing store for one-value header slices
	url   url.URL
	ctx   streamCtx
	rb    reqBody
	res   response

	trailer http.Header // the request's trailers, if any came

	// Under the connection's mutex.
	inTable    bool // in c.streams
	refs       int  // the table and the handler
	recvDone   bool // END_STREAM came, or the stream closed
	sendDone   bool // END_STREAM went, or the stream closed
	bodyGone   bool // the handler is done with the body: DATA is dropped
	refused    bool // the handler refused the request itself (response.Refuse)
	err        error
	sendWindow int64
	recvWindow int64
	declared   int64 // the request's content-length, or -1
	received   int64
	consumed   int64 // body bytes read and not yet given back
	body       byteQueue
	space      sync.Cond // window, queue room or body bytes
	dl         deadlines
}

func (c *conn) newStreamLocked(id uint32) *stream {
	var s *stream
	if n := len(c.free); n > 0 {
		s = c.free[n-1]
		c.free[n-1] = nil
		c.free = c.free[:n-1]
	} else {
		s = &stream{c: c, hdr: make(http.Header)}
		s.space.L = &c.mu
		s.rb.s = s
		s.res.s = s
		s.res.hdr = make(http.Header)
		s.ctx.parent = c.base
		s.req = http.Request{}
		r := s.req.WithContext(&s.ctx)
		s.req = *r
		s.blank = *r
	}
	s.id = id
	s.inTable, s.refs = true, 1
	s.recvDone, s.sendDone, s.bodyGone, s.refused, s.err = false, false, false, false, nil
	s.sendWindow, s.recvWindow = c.initWindow, InitialWindow
	s.declared, s.received, s.consumed = -1, 0, 0
	s.trailer = nil
	s.dl.clear()
	clear(s.hdr)
	s.vals = s.vals[:0]
	s.ctx.reset()
	c.streams[id] = s
	return s
}

// unref drops one of the stream's two holders; the last one frees it for
// the connection's next stream. mu is held.
func (s *stream) unref() {
	s.refs--
	if s.refs == 0 && !s.c.closed {
		s.body.reset()
		s.c.free = append(s.c.free, s)
	}
}

// setRequest fills the request from its block. It reports false for a
// target queue cannot serve.
func (s *stream) setRequest(b *block, declared int64, ended bool) bool {
	s.req = s.blank
	r := &s.req
	r.Method = b.Method
	r.URL = &s.url
	r.Proto, r.ProtoMajor, r.ProtoMinor = "HTTP/2.0", 2, 0
	r.Header = s.hdr
	r.Host = b.RequestHost()
	r.RequestURI = b.Path
	r.RemoteAddr = s.c.remote
	r.TLS = s.c.tls
	r.Close = false
	r.Form, r.PostForm, r.MultipartForm = nil, nil, nil
	r.Trailer, r.TransferEncoding, r.GetBody, r.Response, r.Pattern = nil, nil, nil, nil, ""
	s.declared = declared
	switch {
	case ended:
		r.Body, r.ContentLength = http.NoBody, 0
	default:
		r.Body, r.ContentLength = &s.rb, declared
	}
	return b.SetTarget(&s.url)
}

// fromRequest makes the stream's request from an upgrading HTTP/1.1 one,
// whose strings live only as long as it: they are copied.
func (s *stream) fromRequest(r *http.Request) {
	b := block{Section: httpsem.Section{Method: r.Method, Path: r.RequestURI, Authority: r.Host, Scheme: "http"}}
	if b.Path == "" && r.URL != nil {
		b.Path = r.URL.RequestURI()
	}
	for k, vv := range r.Header {
		k = strings.Clone(k)
		for _, v := range vv {
			s.hdr[k] = append(s.hdr[k], strings.Clone(v))
		}
	}
	b.Method, b.Path, b.Authority = strings.Clone(b.Method), strings.Clone(b.Path), strings.Clone(b.Authority)
	if !s.setRequest(&b, 0, true) {
		s.url = url.URL{Path: "/"}
	}
	s.recvDone = true
}

// startLocked hands the stream to a worker.
func (c *conn) startLocked(s *stream) {
	c.running++
	s.refs++
	c.s.workers.Run(s)
}

// Serve runs the handler for s on a worker, and ends the response
// (workers.Task).
func (s *stream) Serve() {
	c := s.c
	s.res.reset()
	aborted := false
	if s.ctx.Err() == nil {
		aborted = s.runHandler()
	}
	s.res.finish(aborted)
	s.ctx.cancel()
	c.mu.Lock()
	// A deadline the handler left (a body read that failed keeps its read
	// deadline) has nothing more to bound; its timer, armed, would hold
	// the stream and its connection, buffers and all, until it fired.
	s.dl.clear()
	s.bodyGone = true
	if n := s.body.len(); n > 0 {
		c.creditLocked(int64(n))
		s.body.reset()
	}
	if s.consumed > 0 {
		c.creditLocked(s.consumed)
		s.consumed = 0
	}
	if !s.recvDone && s.sendDone && s.err == nil {
		// The response is whole and the request is not: the client may
		// stop sending it (RFC 9113 section 8.1).
		c.rstLocked(s.id, http2.ErrCodeNo)
		c.closeStreamLocked(s, errReset)
	}
	if s.sendDone && s.err == nil && !s.refused && c.glitches > 0 {
		c.glitches-- // a stream served to its end takes one glitch back
	}
	c.running--
	s.unref()
	c.idleCheckLocked()
	c.flushLocked(true)
	c.mu.Unlock()
}

func (s *stream) runHandler() (aborted bool) {
	defer func() {
		if v := recover(); v != nil {
			aborted = true
			if v != http.ErrAbortHandler {
				panics.Log(s.c.s.logger(), s.c.remote, v)
			}
		}
	}()
	s.c.s.Handler.ServeHTTP(&s.res, &s.req)
	return false
}

// reqBody is the request body as the handler reads it.
type reqBody struct{ s *stream }

func (b *reqBody) Read(p []byte) (int, error) {
	s := b.s
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	for s.body.len() == 0 && !s.recvDone && s.err == nil && !s.dl.readHit {
		s.space.Wait()
	}
	if s.body.len() == 0 {
		if s.err != nil {
			return 0, s.err
		}
		if !s.recvDone {
			return 0, os.ErrDeadlineExceeded
		}
		if s.trailer != nil {
			s.req.Trailer = s.trailer
		}
		return 0, io.EOF
	}
	n := s.body.read(p)
	s.consumed += int64(n)
	if s.consumed >= windowUpdateAt {
		// Give the bytes read back to both windows.
		if !s.recvDone {
			c.w.fr.WriteWindowUpdate(s.id, uint32(s.consumed))
			s.recvWindow += s.consumed
		}
		c.creditLocked(s.consumed)
		s.consumed = 0
		c.flushLocked(false)
	}
	return n, nil
}

func (b *reqBody) Close() error { return nil }

// byteQueue holds DATA that the handler has not read yet.
type byteQueue struct {
	b   []byte
	off int
}

func (q *byteQueue) len() int { return len(q.b) - q.off }

func (q *byteQueue) append(p []byte) {
	if q.off > 0 && q.off == len(q.b) {
		q.b, q.off = q.b[:0], 0
	}
	q.b = append(q.b, p...)
}

func (q *byteQueue) read(p []byte) int {
	n := copy(p, q.b[q.off:])
	q.off += n
	if q.off == len(q.b) {
		q.b, q.off = q.b[:0], 0
	}
	return n
}

func (q *byteQueue) reset() {
	if cap(q.b) > 64<<10 {
		q.b = nil // a large upload's buffer is not kept for the next stream
	}
	q.b, q.off = q.b[:0], 0
}

// streamCtx is a stream's context: canceled when the stream is reset or
// its connection ends. It is the stream's for its life, and reset for the
// next stream: a handler must not keep it past its return, as for the
// request.
type streamCtx struct {
	parent context.Context
	mu     sync.Mutex
	done   chan struct{}
	err    atomic.Pointer[error]
	funcs  []*afterFunc
	wake   chan<- struct{} // engine.CancelNotifier's channel, or nil
}

type afterFunc struct{ f func() }

func (x *streamCtx) reset() {
	x.mu.Lock()
	// A Done channel, if one was made, was closed at cancel (serve cancels
	// every stream whose handler ran): the next stream needs its own. A
	// handler that waits for a client's reset without one uses
	// engine.CancelNotifier (notify).
	x.done = nil
	x.err.Store(nil)
	x.funcs = x.funcs[:0]
	x.wake = nil
	x.mu.Unlock()
}

// notify makes ch the channel that gets a value at cancel, at once if the
// context is canceled already; nil ends it.
func (x *streamCtx) notify(ch chan<- struct{}) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.wake = ch
	if ch != nil && x.err.Load() != nil {
		nudge(ch)
	}
}

// nudge sends on ch unless it is full.
func nudge(ch chan<- struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (x *streamCtx) Deadline() (time.Time, bool) { return time.Time{}, false }

func (x *streamCtx) Done() <-chan struct{} {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.done == nil {
		x.done = make(chan struct{})
		if x.err.Load() != nil {
			close(x.done)
		}
	}
	return x.done
}

func (x *streamCtx) Err() error {
	if p := x.err.Load(); p != nil {
		return *p
	}
	return nil
}

func (x *streamCtx) Value(key any) any { return x.parent.Value(key) }

// AfterFunc lets context.WithCancel and its kin derive from the stream's
// context without a goroutine each.
func (x *streamCtx) AfterFunc(f func()) func() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.err.Load() != nil {
		f()
		return func() bool { return false }
	}
	a := &afterFunc{f: f}
	x.funcs = append(x.funcs, a)
	return func() bool {
		x.mu.Lock()
		defer x.mu.Unlock()
		for i, g := range x.funcs {
			if g == a {
				x.funcs = append(x.funcs[:i], x.funcs[i+1:]...)
				return true
			}
		}
		return false
	}
}

// canceled is what a stream's context's Err returns once it is canceled,
// stored without an allocation.
var canceled error = context.Canceled

func (x *streamCtx) cancel() {
	x.mu.Lock()
	if x.err.Load() != nil {
		x.mu.Unlock()
		return
	}
	x.err.Store(&canceled)
	if x.done != nil {
		close(x.done)
	}
	if x.wake != nil {
		nudge(x.wake)
	}
	funcs := x.funcs
	x.funcs = x.funcs[:0]
	// Called before the stream can be reset for reuse: the functions
	// (contexts derived from this one, through context's afterFuncer) see
	// Err set. They only cancel their context, and start any goroutine
	// they need themselves.
	for _, a := range funcs {
		a.f()
	}
	clear(funcs)
	x.mu.Unlock()
}

// deadlines are a stream's read and write deadlines
// (http.ResponseController): a body read or a write that waits for the
// client past one fails with os.ErrDeadlineExceeded. One timer per stream
// object, made at its first deadline and reused. Under the connection's
// mutex.
type deadlines struct {
	read, write       time.Time
	readHit, writeHit bool
	t                 *time.Timer
}

func (d *deadlines) clear() {
	d.read, d.write, d.readHit, d.writeHit = time.Time{}, time.Time{}, false, false
	if d.t != nil {
		d.t.Stop()
	}
}

// set sets one deadline; mu is held.
func (s *stream) setDeadline(t time.Time, write bool) {
	d := &s.dl
	if write {
		d.write, d.writeHit = t, false
	} else {
		d.read, d.readHit = t, false
	}
	s.checkDeadlines()
}

// checkDeadlines marks the deadlines that passed, wakes the stream's
// waiters for them, and arms the timer for the next one; mu is held.
func (s *stream) checkDeadlines() {
	d := &s.dl
	now := time.Now()
	next := time.Time{}
	for _, x := range [2]struct {
		t   time.Time
		hit *bool
	}{{d.read, &d.readHit}, {d.write, &d.writeHit}} {
		switch {
		case x.t.IsZero():
		case !x.t.After(now):
			if !*x.hit {
				*x.hit = true
				s.space.Broadcast()
				s.c.space.Broadcast()
			}
		case next.IsZero() || x.t.Before(next):
			next = x.t
		}
	}
	if next.IsZero() {
		if d.t != nil {
			d.t.Stop()
		}
		return
	}
	if d.t == nil {
		d.t = time.AfterFunc(next.Sub(now), s.deadlineFired)
		return
	}
	d.t.Reset(next.Sub(now))
}

func (s *stream) deadlineFired() {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	s.checkDeadlines()
}
