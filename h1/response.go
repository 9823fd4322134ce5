package h1

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/queue-dev/queue/internal/engine"
	"github.com/queue-dev/queue/internal/httpsem"
	"github.com/queue-dev/queue/internal/netio"
	"github.com/queue-dev/queue/internal/pool"
)

// response is the http.ResponseWriter of a connection, reused for each of
// its requests. It buffers the head and up to bufSize of body, so that a
// small response goes out in one write (sendmsg of head and body) with a
// Content-Length computed when the handler returns without one; a larger
// or flushed response goes out as it is written, chunked on HTTP/1.1 when
// its length is unknown.
//
// Besides http.ResponseWriter and http.Flusher it has the methods that
// http.ResponseController looks for: FlushError, SetReadDeadline,
// SetWriteDeadline, EnableFullDuplex (a no-op: requests are always full
// duplex) and Hijack.
type response struct {
	c   *conn
	hdr http.Header

	method  string
	proto10 bool // the request was HTTP/1.0: no chunking
	ka10    bool // an HTTP/1.0 request asked for keep-alive

	status      int
	wroteHeader bool  // a final status was set
	headSent    bool  // the head is on the wire
	chunked     bool  // the body goes out chunked
	cl          int64 // the body's length when known, else -1
	written     int64 // body bytes written by the handler
	noBody      bool  // the status allows no body (1xx, 204, 304)
	closeAfter  bool  // the connection closes after this response
	refused     bool  // the handler refused the request itself (Refuse)
	trailers    []string
	err         error // sticky write error

	wbuf *[]byte // body bytes not yet written: (*wbuf)[:n]
	n    int
	hb   *[]byte // the head, while it is built
	iov  [][]byte
	vec  [6][]byte

	chunkHead [24]byte // a chunk-size line

	keep *[]byte  // KeepBuffer's, until the response is complete
	vals []string // KeepValues', reused

	connCache []byte // ConnCache's, kept for the connection's life

	keepN int                 // the bytes KeepBuffer handed out; the room after them may hold the head
	head  engine.ResponseHead // KeepHead's: an upstream's head, written before hdr's fields
}

func (w *response) reset(r *http.Request, h *Head) {
	clear(w.hdr)
	w.method = r.Method
	w.proto10 = r.ProtoMinor == 0
	w.ka10 = h.KeepAlive10
	w.status, w.wroteHeader, w.headSent, w.chunked = 0, false, false, false
	w.cl, w.written, w.noBody, w.closeAfter, w.err = -1, 0, false, h.Close, nil
	w.refused = false
	w.trailers = w.trailers[:0]
	w.head.Reset()
	w.keepN = 0
}

// The engine's side of the contract with the proxy (package engine).
var (
	_ engine.Keeper      = (*response)(nil)
	_ engine.Refuser     = (*response)(nil)
	_ engine.Unwatcher   = (*response)(nil)
	_ engine.PeerChecker = (*response)(nil)
	_ engine.HeldBody    = (*body)(nil)
)

// KeepBuffer returns n bytes that stay the handler's until the response
// is complete (engine.Keeper): the proxy copies an upstream response head
// there and points the response's fields into it, as the engine writes the
// head only once the handler has returned. A second call may return the
// same storage. The buffer has room past the n bytes for the head the
// engine builds from them (headBuf), when that fits a pooled buffer.
func (w *response) KeepBuffer(n int) []byte {
	if w.keep == nil || cap(*w.keep) < n {
		pool.Put(w.keep)
		size := n
		if room := keepRoom(n); pool.Size(room) != 0 {
			size = room
		}
		w.keep = pool.Get(size)
	}
	w.keepN = n
	return (*w.keep)[:n]
}

// keepRoom is what a keep buffer of n bytes needs to build the head in it
// too: the fields, which may each grow by the space after the colon (a
// field line is at least four bytes), and headRoom.
func keepRoom(n int) int { return n + n + n/4 + headRoom }

// KeepHead returns the response's head storage (engine.Keeper), empty: a
// head handed over (its Status set) before WriteHeader is written before
// Header()'s fields, and a Content-Length in Header() wins over its own.
func (w *response) KeepHead() *engine.ResponseHead { return &w.head }

