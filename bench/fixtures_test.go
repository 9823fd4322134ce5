//lint:file-ignore SA1019 the h2c client is golang.org/x/net/http2's, a second HTTP/2 implementation besides net/http's.

package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/queue-dev/queue/chain"
	"github.com/queue-dev/queue/drain"
	"github.com/queue-dev/queue/headers"
	"github.com/queue-dev/queue/ingress"
	"github.com/queue-dev/queue/proxy"
	"github.com/queue-dev/queue/stats"
	"golang.org/x/net/http2"
)

// size is one response body the upstream serves.
type size struct {
	name string // sub-benchmark name
	path string // upstream path
	n    int    // body length in bytes
}

var sizes = []size{
	{"0B", "/0", 0},
	{"1KiB", "/1k", 1 << 10},
	{"64KiB", "/64k", 64 << 10},
}

var size1KiB = sizes[1]

// The limits of queue's serving port, for the upstream and the naive
// proxy's servers.
const (
	readHeaderTimeout    = ingress.ReadHeaderTimeout
	idleTimeout          = ingress.IdleTimeout
	maxHeaderBytes       = ingress.MaxHeaderBytes
	maxConcurrentStreams = ingress.MaxConcurrentStreams
)

// newServer serves h on a fresh loopback port with the configuration of
// cmd/queue's plain ingress server: HTTP/1.1 and h2c with prior knowledge on
// one port. It returns the host:port and stops the server at cleanup.
func newServer(b *testing.B, h http.Handler) string {
	b.Helper()
	return newServerWith(b, func(*http.Server) http.Handler { return h })
}

// newServerWith is newServer for a handler that needs its server, as
// queue's outermost layer (the h2c upgrade) does.
func newServerWith(b *testing.B, handler func(*http.Server) http.Handler) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{
		Protocols:         &p,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		HTTP2:             &http.HTTP2Config{MaxConcurrentStreams: maxConcurrentStreams, MaxReadFrameSize: 16 << 10},
	}
	srv.Handler = handler(srv)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			b.Error(err)
		}
	}()
	b.Cleanup(func() {
		srv.Close()
		<-done
	})
	return ln.Addr().String()
}

// upstream is the user container: fixed bodies with a Content-Length and a
// Content-Type (so that net/http does not sniff), headers set from shared
// slices so that the upstream's own allocations stay small and constant.
type upstream struct {
	bodies map[string][]byte
	length map[string][]string
}

var octetStream = []string{"application/octet-stream"}

func newUpstream(b *testing.B) string {
	b.Helper()
	u := &upstream{bodies: map[string][]byte{}, length: map[string][]string{}}
	for _, s := range sizes {
		body := make([]byte, s.n)
		for i := range body {
			body[i] = 'a' + byte(i%26)
		}
		u.bodies[s.path] = body
		u.length[s.path] = []string{strconv.Itoa(s.n)}
	}
	return newServer(b, u)
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, ok := u.bodies[r.URL.Path]
	if !ok || r.Method != http.MethodGet {
		http.NotFound(w, r)
		return
	}
	h := w.Header()
	h["Content-Length"] = u.length[r.URL.Path]
	h["Content-Type"] = octetStream
	w.WriteHeader(http.StatusOK)
	w.Write(body)
}

// newQueue starts queue's proxy in front of the upstream at addr, speaking
// protocol (proxy.HTTP1 or proxy.H2C) to it, with the default trusted
// proxies of cmd/queue.
func newQueue(b *testing.B, addr, protocol string) string {
	b.Helper()
	// Served as cmd/queue serves it: the HTTP/1.1 engine, HTTP/2 handed to
	// its engine, the h2c upgrade outermost.
	srv := newIngress(b, addr, protocol)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	b.Cleanup(func() {
		srv.Close()
		<-done
	})
	return ln.Addr().String()
}

// newHTTPUtil starts the naive proxy: httputil.ReverseProxy with the
// Rewrite its docs recommend and a DefaultTransport clone that keeps enough
// idle connections for RunParallel.
func newHTTPUtil(b *testing.B, addr string) string {
	b.Helper()
	target := &url.URL{Scheme: "http", Host: addr}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 4096
	b.Cleanup(tr.CloseIdleConnections)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.SetXForwarded()
		},
		Transport: tr,
	}
	return newServer(b, rp)
}

// Clients. Both keep their connections alive across iterations, so that a
// benchmark measures requests, not connection setup.
const (
	h1Client  = "h1"
	h2cClient = "h2c"
)

