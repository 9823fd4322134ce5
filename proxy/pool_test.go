package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// How a stale upstream ends each connection after answering its first
// request: every connection answers exactly one, so every reused connection
// fails and every request is answered on a connection of its own.
const (
	closeAfterAnswer = "close after answering"             // FIN while idle: the classic idle close
	closeOnNext      = "close when the next request comes" // FIN (or RST if bytes are left unread) on arrival
	resetOnNext      = "reset when the next request comes" // RST on arrival
)

// staleUpstream answers the first request on each connection with a
// keep-alive "METHOD LENGTH" and then ends the connection as mode says.
// The first warm first requests are held until all of them have arrived,
// so that warm connections are open at once and then idle in the pool.
type staleUpstream struct {
	*rawUpstream
	seen atomic.Int64 // requests whose head arrived, answered or not
}

func startStaleUpstream(t *testing.T, mode string, warm int) *staleUpstream {
	t.Helper()
	var (
		firsts atomic.Int64
		warmed = make(chan struct{})
	)
	if warm == 0 {
		close(warmed)
	}
	u := &staleUpstream{}
	u.rawUpstream = startRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		c.SetDeadline(time.Now().Add(10 * time.Second)) // a bound, should the test fail
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		u.seen.Add(1)
		if n := firsts.Add(1); n <= int64(warm) {
			if n == int64(warm) {
				close(warmed)
			}
			<-warmed
		}
		n, _ := io.Copy(io.Discard, req.Body)
		body := fmt.Sprintf("%s %d", req.Method, n)
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", len(body))
		if req.Method != http.MethodHead {
			io.WriteString(c, body)
		}
		if mode == closeAfterAnswer {
			return
		}
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		u.seen.Add(1)
		if mode == resetOnNext {
			c.(*net.TCPConn).SetLinger(0)
		}
	})
	return u
}

// countingFront serves a Proxy for upstream like frontFor and counts the
// connections its pool dials.
func countingFront(t *testing.T, upstream string) (*http.Client, string, *atomic.Int64) {
	t.Helper()
	p, err := New(Config{Upstream: upstream})
	if err != nil {
		t.Fatal(err)
	}
	var dials atomic.Int64
	dial := p.h1.dialContext
	p.h1.dialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return dial(ctx, network, addr)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(func() {
		srv.Close()
		p.Close()
	})
	tr := &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 16}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}, srv.URL, &dials
}

// TestPoolReplaysStaleRequests forces the idle-close race: the upstream
// answers one request per connection, so every request sent on a pooled
// connection meets a connection the upstream has closed (or closes as the
// request arrives). Four such connections are made idle at once first, so
// that a replay that took another idle connection would fail too. Every
// replayable request (no body, or a body held whole, POST included) must be
// answered 200 after exactly one replay on a new connection.
func TestPoolReplaysStaleRequests(t *testing.T) {
	t.Parallel()
	const warm = 4
	requests := []struct{ method, body string }{
		{http.MethodGet, ""},
		{http.MethodHead, ""},
		{http.MethodPost, ""},
		{http.MethodPost, strings.Repeat("p", 60<<10)}, // held: under smallBody
		{http.MethodPut, "put"},
		{http.MethodDelete, ""},
	}
	tests := []struct {
		name string
		mode string
		// seenReplays: the upstream sees the head of each replayed request
		// on the stale connection too.
		seenReplays bool
	}{
		{name: "idle close", mode: closeAfterAnswer},
		{name: "close on arrival", mode: closeOnNext, seenReplays: true},
		{name: "reset on arrival", mode: resetOnNext, seenReplays: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			up := startStaleUpstream(t, tt.mode, warm)
			c, url, dials := countingFront(t, up.addr)

			var wg sync.WaitGroup
			for i := range warm {
				wg.Go(func() {
					if o := exchange(c, http.MethodGet, url+"/", nil); o.err != nil || o.code != 200 {
						t.Errorf("warm-up %d: got %d %v, want 200", i, o.code, o.err)
					}
				})
			}
			wg.Wait()
			if got, want := dials.Load(), int64(warm); got != want {
				t.Fatalf("warm-up dialed %d connections, want %d", got, want)
			}

			const rounds = 3
			for i := range rounds {
				for _, rq := range requests {
					var body io.Reader
					if rq.body != "" {
						body = strings.NewReader(rq.body)
					}
					o := exchange(c, rq.method, url+"/", body)
					want := fmt.Sprintf("%s %d", rq.method, len(rq.body))
					if rq.method == http.MethodHead {
						want = ""
					}
					if o.err != nil || o.code != 200 || o.body != want {
						t.Errorf("round %d %s: got %d %q %v, want 200 %q", i, rq.method, o.code, o.body, o.err, want)
					}
				}
			}
			replays := int64(rounds * len(requests)) // each found a stale connection
			if got, want := dials.Load(), warm+replays; got != want {
				t.Errorf("pool dialed %d connections, want %d: %d for the warm-up, one per replay", got, want, warm)
			}
			if got, want := up.accepts.Load(), warm+replays; got != want {
				t.Errorf("upstream accepted %d connections, want %d", got, want)
			}
			wantSeen := warm + replays
			if tt.seenReplays {
				wantSeen += replays
			}
			if got := up.seen.Load(); got != wantSeen {
				t.Errorf("upstream saw %d requests, want %d", got, wantSeen)
			}
		})
	}
}

