package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/queue-dev/queue/headers"
	"github.com/queue-dev/queue/internal/pool"
)

// serveH2 proxies r over the h2c upstream transport. Like serveH1, it
// returns an error only when nothing was written to w.
func (p *Proxy) serveH2(w http.ResponseWriter, r *http.Request, o *headers.Outbound) error {
	if _, err := upstreamTarget(r, o); err != nil {
		return err
	}
	// HTTP/2 has no Upgrade (RFC 9113 section 8.2.2): a websocket request
	// reaches an h2c upstream as a plain GET.
	o.WebSocket = false
	ctx := r.Context()
	deadline := p.deadline(r)
	call := &h2Call{r: r}
	bodiless := r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody
	var cancel context.CancelFunc
	if !deadline.IsZero() {
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	} else if bodiless {
		ctx, cancel = context.WithCancel(ctx) // for h2Call to stop a replay
		defer cancel()
	}
	if bodiless {
		ctx = call.bound(ctx, cancel)
	}
	var idle *idleTimer
	if p.idle > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		idle = &idleTimer{d: p.idle, cancel: cancel}
		defer idle.stop()
	}
	out := r.WithContext(ctx)
	u := &call.url
	*u = *r.URL
	u.Scheme, u.Host = "http", p.addr
	out.URL = u
	out.Host = o.Host
	out.RequestURI = ""
	out.Close = false
	out.Header = r.Header
	o.Apply(out.Header)
	if r.ProtoMajor == 1 {
		// The HTTP/1.1 engine's strings live as long as the request; the
		// Transport's HPACK encoder keeps them for the connection's life.
		ownStrings(out.Header)
		u.Path, u.RawPath, u.RawQuery = strings.Clone(u.Path), strings.Clone(u.RawPath), strings.Clone(u.RawQuery)
		out.Host, out.Method = strings.Clone(out.Host), strings.Clone(out.Method)
	}
	if _, ok := out.Header["User-Agent"]; !ok {
		out.Header["User-Agent"] = noUserAgent // else the Transport sends its own
	}
	if bodiless {
		out.Body = nil
	} else {
		call.body.ReadCloser = r.Body
		out.Body = &call.body
	}
	res, err := p.h2.RoundTrip(out)
	if err != nil {
		// A refused connect reached nothing: the request is sent again,
		// within --upstream-retry-window (reconnect).
		err = p.reconnect(ctx, deadline, err, func() (err error) {
			res, err = p.h2.RoundTrip(out)
			return err
		})
	}
	if err != nil {
		if berr := call.body.failed(); berr != nil {
			return bodyError(berr) // the client's body failed the round trip
		}
		return h2Error(r, ctx, idle, call.refused.Load(), err)
	}
	defer res.Body.Close()
	h := w.Header()
	conn := res.Header[headers.Connection]
	for k, vv := range res.Header {
		if !headers.IsHopByHop(k, conn) {
			h[k] = vv
		}
	}
	if !deadline.IsZero() {
		// A client that reads slowly is cut at --timeout too. Set only now
		// that there is a response: a 504 must not race the client's cut.
		rc := http.NewResponseController(w)
		rc.SetWriteDeadline(deadline)
		defer rc.SetWriteDeadline(time.Time{})
	}
	w.WriteHeader(res.StatusCode)
	if err := copyStream(w, res.Body, res.ContentLength, idle); err != nil {
		if errors.Is(err, errClientGone) || r.Context().Err() != nil {
			return nil
		}
		abort()
	}
	for k, vv := range res.Trailer {
		if !forbiddenTrailer(k) {
			h[http.TrailerPrefix+k] = vv
		}
	}
	return nil
}

var noUserAgent = []string{""}

// h2Error classifies a round-trip failure: the client went away (499), a
// deadline or the idle limit passed (504), or the upstream failed (502),
// refused (h2Call stopped a replay; err is then the cancellation that
// stopped it) included.
func h2Error(r *http.Request, ctx context.Context, idle *idleTimer, refused bool, err error) error {
	switch {
	case r.Context().Err() != nil:
		return fmt.Errorf("%w: %w", errClientGone, err)
	case refused:
		return fmt.Errorf("round trip: %w", errNotReplayed)
	case idle.fired(), errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("round trip: %w", context.DeadlineExceeded)
	}
	return fmt.Errorf("round trip: %w", err)
}

// errNotReplayed is the failure of a request that the upstream failed and
// that may not be sent again (mayReplay).
var errNotReplayed = errors.New("the upstream failed a request that may not be sent again")

