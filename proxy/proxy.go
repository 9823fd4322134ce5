package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queue-dev/queue/headers"
	"github.com/queue-dev/queue/internal/clock"
	"github.com/queue-dev/queue/internal/engine"
	"github.com/queue-dev/queue/internal/peer"
)

// Upstream protocols, named after the user container's port name.
const (
	HTTP1 = "http1"
	H2C   = "h2c"
)

// Config configures a Proxy. The zero value of each field is documented.
type Config struct {
	// Upstream is the user container's address, host:port. Required.
	Upstream string
	// Protocol is HTTP1 (the zero value means HTTP1) or H2C.
	Protocol string
	// Trust lists the peers whose Forwarded and X-Forwarded-* headers are
	// kept. The zero Trust trusts nobody.
	Trust headers.Trust
	// MaxIdleConns bounds the idle HTTP/1.1 upstream connections kept for
	// reuse. 0 means 1024.
	MaxIdleConns int
	// MaxResponseHeaderBytes bounds an upstream response head (and its
	// trailers). 0 means 64 KiB.
	MaxResponseHeaderBytes int
	// DialTimeout bounds a connect to the upstream. 0 means 5s.
	DialTimeout time.Duration
	// RetryWindow bounds how long a request whose connect the upstream
	// refused keeps trying to connect (Proxy.reconnect), within its own
	// deadline (DefaultRetryWindow explains the default queue uses). 0
	// means no retry: the request fails at once with 502.
	RetryWindow time.Duration
	// Timeout bounds the whole request, from the proxy's start (or an
	// earlier deadline on the request's context) to the end of the
	// response. 0 means none.
	Timeout time.Duration
	// ResponseStartTimeout bounds the wait for the first byte of the
	// response. 0 means none.
	ResponseStartTimeout time.Duration
	// IdleTimeout bounds the wait between two reads of the response body.
	// 0 means none.
	IdleTimeout time.Duration
	// IdleConnTimeout closes an upstream connection (HTTP/1.1, or h2c
	// without a stream) that stayed idle this long
	// (DefaultIdleConnTimeout explains the default queue uses). 0 means
	// never by age alone; an HTTP/1.1 connection is still closed before
	// the upstream's advertised Keep-Alive timeout.
	IdleConnTimeout time.Duration
	// Logger receives the upstream's changes of state. nil discards.
	Logger *slog.Logger
}

// Proxy is the terminal handler. Create it with New.
type Proxy struct {
	h1      *h1Transport
	h2c     *h2cTransport
	addr    string
	trust   headers.Trust
	timeout time.Duration
	start   time.Duration // response start
	idle    time.Duration
	log     *slog.Logger
	failing atomic.Bool // the last request failed at the upstream; logged on change only
	outage  *outage     // refused connects, retried within RetryWindow; nil: none

	tunnelMu sync.Mutex
	tunnels  map[io.Closer]struct{}
	tunnelWG sync.WaitGroup
}