// TestPoolReplaysUnderLoad: 8 clients, 25 GETs each, against an upstream
// whose connections each answer one request and close when the next one
// arrives. Every GET gets 200; the requests the upstream saw beyond one per
// connection are the replays.
func TestPoolReplaysUnderLoad(t *testing.T) {
	t.Parallel()
	const clients, each = 8, 25
	up := startStaleUpstream(t, closeOnNext, 0)
	c, url, dials := countingFront(t, up.addr)
	var (
		wg  sync.WaitGroup
		bad atomic.Int64
	)
	for range clients {
		wg.Go(func() {
			for range each {
				if o := exchange(c, http.MethodGet, url+"/", nil); o.err != nil || o.code != 200 || o.body != "GET 0" {
					if bad.Add(1) == 1 {
						t.Errorf("got %d %q %v, want 200 \"GET 0\"", o.code, o.body, o.err)
					}
				}
			}
		})
	}
	wg.Wait()
	const total = clients * each
	if n := bad.Load(); n > 0 {
		t.Errorf("%d of %d GETs failed", n, total)
	}
	if got, want := dials.Load(), int64(total); got != want {
		t.Errorf("pool dialed %d connections, want %d (each answers one request)", got, want)
	}
	replays := up.seen.Load() - total
	t.Logf("%d GETs, %d replays", total, replays)
	if replays <= 0 {
		t.Errorf("no request met a stale connection: the test tested nothing")
	}
}

