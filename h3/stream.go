package h3

import (
	"errors"
	"io"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/queue-dev/queue/internal/httpsem"
	"github.com/queue-dev/queue/internal/panics"
	"github.com/queue-dev/queue/internal/pool"
)

// stream is one request stream: its request, read from the stream by the
// worker that then runs the handler, and its response. The connection
// keeps the stream objects it made and reuses them: the request, its
// header map and URL, and the response writer are made once per stream
// the connection ever had open at the same time.
type stream struct {
	c   *conn
	str *quic.Stream

	req   http.Request
	blank http.Request // req as made, with its context: unexported fields zero
	ctx   reqCtx
	hdr   http.Header
	vals  []string
	url   url.URL
	canon httpsem.Canonicalizer
	sec   httpsem.Section
	dec   decoder
	rb    reqBody
	res   response

	// The stream read through a buffer: the HEADERS frame, then body
	// bytes. The buffer (bp) is from package pool while the stream is
	// served.
	in reader
	bp *[]byte

	finalSize atomic.Int64 // the stream's final size once known, or -1
	onFinal   func(int64)  // sets finalSize, bound once

	// The body (reqBody).
	frameLeft uint64 // DATA payload not yet read of the current frame
	declared  int64  // the request's Content-Length, or -1
	received  int64
	bodyErr   error // the body's end: io.EOF or what failed it
	trailer   http.Header
	refused   bool // the handler refused the request itself (Refuse)
	served    bool // the response ended whole (for the sender)
}

func (c *conn) newStreamLocked(str *quic.Stream) *stream {
	var st *stream
	if n := len(c.free); n > 0 {
		st = c.free[n-1]
		c.free[n-1] = nil
		c.free = c.free[:n-1]
	} else {
		st = &stream{c: c, hdr: make(http.Header)}
		st.rb.st = st
		st.res.st = st
		st.res.hdr = make(http.Header)
		st.onFinal = func(n int64) { st.finalSize.Store(n) }
		st.ctx.st = st
		st.blank = *st.req.WithContext(&st.ctx)
	}
	st.str = str
	return st
}

// Serve reads the request and runs the handler on a worker
// (workers.Task).
func (st *stream) Serve() {
	served := false
	if st.readRequest() {
		served = st.run()
	}
	st.release()
	if st.res.pending {
		// The response's last write is the connection's sender's.
		st.served = served
		st.c.send(st)
		return
	}
	st.c.done(st, served)
}

// release gives back what the stream held for its request.
func (st *stream) release() {
	if st.bp != nil {
		pool.Put(st.bp)
		st.bp = nil
	}
	st.in = reader{}
	st.frameLeft, st.received, st.bodyErr, st.trailer, st.refused = 0, 0, nil, nil, false
	clear(st.hdr)
	clear(st.vals)
	st.vals = st.vals[:0]
	st.dec.text = st.dec.text[:0]
	st.req = st.blank
}

// fieldSection returns the payload of a HEADERS frame of l bytes (whose
// header was read), in the buffer, at most MaxHeaderFrame.
func (st *stream) fieldSection(l uint64) ([]byte, error) {
	if l > MaxHeaderFrame {
		return nil, errTooLarge
	}
	if err := st.need(int(l)); err != nil {
		return nil, err
	}
	p := st.in.buf[st.in.r : st.in.r+int(l)]
	st.in.r += int(l)
	return p, nil
}

// need makes the buffer hold n unread bytes, growing it (from the pool)
// when it is smaller; callers bound n.
func (st *stream) need(n int) error {
	in := &st.in
	if n > len(in.buf) {
		bp := pool.Get(n)
		b := *bp
		in.w = copy(b, in.buf[in.r:in.w])
		in.r = 0
		pool.Put(st.bp)
		st.bp, in.buf = bp, b
	}
	for in.w-in.r < n {
		if in.eof {
			return io.ErrUnexpectedEOF
		}
		if in.r+n > len(in.buf) {
			in.w = copy(in.buf, in.buf[in.r:in.w])
			in.r = 0
		}
		if err := in.fill(); err != nil {
			return err
		}
	}
	return nil
}