// h2Call is one request's trip through the h2c Transport: the URL and body
// the Transport sees and, for a request without a body, the bound on the
// Transport's own replays of it. serveH2 allocates one per request, which
// the URL alone cost before.
//
// net/http's HTTP/2 client retries a request by itself (net/http's
// internal/http2 transport.go, Go 1.27: RoundTripOpt loops up to 7 times,
// with a backoff from the third attempt, and net/http's Transport.roundTrip
// starts that loop again on each new connection it dials after a dead one):
// on a stream refused (REFUSED_STREAM), a GOAWAY whose last stream id is
// below the request's, and a connection that turned unusable before the
// request was written (canRetryError); none of these reached the upstream's
// handler (RFC 9113 section 8.7). It replays a request without a body
// whatever its method; a request with one only if it has GetBody, which
// queue never sets, or if nothing of it was written. So a request with a
// body is never sent twice, and one without is bounded here, from outside:
// its context carries a ClientTrace whose WroteHeaders counts the attempts
// that wrote the request (sent), and whose GotConn, called by RoundTripOpt
// before each attempt, asks mayReplay and stops an attempt the rule refuses
// by cancelling the request's context, which the HTTP/2 client checks
// before it writes the HEADERS (encodeAndWriteHeaders): nothing of that
// attempt reaches the upstream. A refused request gets 502
// (errNotReplayed). A stream reset with PROTOCOL_ERROR, which may come
// after the upstream began the request, is not retried (Go 1.26's client
// did retry it). The cost is the allocations of the two hooks and the
// context value on every request, and after a second REFUSED_STREAM
// the client's one-second backoff before the attempt the trace refuses.
type h2Call struct {
	url     url.URL
	body    keptBody
	r       *http.Request
	cancel  context.CancelFunc
	trace   httptrace.ClientTrace
	sent    atomic.Int32 // attempts that wrote the request's HEADERS
	refused atomic.Bool  // gotConn stopped an attempt
}

// bound installs the trace on ctx; cancel stops the request.
func (c *h2Call) bound(ctx context.Context, cancel context.CancelFunc) context.Context {
	c.cancel = cancel
	c.trace.GotConn = c.gotConn
	c.trace.WroteHeaders = c.wroteHeaders
	return httptrace.WithClientTrace(ctx, &c.trace)
}

// gotConn runs before each attempt, on the goroutine of RoundTrip, after
// the previous attempt ended (its WroteHeaders, if any, came before).
func (c *h2Call) gotConn(httptrace.GotConnInfo) {
	if !mayReplay(c.r, int(c.sent.Load())) {
		c.refused.Store(true)
		c.cancel()
	}
}

func (c *h2Call) wroteHeaders() { c.sent.Add(1) }

// keptBody is a request body as the h2c Transport sees it: Close does
// nothing, so that a request whose connect was refused, which the
// Transport fails by closing its body, can be sent again whole
// (reconnect). The server closes the body itself when the handler
// returns; queue's engines' bodies ignore Close anyway (h1 and h2), and
// the Transport reads the body only once it has a connection.
// It also keeps the first error the client's body gave (a client that went
// away mid-body, a malformed chunk), which the Transport reports as its own
// failure: h2Error answers for the client instead (bodyError).
type keptBody struct {
	io.ReadCloser
	err atomic.Pointer[error] // set by the Transport's body writer
}

func (b *keptBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		b.err.CompareAndSwap(nil, &err)
	}
	return n, err
}

func (*keptBody) Close() error { return nil }

// failed returns the client body's error, or nil.
func (b *keptBody) failed() error {
	if e := b.err.Load(); e != nil {
		return *e
	}
	return nil
}

// idleTimer cancels the upstream request when no read completes within d.
// A nil *idleTimer does nothing.
type idleTimer struct {
	d      time.Duration
	cancel context.CancelFunc
	t      *time.Timer
	hit    atomic.Bool
}

func (i *idleTimer) arm() {
	if i == nil {
		return
	}
	if i.t == nil {
		i.t = time.AfterFunc(i.d, func() { i.hit.Store(true); i.cancel() })
		return
	}
	i.t.Reset(i.d)
}

func (i *idleTimer) stop() {
	if i != nil && i.t != nil {
		i.t.Stop()
	}
}

func (i *idleTimer) fired() bool { return i != nil && i.hit.Load() }

// copyStream copies body to w, flushing after every read unless the body's
// length is known and reached: an HTTP/2 upstream's DATA frames (a gRPC
// stream's messages) reach the client as they come.
func copyStream(w http.ResponseWriter, body io.Reader, length int64, idle *idleTimer) error {
	f, _ := w.(http.Flusher)
	bufp := pool.Get(pool.Copy)
	defer pool.Put(bufp)
	buf := *bufp
	var n int64
	for {
		idle.arm()
		m, rerr := body.Read(buf)
		if m > 0 {
			if _, err := w.Write(buf[:m]); err != nil {
				return fmt.Errorf("%w: %w", errClientGone, err)
			}
			n += int64(m)
			if f != nil && (length < 0 || n < length) {
				f.Flush()
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return fmt.Errorf("read response body: %w", rerr)
		}
	}
}