// TestPoolStreamedBodyNotReplayed: a request whose body is streamed (too
// large to hold, or of unknown length) has sent part of it by the time a
// stale connection fails, and cannot be sent again: it gets 502, with no
// second attempt. The next request takes a new connection.
func TestPoolStreamedBodyNotReplayed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mode   string
		length int64 // -1: chunked
	}{
		{name: "chunked, close on arrival", mode: closeOnNext, length: -1},
		{name: "chunked, reset on arrival", mode: resetOnNext, length: -1},
		{name: "over 64 KiB, close on arrival", mode: closeOnNext, length: smallBody + 1},
		{name: "over 64 KiB, reset on arrival", mode: resetOnNext, length: smallBody + 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			up := startStaleUpstream(t, tt.mode, 0)
			c, url, dials := countingFront(t, up.addr)
			if o := exchange(c, http.MethodGet, url+"/", nil); o.err != nil || o.code != 200 {
				t.Fatalf("first GET: got %d %v, want 200", o.code, o.err)
			}

			// The body's first KiB goes out with the head; the rest waits
			// for the response, so the upstream's close meets a body in
			// flight.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			pr, pw := io.Pipe()
			answered := make(chan struct{})
			go func() {
				pw.Write(make([]byte, 1<<10))
				select { // the rest of the body never comes
				case <-answered:
				case <-ctx.Done(): // should the response never come
				}
				pw.CloseWithError(io.ErrUnexpectedEOF)
			}()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/upload", pr)
			req.ContentLength = tt.length
			res, err := c.Do(req)
			close(answered)
			if err != nil {
				t.Fatalf("streamed POST: %v", err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if got, want := res.StatusCode, http.StatusBadGateway; got != want {
				t.Errorf("streamed POST on a stale connection: status %d %q, want %d", got, b, want)
			}
			if got, want := up.seen.Load(), int64(2); got != want {
				t.Errorf("upstream saw %d requests, want %d: the POST was sent again", got, want)
			}
			if got, want := dials.Load(), int64(1); got != want {
				t.Errorf("pool dialed %d connections, want %d: the POST was sent again", got, want)
			}

			if o := exchange(c, http.MethodGet, url+"/", nil); o.err != nil || o.code != 200 {
				t.Errorf("GET after the 502: got %d %v, want 200", o.code, o.err)
			}
			if got, want := up.accepts.Load(), int64(2); got != want {
				t.Errorf("upstream accepted %d connections, want %d", got, want)
			}
		})
	}
}

// pipeUpstream is an upstream on net.Pipe connections, for tests in a
// synctest bubble: every request gets "ok" with the extra header lines in
// head. The first hold requests wait until all of them have arrived.
type pipeUpstream struct {
	head   string
	hold   int
	dials  atomic.Int64
	closes atomic.Int64 // connections the proxy closed
	held   atomic.Int64
	go1    chan struct{}
}

func newPipeUpstream(head string, hold int) *pipeUpstream {
	u := &pipeUpstream{head: head, hold: hold, go1: make(chan struct{})}
	if hold == 0 {
		close(u.go1)
	}
	return u
}

func (u *pipeUpstream) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	u.dials.Add(1)
	client, server := net.Pipe()
	go u.serve(server)
	return client, nil
}

func (u *pipeUpstream) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		if _, err := http.ReadRequest(br); err != nil {
			u.closes.Add(1)
			return
		}
		if n := u.held.Add(1); n <= int64(u.hold) {
			if n == int64(u.hold) {
				close(u.go1)
			}
			<-u.go1
		}
		if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"+u.head+"\r\nok"); err != nil {
			return
		}
	}
}

// pipeProxy returns a Proxy whose pool dials u.
func pipeProxy(t *testing.T, u *pipeUpstream, idle time.Duration) *Proxy {
	t.Helper()
	p, err := New(Config{Upstream: "app.test:8080", IdleConnTimeout: idle})
	if err != nil {
		t.Fatal(err)
	}
	p.h1.dialContext = u.dial
	return p
}

// serveGET sends a GET through p; it may run on any goroutine.
func serveGET(t *testing.T, p *Proxy) {
	t.Helper()
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if got, want := rec.Code, 200; got != want || rec.Body.String() != "ok" {
		t.Errorf("GET: got %d %q, want %d \"ok\"", got, rec.Body.String(), want)
	}
}

func (t *h1Transport) idleCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.idle)
}

func (t *h1Transport) retireArmed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.retireAt.IsZero()
}

