package h3

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/queue-dev/queue/internal/engine"
	"github.com/queue-dev/queue/internal/httpsem"
)

// flushAt is the most response bytes held before they are written: a
// response whose body comes in one Write this small leaves in one stream
// write, HEADERS and DATA together.
const flushAt = 16 << 10

// response is a stream's http.ResponseWriter. Its head is encoded at the
// first Write or Flush, or when the handler returns, as HTTP/2's is.
type response struct {
	st  *stream
	hdr http.Header

	status      int
	wroteHeader bool
	headSent    bool // the head is in out or written
	ended       bool // FIN sent
	written     int64
	declared    int64 // Content-Length of the response, or -1
	noBody      bool
	failed      error // a stream write failed: the response is cut
	pending     bool  // out holds the response's end: the sender writes it, with the FIN

	// What the proxy hands over (engine.Keeper): the upstream's head, and
	// storage that lives until the response is complete.
	engine.Kept

	out      []byte // frames not yet written
	block    []byte // an encoded field section, reused
	lower    []byte
	trailers []string

	deadline  time.Time // the handler's write deadline (SetWriteDeadline), or zero
	wdl       time.Time // the stream's write deadline as last set
	stopWatch func() bool
}

func (w *response) reset() {
	clear(w.hdr)
	w.status, w.wroteHeader, w.headSent, w.ended = 0, false, false, false
	w.written, w.declared, w.noBody, w.failed, w.pending = 0, -1, false, nil, false
	w.Kept.Reset()
	w.out = w.out[:0]
	w.deadline, w.wdl = time.Time{}, time.Time{}
}

var (
	_ engine.Keeper         = (*response)(nil)
	_ engine.Refuser        = (*response)(nil)
	_ engine.CancelNotifier = (*response)(nil)
	_ http.Flusher          = (*response)(nil)
)

// Header implements http.ResponseWriter.
func (w *response) Header() http.Header { return w.hdr }

// Status reports the final status written, 0 if none (stats.Reporter).
func (w *response) Status() int { return w.status }

// Written reports the body bytes written (stats.Reporter).
func (w *response) Written() int64 { return w.written }

// Refuse counts a request queue answers itself (engine.Refuser):
// GlitchRefused, and the stream takes none back when it ends.
func (w *response) Refuse() {
	if !w.st.refused {
		w.st.refused = true
		w.st.c.glitch(GlitchRefused)
	}
}

// NotifyCancel has ch get a value when the request's context is canceled,
// until NotifyCancel(nil) (engine.CancelNotifier).
func (w *response) NotifyCancel(ch chan<- struct{}) {
	if w.stopWatch != nil {
		w.stopWatch()
		w.stopWatch = nil
	}
	if ch != nil {
		w.stopWatch = context.AfterFunc(w.st.str.Context(), func() {
			select {
			case ch <- struct{}{}:
			default:
			}
		})
	}
}

// WriteHeader implements http.ResponseWriter. An informational status is
// sent at once; 101 is ignored (HTTP/3 has no upgrade).
func (w *response) WriteHeader(code int) {
	if w.wroteHeader || code == http.StatusSwitchingProtocols {
		return
	}
	if code < 100 || code > 999 {
		panic("h3: invalid WriteHeader code " + strconv.Itoa(code))
	}
	if code < 200 {
		w.appendHead(code, false)
		w.flush(false)
		return
	}
	w.status, w.wroteHeader = code, true
	w.noBody = code == http.StatusNoContent || code == http.StatusNotModified || w.st.req.Method == http.MethodHead
}

// Write implements http.ResponseWriter.
func (w *response) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.noBody {
		if w.st.req.Method == http.MethodHead {
			return len(p), nil
		}
		return 0, http.ErrBodyNotAllowed
	}
	if w.failed != nil {
		return 0, w.failed
	}
	if !w.headSent {
		w.declared = httpsem.DeclaredLength(w.hdr, w.UpstreamLength())
		w.appendHead(w.status, true)
	}
	var err error
	if w.declared >= 0 && w.written+int64(len(p)) > w.declared {
		p = p[:w.declared-w.written]
		err = http.ErrContentLength
	}
	if len(p) == 0 {
		return 0, err
	}
	w.out = appendFrameHeader(w.out, frameData, uint64(len(p)))
	if len(w.out)+len(p) <= flushAt {
		w.out = append(w.out, p...)
	} else {
		// Large: the frame header and what is held go first, the data
		// from the handler's slice.
		if werr := w.flush(false); werr != nil {
			return 0, werr
		}
		if werr := w.write(p); werr != nil {
			return 0, werr
		}
	}
	w.written += int64(len(p))
	return len(p), err
}

// Flush implements http.Flusher.
func (w *response) Flush() { w.FlushError() }

// FlushError writes the head if it is not written, and what is held.
func (w *response) FlushError() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.headSent {
		w.declared = httpsem.DeclaredLength(w.hdr, w.UpstreamLength())
		w.appendHead(w.status, true)
	}
	return w.flush(false)
}

// SetWriteDeadline bounds the response's writes (http.ResponseController).
func (w *response) SetWriteDeadline(t time.Time) error {
	w.deadline = t
	return nil
}

// SetReadDeadline bounds the reads of the request body.
func (w *response) SetReadDeadline(t time.Time) error {
	return w.st.str.SetReadDeadline(t)
}

// EnableFullDuplex: HTTP/3 streams are full duplex.
func (w *response) EnableFullDuplex() error { return nil }

// Hijack is refused: an HTTP/3 stream has no connection of its own.
func (w *response) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return nil, nil, http.ErrNotSupported
}