// upstream returns the head the handler handed over, or nil.
func (w *response) upstream() *engine.ResponseHead {
	if w.head.Status == 0 {
		return nil
	}
	return &w.head
}

// Unwatch stops the watcher looking at the client of this request and
// counts the request out of its ticks (engine.Unwatcher): the handler
// waits on queue alone, for a bounded time, and reads no more of the body.
// The request's context is then not cancelled when the client goes.
func (w *response) Unwatch() {
	w.c.unwatched = true
	w.c.unwatch()
}

// PeerGone reports whether the client has closed or reset the connection,
// looking now rather than at the watcher's next tick (engine.PeerChecker):
// one non-blocking peek. It runs on the handler's goroutine, so it peeks
// into a buffer of its own, not the one the watcher's peeks share.
func (w *response) PeerGone() bool {
	c := w.c
	if c.raw == nil {
		return false
	}
	var gone bool
	var buf [1]byte
	c.raw.Control(func(fd uintptr) { gone = netio.PeerGone(fd, &buf) })
	return gone
}

// Refuse notes that the handler answers the request with a 4xx of queue's
// own making, which the upstream never sees (engine.Refuser): a glitch.
// Past the connection's budget (MaxGlitches) the response carries
// "Connection: close" and the connection closes after it. It is called
// before the response is written.
func (w *response) Refuse() {
	if w.refused {
		return
	}
	w.refused = true
	c := w.c
	c.s.glitches.Add(1)
	c.glitches++
	if c.glitches > MaxGlitches && !w.closeAfter {
		w.closeAfter = true
		c.s.glitchCloses.Add(1)
	}
}

// ConnCache returns bytes the handler may keep across the requests of the
// connection (engine.Keeper), for what is the same on each of them (the
// proxy keeps the forwarding fields it built). They are dropped with the
// connection.
func (w *response) ConnCache() *[]byte { return &w.connCache }

// KeepValues returns scratch space for header value slices that stays the
// handler's until the response is complete (see KeepBuffer).
func (w *response) KeepValues() *[]string { return &w.vals }

// release gives back what the response holds.
func (w *response) release() {
	if w.wbuf != nil {
		pool.Put(w.wbuf)
		w.wbuf = nil
	}
	pool.Put(w.keep)
	w.keep, w.keepN = nil, 0
}

// Status reports the final status written so far (a 101, or one from 200),
// 0 if none: stats.Reporter and tracing.StatusReporter, which then need no
// wrapper of their own.
func (w *response) Status() int { return w.status }

// Written reports the body bytes the handler has written (stats.Reporter).
func (w *response) Written() int64 { return w.written }

// Header implements http.ResponseWriter.
func (w *response) Header() http.Header { return w.hdr }

// WriteHeader implements http.ResponseWriter. An informational status
// (1xx but 101) is written at once with the fields set so far; 101 is for
// a handler that hijacks.
func (w *response) WriteHeader(code int) {
	if w.wroteHeader || w.err != nil {
		return
	}
	if code < 100 || code > 999 {
		panic("h1: invalid WriteHeader code " + strconv.Itoa(code))
	}
	if code < 200 && code != http.StatusSwitchingProtocols {
		w.writeInformational(code)
		return
	}
	w.status, w.wroteHeader = code, true
	w.noBody = code < 200 || code == http.StatusNoContent || code == http.StatusNotModified
	cl := int64(-1)
	if up := w.upstream(); up != nil {
		cl = up.ContentLength
	}
	if v := w.hdr["Content-Length"]; len(v) > 0 {
		cl = -1
		if n, ok := parseContentLength(v[0]); ok {
			cl = n
		}
	}
	// A 304 keeps the length of the representation it stands for (RFC 9110
	// section 8.6); it sends no body either way.
	if cl >= 0 && (!w.noBody || code == http.StatusNotModified) {
		w.cl = cl
	}
	w.trailers = httpsem.AppendTrailerKeys(w.trailers, w.hdr)
	if v := w.hdr["Connection"]; len(v) > 0 {
		for _, t := range v {
			if c, _ := connectionTokens(t); c {
				w.closeAfter = true
			}
		}
	}
}