// TestPoolIdleLimit: a connection idle for less than its limit is reused;
// one idle for its limit is not (get closes it and dials), and once the
// limit and retireSlack have passed with no traffic the pool is empty. The
// limit is the idle timeout or, when shorter, the upstream's Keep-Alive
// timeout less a quarter of it (at most a second). In a synctest bubble:
// the clock is fake, the sleeps advance it.
func TestPoolIdleLimit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		head      string
		idle      time.Duration
		wantLimit time.Duration // 0: never expires
	}{
		{name: "keep-alive timeout=1", head: "Keep-Alive: timeout=1\r\n", wantLimit: 750 * time.Millisecond},
		{name: "keep-alive timeout=10", head: "Keep-Alive: timeout=10, max=100\r\n", wantLimit: 9 * time.Second},
		{name: "idle timeout", idle: 1500 * time.Millisecond, wantLimit: 1500 * time.Millisecond},
		{name: "keep-alive under the idle timeout", head: "Keep-Alive: timeout=1\r\n", idle: 1500 * time.Millisecond, wantLimit: 750 * time.Millisecond},
		{name: "idle timeout under the keep-alive", head: "Keep-Alive: timeout=5\r\n", idle: 1500 * time.Millisecond, wantLimit: 1500 * time.Millisecond},
		{name: "neither", wantLimit: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				u := newPipeUpstream(tt.head, 0)
				p := pipeProxy(t, u, tt.idle)
				defer p.Close()

				serveGET(t, p)
				if tt.wantLimit == 0 {
					time.Sleep(10 * time.Minute)
					serveGET(t, p)
					if got, want := u.dials.Load(), int64(1); got != want {
						t.Errorf("dials = %d after 10 idle minutes with no limit, want %d", got, want)
					}
					if p.h1.retireArmed() {
						t.Errorf("retire timer armed with no connection that expires")
					}
					return
				}

				time.Sleep(tt.wantLimit - time.Millisecond)
				serveGET(t, p)
				if got, want := u.dials.Load(), int64(1); got != want {
					t.Errorf("dials = %d after %v idle, want %d (reused)", got, tt.wantLimit-time.Millisecond, want)
				}

				time.Sleep(tt.wantLimit) // before the retire timer: get decides
				serveGET(t, p)
				synctest.Wait()
				if got, want := u.dials.Load(), int64(2); got != want {
					t.Errorf("dials = %d after %v idle, want %d (expired, not reused)", got, tt.wantLimit, want)
				}
				if got, want := u.closes.Load(), int64(1); got != want {
					t.Errorf("upstream saw %d connections closed, want %d", got, want)
				}

				time.Sleep(tt.wantLimit + retireSlack) // no traffic: the timer retires it
				synctest.Wait()
				if got := p.h1.idleCount(); got != 0 {
					t.Errorf("%d idle connections after %v, want 0", got, tt.wantLimit+retireSlack)
				}
				if got, want := u.closes.Load(), int64(2); got != want {
					t.Errorf("upstream saw %d connections closed, want %d", got, want)
				}
				if p.h1.retireArmed() {
					t.Errorf("retire timer still armed with the pool empty")
				}
			})
		})
	}
}

// TestPoolShrinksAfterBurst: a burst of concurrent requests leaves as many
// idle connections; with no traffic after it, all are closed once the limit
// and retireSlack have passed, and nothing stays armed. In a synctest
// bubble.
func TestPoolShrinksAfterBurst(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		burst int
		head  string
		idle  time.Duration
		limit time.Duration
	}{
		{name: "default idle timeout", burst: 64, idle: DefaultIdleConnTimeout, limit: DefaultIdleConnTimeout},
		{name: "keep-alive timeout=2, no idle timeout", burst: 32, head: "Keep-Alive: timeout=2\r\n", limit: 1500 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				u := newPipeUpstream(tt.head, tt.burst)
				p := pipeProxy(t, u, tt.idle)
				defer p.Close()

				var wg sync.WaitGroup
				for range tt.burst {
					wg.Go(func() { serveGET(t, p) })
				}
				wg.Wait()
				if got, want := p.h1.idleCount(), tt.burst; got != want {
					t.Fatalf("%d idle connections after a burst of %d, want %d", got, tt.burst, want)
				}

				time.Sleep(tt.limit - time.Millisecond)
				synctest.Wait()
				if got, want := p.h1.idleCount(), tt.burst; got != want {
					t.Errorf("%d idle connections before the limit, want %d", got, want)
				}

				time.Sleep(retireSlack + time.Millisecond)
				synctest.Wait()
				if got := p.h1.idleCount(); got != 0 {
					t.Errorf("%d idle connections after %v with no traffic, want 0", got, tt.limit+retireSlack)
				}
				if got, want := u.closes.Load(), int64(tt.burst); got != want {
					t.Errorf("upstream saw %d connections closed, want %d", got, want)
				}
				if got, want := u.dials.Load(), int64(tt.burst); got != want {
					t.Errorf("dials = %d, want %d", got, want)
				}
				if p.h1.retireArmed() {
					t.Errorf("retire timer still armed with the pool empty")
				}
			})
		})
	}
}