// flush writes what is held, with the stream's FIN when fin.
func (w *response) flush(fin bool) error {
	if w.failed != nil {
		return w.failed
	}
	if len(w.out) > 0 {
		err := w.write(w.out)
		w.out = w.out[:0]
		if err != nil {
			return err
		}
	}
	if fin {
		w.ended = true
		return w.st.str.Close()
	}
	return nil
}

// write writes p to the stream, within WriteTimeout (or the handler's
// earlier deadline) of waiting for the client's flow control. The
// stream's deadline is moved only when less than WriteTimeout is left, to
// 9/8 of it: a write may wait up to an eighth longer than WriteTimeout,
// never less, and most writes make no call into quic-go for it.
func (w *response) write(p []byte) error {
	timeout := w.st.c.s.writeTimeout()
	now := time.Now()
	switch {
	case !w.deadline.IsZero() && w.deadline.Before(now.Add(timeout)):
		if !w.deadline.Equal(w.wdl) {
			w.st.str.SetWriteDeadline(w.deadline)
			w.wdl = w.deadline
		}
	case w.wdl.Before(now.Add(timeout)) || w.wdl.Equal(w.deadline):
		w.wdl = now.Add(timeout + timeout/8)
		w.st.str.SetWriteDeadline(w.wdl)
	}
	if _, err := w.st.str.Write(p); err != nil {
		w.failed = err
		w.st.str.CancelWrite(quic.StreamErrorCode(errRequestCancelled))
		if os.IsTimeout(err) {
			return os.ErrDeadlineExceeded
		}
		return err
	}
	return nil
}

// appendHead encodes a head into out: status, the upstream's fields, the
// header map, and a Date if none came. final is false for a 1xx.
func (w *response) appendHead(status int, final bool) {
	b := appendPrefix(w.block[:0])
	b = appendStatus(b, status)
	up := w.Upstream()
	if !final {
		up = nil
	}
	date := false
	if up != nil {
		date = up.Date
		for _, f := range up.Fields {
			b = appendField(b, httpsem.Lower(&w.lower, f.Name), f.Value)
		}
	}
	for k, vv := range w.hdr {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			continue
		}
		name := httpsem.Lower(&w.lower, k)
		if httpsem.ConnectionSpecific(name) || name == "trailer" {
			continue
		}
		if name == "date" {
			date = true
		}
		b = appendValues(b, name, vv)
	}
	if up != nil && up.ContentLength >= 0 && w.hdr["Content-Length"] == nil && status != http.StatusNoContent {
		var d [20]byte
		b = appendField(b, "content-length", string(strconv.AppendInt(d[:0], up.ContentLength, 10)))
	}
	if final && !date {
		var d [32]byte
		b = appendField(b, "date", string(httpsem.AppendDate(d[:0])))
	}
	w.block = b
	w.out = appendFrameHeader(w.out, frameHeaders, uint64(len(b)))
	w.out = append(w.out, b...)
	if final {
		w.headSent = true
	}
}

// appendValues appends a field of each valid value.
func appendValues(b []byte, name string, values []string) []byte {
	for _, v := range values {
		if httpsem.ValidFieldValue(v) {
			b = appendField(b, name, v)
		}
	}
	return b
}

// cut resets the stream: a response cut short must not look whole.
func (w *response) cut() {
	w.out = w.out[:0]
	w.st.str.CancelWrite(quic.StreamErrorCode(errInternal))
}

// finish ends the response when the handler returned: the head if it was
// not written, what is held, the trailers, the FIN; or a reset after a
// panic or a short body. It reports whether the response ended whole.
func (w *response) finish(aborted bool) bool {
	if w.stopWatch != nil {
		w.stopWatch()
		w.stopWatch = nil
	}
	if aborted || w.failed != nil {
		w.cut()
		return false
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	trailers := httpsem.HasTrailers(w.hdr)
	if !w.headSent {
		w.declared = httpsem.DeclaredLength(w.hdr, w.UpstreamLength())
		if w.declared > 0 && !w.noBody {
			w.cut() // a body declared and never written
			return false
		}
		if w.declared < 0 && !w.noBody && !trailers {
			w.hdr["Content-Length"] = zeroLength
		}
		w.appendHead(w.status, true)
	}
	if w.declared > 0 && w.written < w.declared && !w.noBody {
		w.cut() // less than declared
		return false
	}
	if trailers {
		w.appendTrailers()
	}
	if w.failed != nil {
		return false
	}
	w.pending = true
	return true
}

// sendEnd writes the response's end, held in out, with the stream's FIN,
// on the connection's sender: without waiting, when the client's flow
// control has room for it (nearly always), or on a goroutine of its own
// that waits within WriteTimeout. The stream is done after it.
func (w *response) sendEnd() {
	st := w.st
	err := st.str.TryWriteAll(w.out)
	if errors.Is(err, quic.ErrWouldBlock) {
		go func() {
			err := w.flush(true)
			st.c.done(st, st.served && err == nil)
		}()
		return
	}
	w.out = w.out[:0]
	if err == nil {
		err = st.str.Close()
	} else {
		st.str.CancelWrite(quic.StreamErrorCode(errRequestCancelled))
	}
	st.c.done(st, st.served && err == nil)
}

var zeroLength = []string{"0"}

// appendTrailers encodes the trailers into out: the fields named by
// Trailer, and those with http.TrailerPrefix.
func (w *response) appendTrailers() {
	b := appendPrefix(w.block[:0])
	n := len(b)
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
	if len(b) == n {
		return // none had a value
	}
	w.out = appendFrameHeader(w.out, frameHeaders, uint64(len(b)))
	w.out = append(w.out, b...)
}
