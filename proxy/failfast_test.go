package proxy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/queue-dev/queue/internal/testnet"
)

// serveUntil listens on addr and serves it as an upstream of protocol
// proto (HTTP1 or H2C) that answers "METHOD LENGTH" to every request, until
// the test ends or the function it returns is called: the port refuses
// connects again after.
func serveUntil(t *testing.T, addr, proto string) (stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "%s %d", r.Method, n)
	})}
	if proto == H2C {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		srv.Protocols = &p
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return func() { srv.Close() }
}

// TestLongOutageFailsFast: the retry window is for a blip. The first
// request of an outage waits it out (and connects more than once: the
// probes); once the outage has lasted longer than the window, each new
// request gets its 502 after its one refused connect, with no wait and no
// probe, until a connect succeeds again: then requests are served. A
// connect that succeeded outside the proxy (the readiness probe's,
// UpstreamUp) ends the outage too, so that the next outage's first request
// waits its window again instead of failing at once.
func TestLongOutageFailsFast(t *testing.T) {
	t.Parallel()
	const window = 200 * time.Millisecond
	for _, proto := range []string{HTTP1, H2C} {
		t.Run(proto, func(t *testing.T) {
			t.Parallel()
			addr := testnet.ReservePort(t)
			p, c, url, connects := outageFront(t, "net-http", Config{Upstream: addr, Protocol: proto, RetryWindow: window, Timeout: time.Minute})
			get := func() (outcome, int64) {
				before := connects.Load()
				o := exchange(c, http.MethodPost, url+"/", strings.NewReader("body"))
				return o, connects.Load() - before
			}

			start := time.Now()
			o, n := get()
			if o.code != 502 || time.Since(start) < window || n < 2 {
				t.Fatalf("first request of the outage: %d %v after %v and %d connects, want 502 after the window (%v) and probes", o.code, o.err, time.Since(start), n, window)
			}
			for i := range 20 {
				if o, n := get(); o.code != 502 || n != 1 {
					t.Fatalf("request %d of a long outage: %d %q %v with %d connects, want 502 after one connect", i, o.code, o.body, o.err, n)
				}
			}
			if got := p.outage.waiting.Load(); got != 0 {
				t.Errorf("%d requests wait in a long outage, want 0", got)
			}

			stop := serveUntil(t, addr, proto)
			if o, _ := get(); o.code != 200 || o.body != "POST 4" {
				t.Fatalf("first request after the upstream came back: %d %q %v, want 200 %q", o.code, o.body, o.err, "POST 4")
			}

			// A long outage again, ended by UpstreamUp alone: the upstream
			// comes back, but no request connects before it goes down again.
			stop()
			c.CloseIdleConnections()
			// The first request may meet the connection the upstream closed
			// rather than a refused connect; the outage begins at the first
			// refusal.
			for i := 0; !p.outage.down.Load(); i++ {
				if i == 10 {
					t.Fatal("no outage after 10 requests to a closed port")
				}
				if o, _ := get(); o.code != 502 {
					t.Fatalf("second outage, request %d: %d %v, want 502", i, o.code, o.err)
				}
			}
			p.outage.mu.Lock()
			p.outage.began = p.outage.began.Add(-time.Hour) // as if it had lasted an hour
			p.outage.mu.Unlock()
			if o, n := get(); o.code != 502 || n != 1 {
				t.Fatalf("long second outage: %d %v with %d connects, want 502 after one connect", o.code, o.err, n)
			}
			p.UpstreamUp()
			start = time.Now()
			if o, n := get(); o.code != 502 || time.Since(start) < window || n < 2 {
				t.Errorf("a new outage after UpstreamUp: %d %v after %v and %d connects, want 502 after the window and probes", o.code, o.err, time.Since(start), n)
			}
		})
	}
}