// TestKeepAliveTimeout: the timeout parameter of Keep-Alive is read from a
// response head, and Keep-Alive itself is not forwarded.
func TestKeepAliveTimeout(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		fields string
		want   time.Duration
	}{
		{name: "none", fields: "", want: 0},
		{name: "timeout", fields: "Keep-Alive: timeout=5\r\n", want: 5 * time.Second},
		{name: "with max", fields: "Keep-Alive: timeout=5, max=1000\r\n", want: 5 * time.Second},
		{name: "max first", fields: "Keep-Alive: max=1000,timeout=2\r\n", want: 2 * time.Second},
		{name: "case and spaces", fields: "keep-alive:  Timeout = 3 \r\n", want: 3 * time.Second},
		{name: "quoted", fields: "Keep-Alive: timeout=\"4\"\r\n", want: 4 * time.Second},
		{name: "two fields, the shorter wins", fields: "Keep-Alive: timeout=9\r\nKeep-Alive: timeout=3\r\n", want: 3 * time.Second},
		{name: "zero", fields: "Keep-Alive: timeout=0\r\n", want: 0},
		{name: "negative", fields: "Keep-Alive: timeout=-5\r\n", want: 0},
		{name: "fraction", fields: "Keep-Alive: timeout=1.5\r\n", want: 0},
		{name: "not a number", fields: "Keep-Alive: timeout=soon\r\n", want: 0},
		{name: "too large", fields: "Keep-Alive: timeout=12345678901\r\n", want: 0},
		{name: "max only", fields: "Keep-Alive: max=5\r\n", want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			rh, err := parseHead("HTTP/1.1 200 OK\r\n"+tt.fields+"Content-Length: 0\r\n\r\n", h)
			if err != nil {
				t.Fatal(err)
			}
			if got := rh.KeepAlive; got != tt.want {
				t.Errorf("keepAlive = %v, want %v", got, tt.want)
			}
			if got, ok := h["Keep-Alive"]; ok {
				t.Errorf("Keep-Alive forwarded: %q", got)
			}
		})
	}
}

// TestReaperDisarmed: the reaper's timer is armed while an exchange is in
// flight and stopped once none is, so that a lone request leaves no tick
// behind to wake an idle sidecar.
func TestReaperDisarmed(t *testing.T) {
	t.Parallel()
	in, release := make(chan struct{}), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/wait" {
			in <- struct{}{}
			<-release
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(up.Close)
	p, client, url := proxyFront(t, up.Listener.Addr().String())
	armed := func() bool { return p.h1.reaper.Armed() }
	get := func(path string) error {
		res, err := client.Get(url + path)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		if _, err := io.ReadAll(res.Body); err != nil {
			return err
		}
		if res.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", res.StatusCode)
		}
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- get("/wait") }()
	<-in
	if !armed() {
		t.Error("no reaper timer while an exchange is in flight")
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if armed() {
		t.Error("the reaper's timer is still armed after the last exchange")
	}
	if err := get("/"); err != nil {
		t.Fatal(err)
	}
	if armed() {
		t.Error("the reaper's timer is armed after a lone request")
	}
}
