package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/queue-dev/queue/headers"
)

// serveH2 proxies r over the h2c upstream transport. Like serveH1, it
// returns an error only when nothing was written to w.
func (p *Proxy) serveH2(w http.ResponseWriter, r *http.Request, o *headers.Outbound) error {
	if r.Method == http.MethodConnect {
		return fmt.Errorf("%w: CONNECT", errBadRequest)
	}
	if r.RequestURI != "" && r.RequestURI[0] != '/' && r.RequestURI != "*" {
		return fmt.Errorf("%w: target %q", errBadRequest, truncate(r.RequestURI))
	}
	// HTTP/2 has no Upgrade (RFC 9113 section 8.2.2): a websocket request
	// reaches an h2c upstream as a plain GET.
	o.WebSocket = false
	ctx := r.Context()
	deadline := p.deadline(r)
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
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
	u := *r.URL
	u.Scheme, u.Host = "http", p.addr
	out.URL = &u
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
	if r.ContentLength == 0 {
		out.Body = nil
	}
	res, err := p.h2.RoundTrip(out)
	if err != nil {
		return h2Error(r, ctx, idle, err)
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
// deadline or the idle limit passed (504), or the upstream failed (502).
func h2Error(r *http.Request, ctx context.Context, idle *idleTimer, err error) error {
	switch {
	case r.Context().Err() != nil:
		return fmt.Errorf("%w: %w", errClientGone, err)
	case idle.fired(), errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("round trip: %w", context.DeadlineExceeded)
	}
	return fmt.Errorf("round trip: %w", err)
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
	bufp := copyPool.Get().(*[]byte)
	defer copyPool.Put(bufp)
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