func newClient(b *testing.B, kind string) http.RoundTripper {
	b.Helper()
	switch kind {
	case h1Client:
		var p http.Protocols
		p.SetHTTP1(true)
		tr := &http.Transport{
			Protocols:           &p,
			MaxIdleConnsPerHost: 4096,
			IdleConnTimeout:     90 * time.Second,
		}
		b.Cleanup(tr.CloseIdleConnections)
		return tr
	case h2cClient:
		// Prior knowledge (RFC 9113 section 3.3): the "TLS" dial is a plain
		// TCP dial.
		var d net.Dialer
		tr := &http2.Transport{
			AllowHTTP: true,
			DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
				return d.DialContext(ctx, network, addr)
			},
		}
		b.Cleanup(tr.CloseIdleConnections)
		return tr
	}
	b.Fatalf("unknown client %q", kind)
	return nil
}

func newRequest(b *testing.B, addr string, s size) *http.Request {
	b.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+s.path, nil)
	if err != nil {
		b.Fatal(err)
	}
	return req
}

// get sends req, reads the body to EOF and closes it (which returns the
// connection to the client's pool), and checks the status and length.
func get(rt http.RoundTripper, req *http.Request, want int) error {
	res, err := rt.RoundTrip(req)
	if err != nil {
		return err
	}
	n, err := io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if err != nil {
		return fmt.Errorf("%s %s: read body after %d bytes: %w", res.Proto, req.URL.Path, n, err)
	}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: status = %d, want 200", res.Proto, req.URL.Path, res.StatusCode)
	}
	if n != int64(want) {
		return fmt.Errorf("%s %s: body = %d bytes, want %d", res.Proto, req.URL.Path, n, want)
	}
	return nil
}

// runSizes runs one sub-benchmark per body size: sequential requests from
// one client through the server at addr.
func runSizes(b *testing.B, rt http.RoundTripper, addr string) {
	for _, s := range sizes {
		b.Run(s.name, func(b *testing.B) {
			req := newRequest(b, addr, s)
			// Warm up: open the connections (client to front, front to
			// upstream) before b.Loop starts the timer.
			if err := get(rt, req, s.n); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := get(rt, req, s.n); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// runParallel runs the 1 KiB request from GOMAXPROCS goroutines sharing one
// client: the HTTP/1.1 client opens one connection per goroutine, the h2c
// client multiplexes them on one connection.
func runParallel(b *testing.B, rt http.RoundTripper, addr string) {
	s := size1KiB
	b.Run(s.name, func(b *testing.B) {
		// Warm up with overlapping requests, one per RunParallel goroutine,
		// so that most connections exist before the timer starts.
		reqs := make([]*http.Request, runtime.GOMAXPROCS(0))
		for i := range reqs {
			reqs[i] = newRequest(b, addr, s)
		}
		errs := make([]error, len(reqs))
		var wg sync.WaitGroup
		for i, req := range reqs {
			wg.Go(func() { errs[i] = get(rt, req, s.n) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			req := reqs[0].Clone(context.Background())
			for pb.Next() {
				if err := get(rt, req, s.n); err != nil {
					// FailNow may not be called off the benchmark goroutine.
					b.Error(err)
					return
				}
			}
		})
	})
}

// newIngress composes the request path as cmd/queue does, in front of the
// upstream at addr, and returns the client-facing server for it.
func newIngress(b *testing.B, addr, protocol string) *ingress.Server {
	b.Helper()
	trust, err := headers.ParseTrust(headers.DefaultTrust)
	if err != nil {
		b.Fatal(err)
	}
	// The default configuration of cmd/queue: --timeout 300s, the drain
	// layer (probe answers, arrival counting) and the stats layer in front,
	// no limiter, tracing off.
	p, err := proxy.New(proxy.Config{Upstream: addr, Protocol: protocol, Trust: trust, Timeout: 300 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	// The chain as cmd/queue composes it, from the same package.
	handler, err := chain.New(chain.Config{
		Drain: drain.New(drain.Config{QuietPeriod: 30 * time.Second}),
		Stats: stats.New(stats.Config{}), // stats are always on
		Proxy: p,
	})
	if err != nil {
		b.Fatal(err)
	}
	srv, err := ingress.New(ingress.Config{Handler: handler, MaxConns: 10000})
	if err != nil {
		b.Fatal(err)
	}
	return srv
}
