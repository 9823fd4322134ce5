package h2

import (
	"bufio"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/queue-dev/queue/internal/engine"
	"github.com/queue-dev/queue/internal/hpackw"
	"github.com/queue-dev/queue/internal/httpsem"
	"golang.org/x/net/http2"
)

// response is a stream's http.ResponseWriter. Its head is encoded at the
// first Write or Flush, or when the handler returns, so that a response
// whose whole body comes in one Write goes out as one HEADERS and one
// DATA frame, the last with END_STREAM.
type response struct {
	s   *stream
	hdr http.Header

	status      int
	wroteHeader bool
	headSent    bool
	ended       bool // END_STREAM queued
	written     int64
	declared    int64 // Content-Length of the response, or -1
	noBody      bool

	// What the proxy hands over (engine.Keeper): the upstream's head, and
	// storage that lives until the response is complete.
	engine.Kept

	block    []byte   // the encoded head, reused
	lower    []byte   // a field name in lowercase, reused
	trailers []string // the fields Trailer declares, reused
}

func (w *response) reset() {
	clear(w.hdr)
	w.status, w.wroteHeader, w.headSent, w.ended = 0, false, false, false
	w.written, w.declared, w.noBody = 0, -1, false
	w.Kept.Reset()
}

// NotifyCancel has ch get a value when the stream's context is canceled,
// until NotifyCancel(nil) (engine.CancelNotifier).
func (w *response) NotifyCancel(ch chan<- struct{}) { w.s.ctx.notify(ch) }

// Header implements http.ResponseWriter.
func (w *response) Header() http.Header { return w.hdr }

// Status reports the final status written, 0 if none (stats.Reporter).
func (w *response) Status() int { return w.status }

// Written reports the body bytes written (stats.Reporter).
func (w *response) Written() int64 { return w.written }

// The engine's side of the contract with the proxy (package engine).
var (
	_ engine.Keeper         = (*response)(nil)
	_ engine.Refuser        = (*response)(nil)
	_ engine.CancelNotifier = (*response)(nil)
)

// Refuse notes that the handler answers the request with a 4xx of queue's
// own making, which the upstream never sees (engine.Refuser): a glitch of
// weight GlitchRefused (MaxGlitches), and the stream takes none back when
// it ends. It is called before the response is written. Past the budget the
// connection's next stream ends it with GOAWAY ENHANCE_YOUR_CALM: the read
// loop's to do, not a handler's.
func (w *response) Refuse() {
	c := w.s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if !w.s.refused {
		w.s.refused = true
		c.glitchLocked(GlitchRefused)
	}
}

// WriteHeader implements http.ResponseWriter. An informational status is
// sent at once, with the fields set so far; 101 is ignored (HTTP/2 has no
// upgrade).
func (w *response) WriteHeader(code int) {
	if w.wroteHeader || code == http.StatusSwitchingProtocols {
		return
	}
	if code < 100 || code > 999 {
		panic("h2: invalid WriteHeader code " + strconv.Itoa(code))
	}
	if code < 200 {
		w.writeHead(code, false, false)
		return
	}
	w.status, w.wroteHeader = code, true
	w.noBody = code == http.StatusNoContent || code == http.StatusNotModified || w.s.req.Method == http.MethodHead
}

// Write implements http.ResponseWriter.
func (w *response) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.noBody {
		if w.s.req.Method == http.MethodHead {
			return len(p), nil
		}
		return 0, http.ErrBodyNotAllowed
	}
	if w.ended {
		if len(p) > 0 {
			return 0, http.ErrContentLength
		}
		return 0, nil
	}
	if !w.headSent {
		w.declared = httpsem.DeclaredLength(w.hdr, w.UpstreamLength())
	}
	var err error
	if w.declared >= 0 && w.written+int64(len(p)) > w.declared {
		p = p[:w.declared-w.written]
		err = http.ErrContentLength
	}
	last := w.declared >= 0 && w.written+int64(len(p)) == w.declared && !httpsem.HasTrailers(w.hdr)
	if !w.headSent {
		w.writeHead(w.status, len(p) == 0 && last, true)
	}
	n, werr := w.data(p, last)
	w.written += int64(n)
	if werr != nil {
		return n, werr
	}
	return n, err
}

// Flush implements http.Flusher.
func (w *response) Flush() { w.FlushError() }

// FlushError sends the head if it is not sent, and what is queued.
func (w *response) FlushError() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.headSent {
		w.declared = httpsem.DeclaredLength(w.hdr, w.UpstreamLength())
		w.writeHead(w.status, false, true)
	}
	c := w.s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.flushLocked(false)
	if w.s.err != nil {
		return w.s.err
	}
	return c.w.err
}

// SetWriteDeadline bounds the stream's writes (http.ResponseController):
// a Write that waits for the client's flow control or for the connection
// past t fails.
func (w *response) SetWriteDeadline(t time.Time) error {
	w.s.c.mu.Lock()
	defer w.s.c.mu.Unlock()
	w.s.setDeadline(t, true)
	return nil
}

// SetReadDeadline bounds the reads of the request body: a Read that waits
// for the client past t fails.
func (w *response) SetReadDeadline(t time.Time) error {
	w.s.c.mu.Lock()
	defer w.s.c.mu.Unlock()
	w.s.setDeadline(t, false)
	return nil
}

// EnableFullDuplex: HTTP/2 streams are full duplex.
func (w *response) EnableFullDuplex() error { return nil }

// Hijack is refused: an HTTP/2 stream has no connection of its own.
func (w *response) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return nil, nil, http.ErrNotSupported
}

