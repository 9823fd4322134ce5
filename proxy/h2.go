package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"time"
	"unsafe"

	"github.com/queue-dev/queue/headers"
	"github.com/queue-dev/queue/internal/engine"
	"github.com/queue-dev/queue/internal/hpackw"
	"github.com/queue-dev/queue/internal/httpsem"
	"github.com/queue-dev/queue/internal/pool"
	"golang.org/x/net/http2"
)

// serveH2 proxies r over the h2c upstream client (h2c.go). Like serveH1,
// it returns an error only when nothing was written to w; a failure after
// the response started aborts it. The request is prepared as for
// HTTP/1.1 (prepareH1: the target, the deadline, a body held whole when
// small), then sent on a stream; a stream the upstream did not process
// (REFUSED_STREAM, or above a GOAWAY's last stream) is sent again once,
// on a fresh connection, when mayReplay allows and the body is whole in
// hand.
func (p *Proxy) serveH2(w http.ResponseWriter, r *http.Request, o *headers.Outbound) error {
	// HTTP/2 has no Upgrade (RFC 9113 section 8.2.2): a websocket request
	// reaches an h2c upstream as a plain GET.
	o.WebSocket = false
	var q h1Request
	err := p.prepareH1(&q, w, r, o)
	defer pool.Put(q.buf) // nil when the body was not read into one
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		sent, err := p.attemptH2C(&q, w, o, attempt)
		if !errors.Is(err, errRefusedStream) {
			return err
		}
		switch {
		case !sent && attempt == 0:
			// Nothing of it went out: any request may go again.
		case attempt > 0 || q.stream || !mayReplay(r, 1):
			return fmt.Errorf("%w: %w", errNotReplayed, err)
		}
	}
}

// attemptH2C makes one attempt at q: a stream (on a pooled connection on
// the first attempt, on a fresh one after), the exchange, and the stream
// released however the exchange ends, an abort included. sent reports
// that the request went out on the stream.
func (p *Proxy) attemptH2C(q *h1Request, w http.ResponseWriter, o *headers.Outbound, attempt int) (sent bool, err error) {
	ctx := q.r.Context()
	s, err := p.h2c.get(ctx, attempt > 0)
	if err != nil {
		// A refused connect reached nothing: it is tried again, within
		// --upstream-retry-window (reconnect).
		err = p.reconnect(ctx, q.deadline, err, func() (err error) {
			s, err = p.h2c.get(ctx, attempt > 0)
			return err
		})
	}
	if err != nil {
		if ctx.Err() != nil {
			return false, fmt.Errorf("%w: %w", errClientGone, err)
		}
		return false, err
	}
	defer func() {
		sent = s.id != 0
		s.c.release(s)
	}()
	return false, p.exchangeH2C(q, s, w, o)
}

// errNotReplayed is the failure of a request that the upstream failed and
// that may not be sent again (mayReplay).
var errNotReplayed = errors.New("the upstream failed a request that may not be sent again")

