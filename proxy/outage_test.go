package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/queue-dev/queue/h1"
	"github.com/queue-dev/queue/internal/testnet"
)

// TestRefusedConnect: only a connect that reached nothing is retried.
func TestRefusedConnect(t *testing.T) {
	t.Parallel()
	dial := func(err error) error {
		return fmt.Errorf("dial upstream: %w", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", err)})
	}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"refused", dial(syscall.ECONNREFUSED), true},
		{"reset during the connect", dial(syscall.ECONNRESET), true},
		{"connect timed out", dial(syscall.ETIMEDOUT), false},
		{"no route", dial(syscall.EHOSTUNREACH), false},
		{"reset on an open connection", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, false},
		{"a bare ECONNREFUSED", syscall.ECONNREFUSED, false},
		{"none", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := refusedConnect(tt.err); got != tt.want {
				t.Errorf("refusedConnect(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

// listenAgain listens on addr and serves it as an upstream of protocol
// proto (HTTP1 or H2C) that answers "METHOD LENGTH" to every request,
// until the test ends (serveUntil).
func listenAgain(t *testing.T, addr, proto string) {
	t.Helper()
	serveUntil(t, addr, proto)
}

// outageFront serves a Proxy of cfg behind front ("net-http", or "h1" for
// queue's HTTP/1.1 engine) and counts the connects it tries (both
// protocols' dials).
func outageFront(t *testing.T, front string, cfg Config) (*Proxy, *http.Client, string, *atomic.Int64) {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var connects atomic.Int64
	if p.h1 != nil {
		dial := p.h1.dialContext
		p.h1.dialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			connects.Add(1)
			return dial(ctx, network, addr)
		}
	} else {
		dial := p.h2c.dial
		p.h2c.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			connects.Add(1)
			return dial(ctx, network, addr)
		}
	}
	var url string
	switch front {
	case "net-http":
		srv := httptest.NewServer(p)
		t.Cleanup(srv.Close)
		url = srv.URL
	case "h1":
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &h1.Server{Handler: p}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		url = "http://" + ln.Addr().String()
	}
	t.Cleanup(func() { p.Close() })
	tr := &http.Transport{DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	return p, &http.Client{Transport: tr, Timeout: 20 * time.Second}, url, &connects
}

// waitFor polls cond, which no event announces, for at most 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10 s for %s", what)
		}
	}
}

// TestReconnectWithinWindow: the upstream is down (its port closed) while
// eight requests arrive, GETs and POSTs with a body, and comes back on the
// same port within the window: every request is answered 200, its body
// whole. While it is down the waiting requests do not each connect in a
// loop: only one probes at a time, with a backoff, so five probes take at
// least 5+10+20+40+80 ms.
func TestReconnectWithinWindow(t *testing.T) {
	t.Parallel()
	for _, proto := range []string{HTTP1, H2C} {
		t.Run(proto, func(t *testing.T) {
			t.Parallel()
			addr := testnet.ReservePort(t)
			p, c, url, connects := outageFront(t, "net-http", Config{Upstream: addr, Protocol: proto, RetryWindow: 10 * time.Second})
			const n, probes = 8, 5
			results := make(chan string, n)
			start := time.Now()
			for i := range n {
				go func() {
					method, body := http.MethodGet, ""
					if i%2 == 1 {
						method, body = http.MethodPost, strings.Repeat("b", 100*i)
					}
					req, _ := http.NewRequest(method, url+"/", strings.NewReader(body))
					o := do(c, req)
					if want := fmt.Sprintf("%s %d", method, len(body)); o.err != nil || o.code != 200 || o.body != want {
						results <- fmt.Sprintf("%s: got %d %q %v, want 200 %q", method, o.code, o.body, o.err, want)
						return
					}
					results <- ""
				}()
			}
			waitFor(t, fmt.Sprintf("%d requests waiting and %d probes", n, probes), func() bool {
				return p.outage.waiting.Load() == n && connects.Load() >= n+probes
			})
			if took, least := time.Since(start), (5+10+20+40+80)*time.Millisecond; took < least {
				t.Errorf("%d connects in %v, want %d probes to take at least %v", connects.Load(), took, probes, least)
			}
			listenAgain(t, addr, proto)
			for range n {
				if r := <-results; r != "" {
					t.Error(r)
				}
			}
			t.Logf("%d requests answered after %v, %d connects tried", n, time.Since(start), connects.Load())
		})
	}
}

