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

	"github.com/queue-dev/queue/internal/testnet"
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
	seen   atomic.Int64  // requests whose head arrived, answered or not
	closed chan struct{} // closeAfterAnswer: a connection closed after its answer

	mu   sync.Mutex
	byID map[string]int // arrivals of each X-Request-Id
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
	u := &staleUpstream{closed: make(chan struct{}, 1024), byID: map[string]int{}}
	u.rawUpstream = startRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		c.SetDeadline(time.Now().Add(10 * time.Second)) // a bound, should the test fail
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		u.arrived(req)
		if n := firsts.Add(1); n <= int64(warm) {
			if n == int64(warm) {
				close(warmed)
			}
			select {
			case <-warmed:
			case <-time.After(10 * time.Second): // a bound, should the test fail
				return
			}
		}
		n, _ := io.Copy(io.Discard, req.Body)
		body := fmt.Sprintf("%s %d", req.Method, n)
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", len(body))
		if req.Method != http.MethodHead {
			io.WriteString(c, body)
		}
		if mode == closeAfterAnswer {
			c.Close()
			u.closed <- struct{}{}
			return
		}
		if req, err = http.ReadRequest(br); err != nil {
			return
		}
		u.arrived(req)
		if mode == resetOnNext {
			c.(*net.TCPConn).SetLinger(0)
		}
	})
	return u
}

func (u *staleUpstream) arrived(req *http.Request) {
	u.seen.Add(1)
	if id := req.Header.Get("X-Request-Id"); id != "" {
		u.mu.Lock()
		u.byID[id]++
		u.mu.Unlock()
	}
}

// arrivals reports how many times the request with X-Request-Id id
// reached the upstream.
func (u *staleUpstream) arrivals(id string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.byID[id]
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
// request arrives). Eleven such connections are made idle at once first,
// so that a replay that took another idle connection would fail too,
// however many the refused requests use up.
//
// When the upstream reads the request and then closes, a request that may
// be sent again (mayReplay: an idempotent method, or Idempotency-Key) is
// answered 200 after exactly one replay on a new connection; a POST or
// PATCH is never sent twice and gets 502. When the close came before the
// request (the upstream's idle timeout), nothing gets 502: a replayable
// request is sent again, and one that is not takes no closed connection
// (get's check).
func TestPoolReplaysStaleRequests(t *testing.T) {
	t.Parallel()
	const warm, rounds = 11, 3
	requests := []struct {
		method, body, key string
		replay            bool
	}{
		{http.MethodGet, "", "", true},
		{http.MethodHead, "", "", true},
		{http.MethodPost, "", "", false},
		{http.MethodPost, strings.Repeat("p", 60<<10), "", false}, // held: under smallBody
		{http.MethodPatch, "patch", "", false},
		{http.MethodPost, "keyed", "k1", true}, // Idempotency-Key
		{http.MethodPut, "put", "", true},
		{http.MethodDelete, "", "", true},
		{http.MethodOptions, "", "", true},
	}
	tests := []struct {
		name string
		mode string
		// early: the upstream closed before the request came, so it never
		// read a request on a stale connection.
		early bool
	}{
		{name: "idle close", mode: closeAfterAnswer, early: true},
		{name: "close on arrival", mode: closeOnNext},
		{name: "reset on arrival", mode: resetOnNext},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			up := startStaleUpstream(t, tt.mode, warm)
			c, url, dials := countingFront(t, up.addr)
			// closed waits for the upstream to have closed n more
			// connections after answering, so that their FIN is in the
			// pool's sockets before the next request.
			closed := func(n int) {
				t.Helper()
				for range n {
					select {
					case <-up.closed:
					case <-time.After(10 * time.Second):
						t.Fatal("the upstream closed no connection in 10 s")
					}
				}
			}

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
			if tt.early {
				closed(warm)
			}

			var wantDials int64 = warm
			for i := range rounds {
				for j, rq := range requests {
					id := fmt.Sprintf("%d-%d", i, j)
					var body io.Reader
					if rq.body != "" {
						body = strings.NewReader(rq.body)
					}
					req, _ := http.NewRequest(rq.method, url+"/", body)
					req.Header.Set("X-Request-Id", id)
					if rq.key != "" {
						req.Header.Set("Idempotency-Key", rq.key)
					}
					o := do(c, req)
					wantCode, wantBody, wantSeen := 200, fmt.Sprintf("%s %d", rq.method, len(rq.body)), 2
					switch {
					case tt.early:
						wantSeen = 1 // the stale connections read nothing
						wantDials++
					case rq.replay:
						wantDials++
					default:
						wantCode, wantBody, wantSeen = 502, "Bad Gateway", 1
					}
					if rq.method == http.MethodHead {
						wantBody = ""
					}
					if o.err != nil || o.code != wantCode || o.body != wantBody {
						t.Errorf("round %d %s %s: got %d %q %v, want %d %q", i, rq.method, id, o.code, o.body, o.err, wantCode, wantBody)
					}
					if got := up.arrivals(id); got != wantSeen {
						t.Errorf("round %d %s %s: the upstream saw it %d times, want %d", i, rq.method, id, got, wantSeen)
					}
					if tt.early && o.code == 200 {
						closed(1)
					}
				}
			}
			if got := dials.Load(); got != wantDials {
				t.Errorf("pool dialed %d connections, want %d: %d for the warm-up, one per replay", got, wantDials, warm)
			}
			if got := up.accepts.Load(); got != wantDials {
				t.Errorf("upstream accepted %d connections, want %d", got, wantDials)
			}
		})
	}
}