// exchangeH2C runs one attempt at q on stream s: the request sent (its
// body by pump when it does not go with the head), the response passed
// on to w as it comes. It returns an error only when nothing was written
// to w; errRefusedStream when the upstream did not process the stream.
func (p *Proxy) exchangeH2C(q *h1Request, s *h2cStream, w http.ResponseWriter, o *headers.Outbound) error {
	r, c := q.r, s.c
	ctx := r.Context()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", errClientGone, err) // gone before it went out
	}
	size := s.encodeRequest(q, o)
	pumping, err := s.open(q, size)
	if err != nil {
		return err
	}
	if pumping {
		rc := http.NewResponseController(w)
		// queue's engines read a body while the response is written; for
		// net/http's HTTP/1 server it has to be asked (see startBody).
		rc.EnableFullDuplex()
		if !q.deadline.IsZero() {
			rc.SetReadDeadline(q.deadline) // a slow upload is cut at --timeout
		}
		go s.pump(r, q.body)
		defer p.stopPump(s, rc, q.deadline)
	}
	// The client's going is learnt from s.wake too when the engine offers
	// it (engine.CancelNotifier): one channel to wait on, not a select.
	cn, _ := w.(engine.CancelNotifier)
	if cn != nil {
		cn.NotifyCancel(s.wake)
		defer cn.NotifyCancel(nil)
	}
	var (
		done    <-chan struct{}
		head    bool
		dirty   bool // written to w since the last flush
		written int64
		wrc     *http.ResponseController // the client's write deadline is set
	)
	defer func() {
		if wrc != nil {
			wrc.SetWriteDeadline(time.Time{})
		}
	}()
	f, _ := w.(http.Flusher)
	start := q.now
	for {
		c.mu.Lock()
		s.due = time.Time{} // the handler is not waiting: tick leaves it be
		switch {
		case !head && s.status != 0:
			c.mu.Unlock()
			if err := p.writeHeadH2C(q, s, w); err != nil {
				c.mu.Lock()
				c.resetLocked(s, http2.ErrCodeProtocol)
				c.mu.Unlock()
				return err
			}
			head = true
			continue
		case s.in.n > 0:
			s.out, s.in = s.in, s.out
			n := int64(s.out.n)
			s.recvWindow += n
			s.recvUnacked += n + s.padding
			s.padding = 0
			if s.recvUnacked >= h2cStreamWindow/2 && !s.ended {
				c.wq = hpackw.AppendFrameHeader(c.wq, 4, byte(http2.FrameWindowUpdate), 0, s.id)
				c.wq = append(c.wq, byte(s.recvUnacked>>24), byte(s.recvUnacked>>16), byte(s.recvUnacked>>8), byte(s.recvUnacked))
				s.recvUnacked = 0
				c.kickLocked()
			}
			c.mu.Unlock()
			b := s.out.bytes()
			written += int64(len(b))
			if s.contentLength >= 0 && written > s.contentLength {
				c.mu.Lock()
				c.resetLocked(s, http2.ErrCodeProtocol)
				c.mu.Unlock()
				abort() // more than its Content-Length (RFC 9113 section 8.1.1)
			}
			if _, err := w.Write(b); err != nil {
				return nil // the client went away: the stream is reset (release)
			}
			s.out.n = 0
			dirty = true
			if wrc == nil && written > lazyWriteDeadline && !q.deadline.IsZero() {
				// A client that reads slowly is cut at --timeout too
				// (copier.wrote).
				wrc = http.NewResponseController(w)
				wrc.SetWriteDeadline(q.deadline)
			}
			continue
		case head && s.ended:
			c.mu.Unlock()
			if s.contentLength >= 0 && written != s.contentLength {
				abort()
			}
			if s.gotTrailers {
				h := w.Header()
				for _, f := range s.trailers {
					key := textproto.CanonicalMIMEHeaderKey(f.Name)
					if !forbiddenTrailer(key) && validFieldValue(f.Value) {
						h[http.TrailerPrefix+key] = append(h[http.TrailerPrefix+key], f.Value)
					}
				}
			}
			return nil
		case s.failure != nil || s.rstRecv || s.rstSent || c.err != nil || s.timedOut:
			err := s.failureLocked()
			c.mu.Unlock()
			if !head {
				return err
			}
			if ctx.Err() != nil {
				return nil
			}
			abort()
		}
		// Nothing to do: wait, by the deadline that applies.
		due := q.deadline
		if !head && p.start > 0 {
			due = earliestAt(due, start.Add(p.start))
		}
		if head && p.idle > 0 {
			due = earliestAt(due, time.Now().Add(p.idle))
		}
		s.due = due
		if !due.IsZero() {
			c.armLocked(due)
		}
		c.mu.Unlock()
		if dirty && f != nil {
			f.Flush() // before the wait: what came so far goes to the client now
			dirty = false
		}
		if cn != nil {
			<-s.wake
			if ctx.Err() == nil {
				continue
			}
		} else {
			if done == nil {
				done = ctx.Done()
			}
			select {
			case <-s.wake:
				continue
			case <-done:
			}
		}
		// The client went away (or reset its stream): the upstream
		// stream is reset at once (release), before the handler returns.
		if head {
			return nil
		}
		return fmt.Errorf("%w: %w", errClientGone, ctx.Err())
	}
}

// earliestAt returns the earlier of two times; zero means none.
func earliestAt(a, b time.Time) time.Time {
	if a.IsZero() || !b.IsZero() && b.Before(a) {
		return b
	}
	return a
}

// noBody reports a response that has no body whatever its Content-Length.
func noBody(method string, status int) bool {
	return method == http.MethodHead || status == http.StatusNoContent || status == http.StatusNotModified
}

// failureLocked says why s failed, for StatusFor: a stream the upstream
// did not process, a timeout, a reset, the connection's failure.
func (s *h2cStream) failureLocked() error {
	c := s.c
	switch {
	case s.timedOut:
		return fmt.Errorf("h2c stream: %w", context.DeadlineExceeded)
	case s.failure != nil:
		return s.failure
	case s.refused || s.rstRecv && s.rstCode == http2.ErrCodeRefusedStream:
		return errRefusedStream
	case s.rstRecv:
		return fmt.Errorf("%w: the upstream reset the stream: %v", errBadResponse, s.rstCode)
	case c.err != nil:
		return fmt.Errorf("h2c connection: %w", c.err)
	}
	return fmt.Errorf("%w: stream reset", errBadResponse)
}