// cancel ends both directions of the stream with code.
func (st *stream) cancel(code errCode) {
	st.str.CancelRead(quic.StreamErrorCode(code))
	st.str.CancelWrite(quic.StreamErrorCode(code))
}

// readRequest reads the request's HEADERS frame and makes the request. It
// answers or resets what it cannot serve, and reports whether the handler
// should run.
func (st *stream) readRequest() bool {
	c := st.c
	st.bp = pool.Get(4 << 10)
	st.in = reader{src: st.str, buf: *st.bp}
	st.str.SetReadDeadline(time.Now().Add(c.s.headerTimeout()))
	payload, err := st.headersFrame()
	st.str.SetReadDeadline(time.Time{})
	if err != nil {
		var se *quic.StreamError
		switch {
		case errors.As(err, &se) && se.Remote:
			// Reset before its request came: both sides are ended, so that
			// quic-go retires the stream and gives its credit back.
			st.cancel(errRequestCancelled)
			c.glitch(GlitchFrame)
		case errors.Is(err, errTooLarge):
			st.cancel(errExcessiveLoad)
			c.glitch(GlitchHeadTooLarge)
		case errors.Is(err, errUnexpectedFrame):
			c.close(errFrameUnexpected)
		case errors.Is(err, errFrame):
			c.close(errFrameError)
		default: // a deadline, an incomplete request, the connection's end
			st.cancel(errRequestIncomplete)
			c.glitch(GlitchFrame)
		}
		return false
	}
	st.sec.Reset(st.hdr, &st.vals, &st.canon, false)
	if err := st.decodeSection(payload); err != nil {
		return st.refuseSection(err)
	}
	if !st.sec.Valid() {
		st.cancel(errMessage)
		c.glitch(GlitchRefused)
		return false
	}
	st.declared = -1
	if st.sec.ContentLength != "" {
		n, ok := httpsem.ParseDigits(st.sec.ContentLength)
		if !ok {
			st.cancel(errMessage)
			c.glitch(GlitchRefused)
			return false
		}
		st.declared = n
	}
	st.setRequest()
	if !st.sec.SetTarget(&st.url) {
		st.answer(http.StatusBadRequest)
		c.glitch(GlitchRefused)
		return false
	}
	return true
}

var errUnexpectedFrame = errors.New("h3: unexpected frame")

// headersFrame reads up to the request's HEADERS frame and returns its
// payload, in the buffer; frames of unknown types before it are skipped.
func (st *stream) headersFrame() ([]byte, error) {
	start := st.in.consumed()
	for {
		t, l, err := st.in.header()
		switch {
		case err == io.EOF:
			return nil, io.ErrUnexpectedEOF
		case err != nil:
			return nil, err
		case t == frameHeaders:
			return st.fieldSection(l)
		case t == frameData, notOnRequestStream(t):
			return nil, errUnexpectedFrame
		}
		// An unknown type (reserved for greasing, or an extension): its
		// payload is skipped, within the bound of a header frame.
		if st.in.consumed()-start+int64(l) > MaxHeaderFrame {
			return nil, errTooLarge
		}
		if err := st.in.skip(l); err != nil {
			return nil, err
		}
	}
}

// decodeSection decodes a field section into st.sec.
func (st *stream) decodeSection(p []byte) error {
	if err := st.dec.decode(p, MaxHeaderListSize); err != nil {
		return err
	}
	text := string(st.dec.text) // every literal of the section in one string
	size := 0
	for i := 0; i+1 < len(st.dec.spans); i += 2 {
		name, value := st.dec.str(text, i), st.dec.str(text, i+1)
		size += len(name) + len(value) + 32
		if size > MaxHeaderListSize {
			return errFieldsTooLarge
		}
		st.sec.Add(name, value)
	}
	return nil
}

// refuseSection answers a section decodeSection failed on: 431 for one
// too large, a connection error for QPACK that references a table queue
// does not have or is malformed.
func (st *stream) refuseSection(err error) bool {
	if errors.Is(err, errFieldsTooLarge) {
		st.answer(http.StatusRequestHeaderFieldsTooLarge)
		st.c.glitch(GlitchHeadTooLarge)
		return false
	}
	st.c.close(errDecompression)
	return false
}