// TestReconnectFails: the first request of an outage gets 502 once the
// window has passed; a request whose deadline (--timeout) comes first gets
// 504 at its deadline; with no window, a refused connect is the 502 at once, with
// no second connect. The bounds on when the answer comes are lower bounds
// (not before the window, or the deadline) and, from above, only what tells
// the two apart: an answer at the deadline comes long before a window of a
// minute, and one at the window long before a timeout of a minute (and the
// client's own timeout).
func TestReconnectFails(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name            string
		window, timeout time.Duration
		wantCode        int
		atLeast, before time.Duration
		connects        int64 // connects tried per request; 0: not checked
	}{
		{name: "window", window: 200 * time.Millisecond, timeout: time.Minute, wantCode: 502, atLeast: 200 * time.Millisecond, before: 15 * time.Second},
		{name: "deadline", window: time.Minute, timeout: 200 * time.Millisecond, wantCode: 504, atLeast: 200 * time.Millisecond, before: 15 * time.Second},
		{name: "no window", window: 0, timeout: time.Minute, wantCode: 502, before: 15 * time.Second, connects: 1},
	}
	for _, tt := range tests {
		for _, proto := range []string{HTTP1, H2C} {
			t.Run(tt.name+"/"+proto, func(t *testing.T) {
				t.Parallel()
				for _, method := range []string{http.MethodGet, http.MethodPost} {
					// An outage of its own for each request: one that
					// comes when an outage has outlasted the window fails
					// at once (TestLongOutageFailsFast).
					addr := testnet.ReservePort(t)
					_, c, url, connects := outageFront(t, "net-http", Config{Upstream: addr, Protocol: proto, RetryWindow: tt.window, Timeout: tt.timeout})
					before := connects.Load()
					start := time.Now()
					o := exchange(c, method, url+"/", strings.NewReader("body"))
					took := time.Since(start)
					if o.err != nil || o.code != tt.wantCode || o.body != http.StatusText(tt.wantCode) {
						t.Errorf("%s: got %d %q %v, want %d", method, o.code, o.body, o.err, tt.wantCode)
					}
					if took < tt.atLeast || took >= tt.before {
						t.Errorf("%s: answered after %v, want from %v to %v", method, took, tt.atLeast, tt.before)
					}
					if got := connects.Load() - before; tt.connects > 0 && got != tt.connects {
						t.Errorf("%s: %d connects tried, want %d", method, got, tt.connects)
					}
				}
			})
		}
	}
}

// TestReconnectClientGone: a client that leaves while its request waits
// for the upstream ends the wait, long before the window would.
func TestReconnectClientGone(t *testing.T) {
	t.Parallel()
	for _, front := range []string{"net-http", "h1"} {
		for _, proto := range []string{HTTP1, H2C} {
			t.Run(front+"/"+proto, func(t *testing.T) {
				t.Parallel()
				addr := testnet.ReservePort(t)
				p, c, url, _ := outageFront(t, front, Config{Upstream: addr, Protocol: proto, RetryWindow: time.Minute})
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() {
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/", nil)
					res, err := c.Do(req)
					if err == nil {
						res.Body.Close()
					}
					done <- err
				}()
				waitFor(t, "the request to wait", func() bool { return p.outage.waiting.Load() == 1 })
				cancel()
				if err := <-done; !errors.Is(err, context.Canceled) {
					t.Errorf("client: %v, want it canceled", err)
				}
				waitFor(t, "the wait to end", func() bool { return p.outage.waiting.Load() == 0 })
			})
		}
	}
}