func (w *response) writeInformational(code int) {
	if w.headSent {
		return
	}
	hb := pool.Get(1 << 10)
	b := append((*hb)[:0], "HTTP/1.1 "...)
	b = appendStatus(b, code)
	b = append(b, "\r\n"...)
	b = w.appendFields(b)
	b = append(b, "\r\n"...)
	*hb = b
	err := w.c.write(b)
	pool.Put(hb)
	w.fail(err)
}

// writeContinue sends "100 Continue" before the first read of a body
// whose client asked for it, unless a final response has started.
func (w *response) writeContinue() {
	if !w.headSent && w.err == nil {
		w.fail(w.c.write(continueLine))
	}
}

var continueLine = []byte("HTTP/1.1 100 Continue\r\n\r\n")

// Write implements http.ResponseWriter.
func (w *response) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return 0, w.err
	}
	if w.noBody {
		return 0, http.ErrBodyNotAllowed
	}
	var short bool
	if w.cl >= 0 && w.written+int64(len(p)) > w.cl {
		p, short = p[:w.cl-w.written], true
	}
	w.written += int64(len(p))
	if w.method == http.MethodHead {
		// Counted, so that a Content-Length can be given, and dropped.
	} else if whole := w.written == w.cl && w.n == 0 && !w.headSent && len(p) > 0; !whole &&
		(w.wbuf == nil && len(p) < bufSize || w.wbuf != nil && w.n+len(p) <= len(*w.wbuf)) {
		// Buffered, but never the whole body of a response of declared
		// length in one write (the proxy's, out of its read buffer): that
		// goes out at once below, head and body in one sendmsg, with no
		// copy. The response is complete; nothing the handler could still
		// do would change it.
		if w.wbuf == nil {
			w.wbuf = pool.Get(bufSize)
		}
		w.n += copy((*w.wbuf)[w.n:], p)
	} else if err := w.send(p, false); err != nil {
		w.written -= int64(len(p)) // not written after all (Written)
		return 0, err
	}
	if short {
		return len(p), http.ErrContentLength
	}
	return len(p), nil
}

// Flush implements http.Flusher.
func (w *response) Flush() { w.FlushError() }

// FlushError writes what is buffered, the head included.
func (w *response) FlushError() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return w.err
	}
	return w.send(nil, false)
}

// send writes the head if it is not out yet, the buffered body, then p,
// in one sendmsg; last adds the end of a chunked body.
func (w *response) send(p []byte, last bool) error {
	w.iov = w.vec[:0]
	if !w.headSent {
		if last && w.cl < 0 && !w.noBody && len(w.trailers) == 0 && !w.hasPrefixTrailers() {
			// The whole body is at hand: its length is known. Trailers
			// need the chunked coding.
			w.cl = w.written
		}
		w.iov = append(w.iov, w.buildHead())
	}
	var body []byte
	if w.wbuf != nil && w.n > 0 {
		body = (*w.wbuf)[:w.n]
	}
	size := len(body) + len(p)
	if w.chunked && size > 0 {
		ch := strconv.AppendInt(w.chunkHead[:0], int64(size), 16)
		w.iov = append(w.iov, append(ch, "\r\n"...))
	}
	if len(body) > 0 {
		w.iov = append(w.iov, body)
	}
	if len(p) > 0 {
		w.iov = append(w.iov, p)
	}
	if w.chunked {
		if size > 0 {
			w.iov = append(w.iov, crlf)
		}
		if last {
			if len(w.trailers) == 0 && !w.hasPrefixTrailers() {
				w.iov = append(w.iov, lastChunk)
			} else {
				// Trailers are rare: their block is allocated.
				t := w.appendTrailers(append(make([]byte, 0, 256), "0\r\n"...))
				w.iov = append(w.iov, append(t, "\r\n"...))
			}
		}
	}
	var err error
	if w.c.tcp != nil {
		_, err = w.c.vw.Writev(w.iov)
	} else {
		for _, b := range w.iov {
			if _, err = w.c.nc.Write(b); err != nil {
				break
			}
		}
	}
	w.n = 0
	w.putHead()
	clear(w.vec[:])
	w.iov = nil
	return w.fail(err)
}