// TestPoolReplaysUnderLoad: 8 clients, 25 requests each (GET, POST and
// PATCH in turn), against an upstream whose connections each answer one
// request and close when the next one arrives. Each request is counted at
// the upstream by its id: a GET arrives at most twice and gets 200; a POST
// or PATCH arrives exactly once, and gets 200 on a new connection or 502
// on one the upstream closed. Nothing arrives three times.
func TestPoolReplaysUnderLoad(t *testing.T) {
	t.Parallel()
	const clients, each = 8, 25
	methods := []string{http.MethodGet, http.MethodPost, http.MethodPatch}
	up := startStaleUpstream(t, closeOnNext, 0)
	c, url, _ := countingFront(t, up.addr)
	var (
		wg                 sync.WaitGroup
		bad, replays, cuts atomic.Int64
	)
	for i := range clients {
		wg.Go(func() {
			for j := range each {
				method, id := methods[j%len(methods)], fmt.Sprintf("%d-%d", i, j)
				req, _ := http.NewRequest(method, url+"/", nil)
				req.Header.Set("X-Request-Id", id)
				o := do(c, req)
				n := up.arrivals(id)
				ok := o.err == nil && o.code == 200 && o.body == method+" 0" && (n == 1 || n == 2)
				if method != http.MethodGet {
					ok = o.err == nil && n == 1 && (o.code == 200 || o.code == 502)
				}
				switch {
				case !ok:
					if bad.Add(1) == 1 {
						t.Errorf("%s %s: got %d %q %v, arrived %d times", method, id, o.code, o.body, o.err, n)
					}
				case n == 2:
					replays.Add(1)
				case o.code == 502:
					cuts.Add(1)
				}
			}
		})
	}
	wg.Wait()
	const total = clients * each
	if n := bad.Load(); n > 0 {
		t.Errorf("%d of %d requests failed", n, total)
	}
	t.Logf("%d requests, %d GETs replayed, %d POSTs and PATCHes cut (502)", total, replays.Load(), cuts.Load())
	if replays.Load() == 0 || cuts.Load() == 0 {
		t.Errorf("no GET replayed, or no POST cut: the test tested nothing")
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
		method string
		mode   string
		length int64 // -1: chunked
	}{
		{name: "chunked, close on arrival", method: http.MethodPost, mode: closeOnNext, length: -1},
		{name: "chunked, reset on arrival", method: http.MethodPost, mode: resetOnNext, length: -1},
		{name: "over 64 KiB, close on arrival", method: http.MethodPost, mode: closeOnNext, length: smallBody + 1},
		{name: "over 64 KiB, reset on arrival", method: http.MethodPost, mode: resetOnNext, length: smallBody + 1},
		// Idempotent, but its body is gone once sent.
		{name: "PUT over 64 KiB, close on arrival", method: http.MethodPut, mode: closeOnNext, length: smallBody + 1},
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
			req, _ := http.NewRequestWithContext(ctx, tt.method, url+"/upload", pr)
			req.ContentLength = tt.length
			res, err := c.Do(req)
			close(answered)
			if err != nil {
				t.Fatalf("streamed %s: %v", tt.method, err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if got, want := res.StatusCode, http.StatusBadGateway; got != want {
				t.Errorf("streamed %s on a stale connection: status %d %q, want %d", tt.method, got, b, want)
			}
			if got, want := up.seen.Load(), int64(2); got != want {
				t.Errorf("upstream saw %d requests, want %d: the %s was sent again", got, want, tt.method)
			}
			if got, want := dials.Load(), int64(1); got != want {
				t.Errorf("pool dialed %d connections, want %d: the %s was sent again", got, want, tt.method)
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
// behind to wake an idle sidecar. Each check is made once the proxy's
// ServeHTTP has returned (the client may have the whole response before).
func TestReaperDisarmed(t *testing.T) {
	t.Parallel()
	in, release := make(chan struct{}, 1), make(chan struct{})
	var once sync.Once
	releaseUp := func() { once.Do(func() { close(release) }) }
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/wait" {
			in <- struct{}{}
			<-release
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(up.Close)
	p, err := New(Config{Upstream: up.Listener.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan string, 2)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.ServeHTTP(w, r)
		served <- r.URL.Path
	}))
	t.Cleanup(func() { front.Close(); p.Close() })
	t.Cleanup(releaseUp) // first: the servers' Close waits for their handlers
	client := &http.Client{Timeout: 10 * time.Second}
	armed := func() bool { return p.h1.reaper.Armed() }
	get := func(path string) error {
		res, err := client.Get(front.URL + path)
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
	// servedBy waits for ServeHTTP to have returned for path.
	servedBy := func(path string) {
		t.Helper()
		select {
		case got := <-served:
			if got != path {
				t.Fatalf("ServeHTTP returned for %s, want %s", got, path)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("ServeHTTP did not return for %s within 10 s", path)
		}
	}
	done := make(chan error, 1)
	go func() { done <- get("/wait") }()
	select {
	case <-in:
	case err := <-done:
		t.Fatalf("the request did not reach the upstream: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the request did not reach the upstream within 10 s")
	}
	if !armed() {
		t.Error("no reaper timer while an exchange is in flight")
	}
	releaseUp()
	if err := testnet.Recv(t, done, recvBound, "the response"); err != nil {
		t.Fatal(err)
	}
	servedBy("/wait")
	if armed() {
		t.Error("the reaper's timer is still armed after the last exchange")
	}
	if err := get("/"); err != nil {
		t.Fatal(err)
	}
	servedBy("/")
	if armed() {
		t.Error("the reaper's timer is armed after a lone request")
	}
}