// setRequest fills the request from the section.
func (st *stream) setRequest() {
	b := &st.sec
	st.req = st.blank
	r := &st.req
	r.Method = b.Method
	r.URL = &st.url
	r.Proto, r.ProtoMajor, r.ProtoMinor = "HTTP/3.0", 3, 0
	r.Header = st.hdr
	r.Host = b.RequestHost()
	r.RequestURI = b.Path
	r.RemoteAddr = st.c.remote
	r.TLS = st.c.tls
	if st.noBody() {
		r.Body, r.ContentLength = http.NoBody, 0
	} else {
		r.Body, r.ContentLength = &st.rb, st.declared
	}
}

// reqCtx is a request's context: its QUIC stream's, which quic-go cancels
// when the client stops the stream (STOP_SENDING) or the connection ends,
// and which carries the connection's values (the client's address,
// package peer). It is the stream object's for its life, made once, so
// that the request needs no copy to carry it: a handler must not keep it
// past its return, as for the request. Contexts derived from it are
// children of the stream's own (context finds it through Value).
type reqCtx struct{ st *stream }

func (x *reqCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (x *reqCtx) Done() <-chan struct{}       { return x.st.str.Context().Done() }
func (x *reqCtx) Err() error                  { return x.st.str.Context().Err() }
func (x *reqCtx) Value(key any) any           { return x.st.str.Context().Value(key) }

// noBody reports whether the stream ended with its HEADERS frame: read
// to its FIN already, or its final size known and all of it read, in
// which case the FIN is taken now (it waits in quic-go's queue: the read
// does not block), so that the stream's receive side is done.
func (st *stream) noBody() bool {
	in := &st.in
	if in.r != in.w {
		return false
	}
	if in.eof {
		return true
	}
	st.finalSize.Store(-1)
	st.str.SetReceiveFinalSizeCallback(st.onFinal)
	st.str.SetReceiveFinalSizeCallback(nil)
	if st.finalSize.Load() != in.read {
		return false
	}
	// The final size says nothing follows: the read takes the FIN that
	// waits in quic-go's queue (in.r == in.w, so fill reads into an empty
	// buffer and does not block).
	if err := in.fill(); err != nil || !in.eof || in.r != in.w {
		return false // not reached with a final size that matches; what came is the body's
	}
	return true
}

// answer sends a response of queue's own, with an empty body, to a
// request the handler never sees.
func (st *stream) answer(status int) {
	b := appendPrefix(nil)
	b = appendStatus(b, status)
	b = appendField(b, "content-length", "0")
	out := appendFrameHeader(make([]byte, 0, len(b)+8), frameHeaders, uint64(len(b)))
	out = append(out, b...)
	st.str.CancelRead(quic.StreamErrorCode(errNoError))
	st.str.SetWriteDeadline(time.Now().Add(st.c.s.writeTimeout()))
	st.str.Write(out)
	st.str.Close()
}

// run runs the handler and ends the response. It reports whether the
// response ended whole.
func (st *stream) run() (served bool) {
	w := &st.res
	w.reset()
	aborted := st.runHandler()
	// The write side is still open: a canceled context is the client's
	// STOP_SENDING or the connection's end, before the response ended.
	reset := st.str.Context().Err() != nil
	served = w.finish(aborted || reset)
	if st.bodyErr != io.EOF && st.req.Body != http.NoBody {
		// The handler is done before the body was: the client may stop
		// sending it (RFC 9114 section 4.1).
		st.str.CancelRead(quic.StreamErrorCode(errNoError))
	}
	if reset {
		st.c.glitch(GlitchFrame) // reset by the client before its response ended
	}
	return served && !st.refused
}

func (st *stream) runHandler() (aborted bool) {
	defer func() {
		if v := recover(); v != nil {
			aborted = true
			if v != http.ErrAbortHandler {
				panics.Log(st.c.s.logger(), st.c.remote, v)
			}
		}
	}()
	st.c.s.Handler.ServeHTTP(&st.res, &st.req)
	return false
}