var (
	crlf      = []byte("\r\n")
	lastChunk = []byte("0\r\n\r\n")
)

func (w *response) fail(err error) error {
	if err != nil && w.err == nil {
		w.err = err
		w.closeAfter = true
	}
	return w.err
}

// buildHead writes the status line and fields into the head buffer
// (headBuf) and decides the framing.
func (w *response) buildHead() []byte {
	w.headSent = true
	b := w.headBuf()
	b = append(b, "HTTP/1.1 "...)
	b = appendStatus(b, w.status)
	b = append(b, "\r\n"...)
	date := false
	if up := w.upstream(); up != nil {
		for _, f := range up.Fields {
			b = append(append(append(append(b, f.Name...), ": "...), f.Value...), "\r\n"...)
		}
		date = up.Date
	}
	b = w.appendFields(b)
	switch {
	case w.noBody:
		if w.status == http.StatusNotModified && w.cl >= 0 {
			b = append(b, "Content-Length: "...)
			b = appendInt(b, w.cl)
			b = append(b, "\r\n"...)
		}
	case w.cl >= 0:
		b = append(b, "Content-Length: "...)
		b = appendInt(b, w.cl)
		b = append(b, "\r\n"...)
	case w.method == http.MethodHead:
	case w.proto10:
		w.closeAfter = true // the body ends where the connection does
	default:
		w.chunked = true
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
	}
	if w.c.s.shutdown.Load() {
		w.closeAfter = true
	}
	switch {
	case w.closeAfter:
		b = append(b, "Connection: close\r\n"...)
	case w.proto10 && w.ka10:
		b = append(b, "Connection: keep-alive\r\n"...)
	}
	if _, ok := w.hdr["Date"]; !ok && !date {
		b = append(b, "Date: "...)
		b = httpsem.AppendDate(b)
		b = append(b, "\r\n"...)
	}
	return append(b, "\r\n"...)
}

// headRoom is what a head needs beyond its fields when the handler set no
// fields of its own: a status line with the longest reason, a
// Content-Length, a Connection, a Date and the empty line, with margin.
const headRoom = 192

// headBuf returns an empty slice to build a head in. A proxied response
// whose fields all came in a handed-over head (KeepHead) is built in the
// room after that head's bytes in the keep buffer (KeepBuffer), when there
// is enough, with no buffer of its own; else the head takes a pooled one
// (hb) until it is written.
func (w *response) headBuf() []byte {
	if up := w.upstream(); up != nil && len(w.hdr) == 0 && w.keep != nil {
		if n := w.keepN; cap(*w.keep) >= keepRoom(n) {
			return (*w.keep)[n:n:cap(*w.keep)]
		}
	}
	if w.hb == nil {
		w.hb = pool.Get(w.keepN + 1<<10)
	}
	return (*w.hb)[:0]
}

// putHead gives back the head buffer (one grown past its class is
// dropped).
func (w *response) putHead() {
	pool.Put(w.hb)
	w.hb = nil
}

// appendFields appends the handler's fields but for those the engine
// writes itself (framing and connection) and declared trailers. A field
// whose name or value could end the line (CR, LF) is dropped.
func (w *response) appendFields(b []byte) []byte {
	for k, vv := range w.hdr {
		switch k {
		case "Content-Length", "Transfer-Encoding", "Connection":
			continue
		}
		if strings.HasPrefix(k, http.TrailerPrefix) || w.isTrailer(k) || !safe(k) {
			continue
		}
		for _, v := range vv {
			if !safe(v) {
				continue
			}
			b = append(b, k...)
			b = append(b, ": "...)
			b = append(b, v...)
			b = append(b, "\r\n"...)
		}
	}
	return b
}

func (w *response) isTrailer(k string) bool {
	for _, t := range w.trailers {
		if t == k {
			return true
		}
	}
	return false
}

func (w *response) hasPrefixTrailers() bool {
	for k := range w.hdr {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			return true
		}
	}
	return false
}