// writeHead encodes and queues a head: status, the upstream's lines, the
// header map, and a Date if none came. end sets END_STREAM.
func (w *response) writeHead(status int, end, final bool) {
	b := hpackw.AppendStatus(w.block[:0], status)
	up := w.Upstream()
	if !final {
		up = nil
	}
	date := false
	if up != nil {
		date = up.Date
		for _, f := range up.Fields {
			b = hpackw.AppendField(b, httpsem.Lower(&w.lower, f.Name), f.Value)
		}
	}
	for k, vv := range w.hdr {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			continue
		}
		name := httpsem.Lower(&w.lower, k)
		if httpsem.ConnectionSpecific(name) {
			continue
		}
		if name == "date" {
			date = true
		}
		b = appendValues(b, name, vv)
	}
	if up != nil && up.ContentLength >= 0 && w.hdr["Content-Length"] == nil && status != http.StatusNoContent {
		// A HEAD or 304 response carries the length the upstream gave.
		var d [20]byte
		b = hpackw.AppendField(b, "content-length", string(strconv.AppendInt(d[:0], up.ContentLength, 10)))
	}
	if final && !date {
		var d [32]byte
		b = hpackw.AppendField(b, "date", string(httpsem.AppendDate(d[:0])))
	}
	w.block = b
	c := w.s.c
	c.mu.Lock()
	if w.s.sendDone {
		c.mu.Unlock()
		return
	}
	c.w.headersLocked(w.s.id, b, end)
	if final {
		w.headSent = true
	} else {
		c.flushLocked(false) // an informational response goes out at once
	}
	if end {
		w.endLocked()
	}
	c.mu.Unlock()
}

// data queues p as DATA frames within the stream's and the connection's
// windows and the client's frame size, waiting for room as needed.
func (w *response) data(p []byte, last bool) (int, error) {
	s := w.s
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for {
		if s.err != nil {
			return n, s.err
		}
		if c.w.err != nil || c.closed {
			return n, errClosed
		}
		if len(p) == 0 {
			if last {
				c.w.dataLocked(s.id, nil, true)
				w.endLocked()
			}
			return n, nil
		}
		if s.dl.writeHit {
			c.resetLocked(s, http2.ErrCodeInternal)
			return n, os.ErrDeadlineExceeded
		}
		if len(c.w.q) >= queueHigh {
			if !c.w.writing {
				c.flushLocked(false)
				continue
			}
			c.space.Wait()
			continue
		}
		m := int64(len(p))
		m = min(m, s.sendWindow, c.sendWindow, int64(c.maxFrame))
		if m <= 0 {
			if !c.w.writing && len(c.w.q) > 0 {
				// The client may be waiting for what is queued before it
				// updates the window. The write releases the mutex: look
				// again after it.
				c.flushLocked(false)
				continue
			}
			if s.sendWindow <= 0 {
				s.space.Wait()
			} else {
				c.space.Wait()
			}
			continue
		}
		end := last && int(m) == len(p)
		c.w.dataLocked(s.id, p[:m], end)
		s.sendWindow -= m
		c.sendWindow -= m
		n += int(m)
		p = p[m:]
		if end {
			w.endLocked()
			return n, nil
		}
	}
}

// endLocked notes END_STREAM queued.
func (w *response) endLocked() {
	w.ended = true
	s := w.s
	s.sendDone = true
	if s.recvDone {
		s.c.removeLocked(s)
	}
}

// cut resets the stream unless its response ended: a response cut short
// must not look whole to the client.
func (w *response) cut() {
	c := w.s.c
	c.mu.Lock()
	if !w.s.sendDone {
		c.resetLocked(w.s, http2.ErrCodeInternal)
	}
	c.mu.Unlock()
}

// finish ends the response when the handler returned: the head if it was
// not sent, the trailers, END_STREAM; or RST_STREAM after a panic.
func (w *response) finish(aborted bool) {
	if aborted {
		w.cut()
		return
	}
	if w.ended {
		return
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	trailers := httpsem.HasTrailers(w.hdr)
	if !w.headSent {
		w.declared = httpsem.DeclaredLength(w.hdr, w.UpstreamLength())
		if w.declared > 0 && !w.noBody {
			// A body declared and never written: the response is cut.
			w.cut()
			return
		}
		if w.declared < 0 && !w.noBody && !trailers {
			w.hdr["Content-Length"] = zeroLength
		}
		w.writeHead(w.status, !trailers, true)
		if !trailers {
			return
		}
	}
	if w.declared > 0 && w.written < w.declared && !w.noBody {
		// The handler wrote less than it declared: the response is cut.
		w.cut()
		return
	}
	if trailers {
		w.writeTrailers()
		return
	}
	w.data(nil, true)
}

var zeroLength = []string{"0"}

// writeTrailers sends the trailers, with END_STREAM: the fields named by
// Trailer, and those with http.TrailerPrefix.
func (w *response) writeTrailers() {
	b := w.block[:0]
	w.trailers = httpsem.AppendTrailerKeys(w.trailers[:0], w.hdr)
	for _, k := range w.trailers {
		if name := httpsem.Lower(&w.lower, k); !httpsem.ConnectionSpecific(name) {
			b = appendValues(b, name, w.hdr[k])
		}
	}
	for k, vv := range w.hdr {
		if !strings.HasPrefix(k, http.TrailerPrefix) {
			continue
		}
		if name := httpsem.Lower(&w.lower, k[len(http.TrailerPrefix):]); name != "" && !httpsem.ConnectionSpecific(name) {
			b = appendValues(b, name, vv)
		}
	}
	w.block = b
	c := w.s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if w.s.sendDone {
		return
	}
	if len(b) == 0 {
		c.w.dataLocked(w.s.id, nil, true)
	} else {
		c.w.headersLocked(w.s.id, b, true)
	}
	w.endLocked()
}