// New validates cfg and returns a Proxy.
func New(cfg Config) (*Proxy, error) {
	if _, _, err := net.SplitHostPort(cfg.Upstream); err != nil {
		return nil, fmt.Errorf("upstream %q: want host:port", cfg.Upstream)
	}
	if cfg.RetryWindow < 0 {
		return nil, fmt.Errorf("retry window %v: want 0 or more", cfg.RetryWindow)
	}
	p := &Proxy{
		addr: cfg.Upstream, trust: cfg.Trust, log: cfg.Logger, tunnels: map[io.Closer]struct{}{},
		timeout: cfg.Timeout, start: cfg.ResponseStartTimeout, idle: cfg.IdleTimeout,
		outage: newOutage(cfg.RetryWindow),
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	dial := cfg.DialTimeout
	if dial == 0 {
		dial = 5 * time.Second
	}
	switch cfg.Protocol {
	case "", HTTP1:
		p.h1 = newH1Transport(cfg.Upstream, dial, cfg.MaxIdleConns, cfg.MaxResponseHeaderBytes, cfg.IdleConnTimeout)
		p.h1.outage = p.outage
	case H2C:
		p.h2c = newH2CTransport(cfg.Upstream, dial, cfg.MaxResponseHeaderBytes, cfg.IdleConnTimeout)
		p.h2c.outage = p.outage
	default:
		return nil, fmt.Errorf("upstream protocol %q: want %s or %s", cfg.Protocol, HTTP1, H2C)
	}
	return p, nil
}

func orDefault(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

// UpstreamUp tells the proxy that a connect to the upstream succeeded
// outside it (the readiness probe's): an outage of refused connects is
// over, and requests that wait for it go at once, as after a connect of
// their own. Without an outage it costs an atomic load. It is safe for
// concurrent use.
func (p *Proxy) UpstreamUp() { p.outage.up() }

// Close closes idle upstream connections and every websocket tunnel.
func (p *Proxy) Close() error {
	if p.h1 != nil {
		p.h1.closeIdle()
	}
	if p.h2c != nil {
		p.h2c.closeIdle()
	}
	p.CloseTunnels()
	return nil
}

// ServeHTTP sends r to the upstream and streams the response back.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var client netip.Addr
	if ap, ok := peer.From(r); ok {
		client = ap.Addr()
	} else {
		client = peerAddr(r.RemoteAddr)
	}
	hop := headers.Hop{Peer: client, TLS: r.TLS != nil, Trusted: p.trust.Contains(client)}
	o := headers.NewOutbound(r.Header, r.Host, hop)
	// Request framing needs no guard here: the HTTP/1.1 engine (package h1)
	// refuses Content-Length with Transfer-Encoding, and Transfer-Encoding
	// in HTTP/1.0, with 400 (RFC 9112 sections 6.1 and 6.3), so a chunked
	// upload read to its end keeps its connection.
	var err error
	if p.h1 != nil {
		err = p.serveH1(w, r, &o)
	} else {
		err = p.serveH2(w, r, &o)
	}
	if err != nil {
		p.Fail(w, r, err)
		return
	}
	if p.failing.Load() && p.failing.CompareAndSwap(true, false) {
		p.log.LogAttrs(r.Context(), slog.LevelInfo, "upstream recovered", slog.String("upstream", p.addr))
	}
}

// deadlineAt is the request's whole deadline: --timeout from now, or the
// request context's deadline when that is earlier. Zero means none.
func (p *Proxy) deadlineAt(r *http.Request, now time.Time) time.Time {
	var d time.Time
	if p.timeout > 0 {
		// Rounded up (clock.Deadline), so that consecutive requests on an
		// upstream connection share a deadline and skip the timer update
		// (h1Conn.setDeadline). A request may so run up to 1/16 longer
		// than --timeout.
		d = clock.Deadline(now, p.timeout)
	}
	if cd, ok := r.Context().Deadline(); ok && (d.IsZero() || cd.Before(d)) {
		d = cd
	}
	return d
}

// earliest returns the earlier of a deadline and now+d; zero values mean
// none.
func earliest(deadline time.Time, d time.Duration) time.Time {
	if d <= 0 {
		return deadline
	}
	t := time.Now().Add(d)
	if deadline.IsZero() || t.Before(deadline) {
		return t
	}
	return deadline
}

// peerAddr parses r.RemoteAddr without allocating; unknown forms give the
// zero Addr.
func peerAddr(remote string) netip.Addr {
	if ap, err := netip.ParseAddrPort(remote); err == nil {
		return ap.Addr()
	}
	return netip.Addr{}
}

// Fail answers a request that failed with err before any response was
// written: the status from StatusFor and its text as the body, never the
// error's. It is the one writer of error responses on the request path: the
// proxy's own failures and those of the layers in front of it (a full
// limiter queue, a wait that timed out) all go through it. A client that went
// away gets nothing: the connection is cut (HTTP/1.1) or the stream reset
// (HTTP/2) by panicking with http.ErrAbortHandler, which the server
// recovers. A 4xx, or a body the client may still be sending, closes an
// HTTP/1.1 connection after the response; a 4xx is also a glitch of the
// connection's (engine.Refuser), which on HTTP/2 counts against its budget.
func (p *Proxy) Fail(w http.ResponseWriter, r *http.Request, err error) {
	code := StatusFor(err)
	switch {
	case code == StatusClientClosed:
		if p.log.Enabled(r.Context(), slog.LevelDebug) {
			p.log.LogAttrs(r.Context(), slog.LevelDebug, "client went away",
				slog.String("remote_addr", r.RemoteAddr), slog.Any("err", err))
		}
		// Nothing is written: the connection is cut (HTTP/1.1 close,
		// HTTP/2 reset). Returning instead would let net/http send an empty
		// 200 to a client that is in fact still there.
		abort()
	case errors.Is(err, errBodyTimeout):
		// The rest of the body may still come: the connection cannot be
		// read for another request.
		w.Header()[headers.Connection] = connClose
	case code >= 500 && code != http.StatusServiceUnavailable:
		if p.failing.CompareAndSwap(false, true) {
			p.log.LogAttrs(r.Context(), slog.LevelWarn, "upstream failing",
				slog.String("upstream", p.addr), slog.Int("status", code), slog.Any("err", err))
		}
	}
	if code >= 400 && code < 500 {
		if rf, ok := engine.As[engine.Refuser](w); ok {
			rf.Refuse()
		}
	}
	writeError(w, code)
}

// writeError writes a complete error response: status code and its text as
// a plain-text body. Headers already set on w are dropped, but for a
// "Connection: close" that was decided before.
func writeError(w http.ResponseWriter, code int) {
	h := w.Header()
	closing := len(h[headers.Connection]) > 0
	clear(h)
	if closing {
		h[headers.Connection] = connClose
	}
	text := http.StatusText(code)
	h["Content-Type"] = textPlain
	h[headers.ContentLength] = []string{strconv.Itoa(len(text))}
	if code == http.StatusServiceUnavailable {
		// queue's own 503s (a full queue, a wait for a slot that ran
		// out) mean "try again shortly" (RFC 9110 section 10.2.3).
		h[headers.RetryAfter] = retryAfter
	}
	if code >= 400 && code < 500 {
		h[headers.Connection] = connClose
	}
	w.WriteHeader(code)
	io.WriteString(w, text)
}

var (
	textPlain  = []string{"text/plain; charset=utf-8"}
	connClose  = []string{"close"}
	retryAfter = []string{"1"}
)

// abort cuts a response that already started: HTTP/1.1 closes the
// connection, HTTP/2 resets the stream. A complete-looking response must
// never reach the client after an upstream failure.
func abort() { panic(http.ErrAbortHandler) }

// track registers an upgraded connection pair so that CloseTunnels can end
// it; the returned func unregisters it.
func (p *Proxy) track(c io.Closer) func() {
	p.tunnelMu.Lock()
	p.tunnels[c] = struct{}{}
	p.tunnelWG.Add(1)
	p.tunnelMu.Unlock()
	return func() {
		p.tunnelMu.Lock()
		delete(p.tunnels, c)
		p.tunnelMu.Unlock()
		p.tunnelWG.Done()
	}
}

// Tunnels reports the number of open upgraded (websocket) connections.
func (p *Proxy) Tunnels() int {
	p.tunnelMu.Lock()
	defer p.tunnelMu.Unlock()
	return len(p.tunnels)
}

// WaitTunnels blocks until every upgraded connection has ended or ctx is
// done.
func (p *Proxy) WaitTunnels(ctx context.Context) error { return wait(ctx, &p.tunnelWG) }

// wait waits for wg or ctx, whichever is first.
func wait(ctx context.Context, wg *sync.WaitGroup) error {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// CloseTunnels closes every upgraded connection.
func (p *Proxy) CloseTunnels() {
	p.tunnelMu.Lock()
	defer p.tunnelMu.Unlock()
	for c := range p.tunnels {
		c.Close()
	}
}