// appendTrailers appends the trailer fields: the declared ones as set now,
// and those set under http.TrailerPrefix.
func (w *response) appendTrailers(b []byte) []byte {
	for _, k := range w.trailers {
		for _, v := range w.hdr[k] {
			if safe(v) {
				b = append(append(append(append(b, k...), ": "...), v...), "\r\n"...)
			}
		}
	}
	for k, vv := range w.hdr {
		if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok && safe(name) {
			for _, v := range vv {
				if safe(v) {
					b = append(append(append(append(b, name...), ": "...), v...), "\r\n"...)
				}
			}
		}
	}
	return b
}

// safe reports whether s holds no CR or LF.
func safe(s string) bool {
	return strings.IndexByte(s, '\n') < 0 && strings.IndexByte(s, '\r') < 0
}

// finish completes the response once the handler has returned and gives
// back its buffers. It reports whether the connection may be reused.
func (w *response) finish() bool {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.err == nil && (!w.headSent || w.n > 0 || w.chunked) {
		w.send(nil, true)
	}
	w.release()
	if w.cl >= 0 && w.written < w.cl && w.method != http.MethodHead && !w.noBody {
		w.closeAfter = true // a short body: the client would wait for the rest
	}
	return !w.closeAfter && w.err == nil
}

// SetReadDeadline sets the connection's read deadline (request body).
func (w *response) SetReadDeadline(t time.Time) error {
	w.c.rdl = t
	return w.c.nc.SetReadDeadline(t)
}

// SetWriteDeadline sets the connection's write deadline.
func (w *response) SetWriteDeadline(t time.Time) error { return w.c.nc.SetWriteDeadline(t) }

// EnableFullDuplex does nothing: the body can always be read while the
// response is written.
func (w *response) EnableFullDuplex() error { return nil }

// errHijackInSession refuses a hijack of a request served in a read session.
var errHijackInSession = errors.New("h1: hijack of a request without a body, Upgrade or CONNECT")

// Hijack hands the connection to the handler, with what is buffered of it
// (a client may send right behind an upgrade request).
func (w *response) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c := w.c
	if c.state.Load() == stateGone {
		return nil, nil, http.ErrHijacked
	}
	if c.inSession.Load() {
		// A request without a body, Upgrade or CONNECT, served inside a
		// read session (session.go): the socket cannot be read outside
		// that read until it ends.
		return nil, nil, errHijackInSession
	}
	if w.headSent || w.n > 0 {
		if err := w.send(nil, false); err != nil {
			return nil, nil, err
		}
	}
	c.state.Store(stateGone)
	c.watch.Store(false)
	if tc, ok := c.closer.Conn.(*net.TCPConn); ok {
		// A tunnel may carry nothing for hours: TCP keep-alive (net's
		// defaults) finds a client that vanished, which the accepting
		// listener leaves to the idle timeout for requests.
		tc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true})
	}
	var rd io.Reader = c.nc
	var left []byte
	if c.rbuf != nil && c.r < c.w {
		left = append(left, (*c.rbuf)[c.r:c.w]...)
		rd = io.MultiReader(bytes.NewReader(left), c.nc)
	}
	c.releaseRead()
	br := bufio.NewReaderSize(rd, max(bufSize, len(left)))
	if len(left) > 0 {
		br.Peek(len(left)) // the buffered bytes show in br.Buffered()
	}
	if w.wbuf != nil {
		pool.Put(w.wbuf)
		w.wbuf = nil
	}
	// The head's deadline (header or idle timeout) is not the handler's:
	// a hijacked connection (a WebSocket) reads for as long as it likes.
	c.setReadDeadline(time.Time{})
	return c.nc, bufio.NewReadWriter(br, bufio.NewWriter(c.nc)), nil
}

// appendStatus appends "code reason".
func appendStatus(b []byte, code int) []byte {
	if code == http.StatusOK {
		return append(b, "200 OK"...)
	}
	b = appendInt(b, int64(code))
	b = append(b, ' ')
	if text := http.StatusText(code); text != "" {
		return append(b, text...)
	}
	return append(b, "status code "...)
}

func appendInt(b []byte, n int64) []byte { return strconv.AppendInt(b, n, 10) }