// stopPump waits for the body's sender; if it still runs (the response
// ended first, or failed), it is stopped: its wait for room ends, and a
// read of the client's body that may wait is given a past deadline
// (bodyWriter.stop explains when not).
func (p *Proxy) stopPump(s *h2cStream, rc *http.ResponseController, deadline time.Time) {
	var err error
	select {
	case err = <-s.bodyDone:
	default:
		c := s.c
		c.mu.Lock()
		s.stopBody = true
		c.mu.Unlock()
		select {
		case s.bodyWake <- struct{}{}:
		default:
		}
		client := !s.bodyRead.Load()
		if client {
			rc.SetReadDeadline(aLongTimeAgo)
		}
		err = <-s.bodyDone
		if err == nil && client {
			rc.SetReadDeadline(time.Time{})
		}
		return
	}
	if err == nil && !deadline.IsZero() {
		rc.SetReadDeadline(time.Time{})
	}
}

// writeHeadH2C passes the response head on to w: for one of queue's
// engines (engine.Keeper) as an engine.ResponseHead whose names are
// canonicalised into the keep buffer and whose values are the HPACK
// decoder's strings, with no header map; for any other writer, or a head
// that declares trailers, into w's header map. A malformed head
// (RFC 9113 section 8.2) is refused with errBadResponse.
func (p *Proxy) writeHeadH2C(q *h1Request, s *h2cStream, w http.ResponseWriter) error {
	cl := int64(-1)
	asFields := q.keep != nil
	declared := false // the head declares trailers
	names := 0
	for _, f := range s.fields {
		if !validLowerName(f.Name) || !validFieldValue(f.Value) {
			return fmt.Errorf("%w: field %q", errBadResponse, truncate(f.Name))
		}
		switch f.Name {
		case "te":
			continue // a request's field (RFC 9113 section 8.2.2): dropped
		case "content-length":
			n, ok := httpsem.ParseDigits(f.Value)
			if !ok || cl >= 0 && n != cl {
				return fmt.Errorf("%w: content-length %q", errBadResponse, truncate(f.Value))
			}
			cl = n
			continue
		case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
			return fmt.Errorf("%w: connection-specific field %q", errBadResponse, f.Name)
		case "trailer":
			asFields, declared = false, true
		}
		names += len(f.Name)
	}
	s.contentLength = cl
	if noBody(q.r.Method, s.status) {
		s.contentLength = -1 // no body; the length describes the resource
	}
	if asFields {
		kh := q.keep.KeepHead()
		kh.Reset()
		buf := q.keep.KeepBuffer(names)
		for _, f := range s.fields {
			if f.Name == "content-length" || f.Name == "te" {
				continue
			}
			n := canonicalInto(buf, f.Name)
			name := unsafe.String(&buf[0], n)
			buf = buf[n:]
			if f.Name == "date" {
				kh.Date = true
			}
			kh.Fields = append(kh.Fields, engine.Field{Name: name, Value: f.Value})
		}
		kh.ContentLength = cl
		kh.Status = s.status // handed over
	} else {
		h := w.Header()
		for _, f := range s.fields {
			key := textproto.CanonicalMIMEHeaderKey(f.Name)
			if key == headers.ContentLength && declared {
				// Trailers are coming: an HTTP/1.1 client can only get
				// them in a chunked body, which a length would rule out
				// (net/http's server decides by the header as it stands
				// at WriteHeader, the Trailer declaration kept in it).
				continue
			}
			if headers.IsHopByHop(key, nil) {
				continue
			}
			h[key] = append(h[key], f.Value)
		}
	}
	w.WriteHeader(s.status)
	return nil
}

// canonicalInto writes name (lowercase) into dst in the canonical form
// of header keys ("content-type" becomes "Content-Type") and returns its
// length.
func canonicalInto(dst []byte, name string) int {
	upper := true
	for i := 0; i < len(name); i++ {
		ch := name[i]
		if upper && 'a' <= ch && ch <= 'z' {
			ch -= 'a' - 'A'
		}
		dst[i] = ch
		upper = ch == '-'
	}
	return len(name)
}

// validLowerName reports a field name HTTP/2 allows: a token without
// uppercase (RFC 9113 section 8.2.1).
func validLowerName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if 'A' <= c && c <= 'Z' || !httpsem.IsTchar(c) {
			return false
		}
	}
	return true
}
