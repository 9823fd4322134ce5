package chain_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queue-dev/queue/chain"
	"github.com/queue-dev/queue/drain"
	"github.com/queue-dev/queue/internal/testnet"
	"github.com/queue-dev/queue/limit"
	"github.com/queue-dev/queue/proxy"
	"github.com/queue-dev/queue/stats"
)

// TestNewRequiresProxy: a chain without a Proxy is a configuration error.
func TestNewRequiresProxy(t *testing.T) {
	t.Parallel()
	h, err := chain.New(chain.Config{Drain: drain.New(drain.Config{}), Stats: stats.New(stats.Config{})})
	if err == nil || h != nil {
		t.Errorf("New without a Proxy = %v, %v; want an error", h, err)
	}
}

// upstream counts the requests that reach it and answers "up".
type upstream struct{ hits atomic.Int64 }

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.hits.Add(1)
	io.WriteString(w, "up")
}

func newProxy(t *testing.T, h http.Handler) *proxy.Proxy {
	t.Helper()
	up := httptest.NewServer(h)
	t.Cleanup(up.Close)
	p, err := proxy.New(proxy.Config{Upstream: strings.TrimPrefix(up.URL, "http://")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func serve(t *testing.T, cfg chain.Config) *httptest.Server {
	t.Helper()
	h, err := chain.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// failAfter bounds the tests' requests and their waits on a channel: it
// is the failure bound only, never waited out by a passing test.
const failAfter = 30 * time.Second

// client is srv's client with a timeout: a request that is never answered
// fails the test instead of hanging it.
func client(srv *httptest.Server) *http.Client {
	return &http.Client{Transport: srv.Client().Transport, Timeout: failAfter}
}

// TestOrder checks the composition in request order by what each layer
// sees: drain answers probes before stats counts them, stats sees the
// limiter's 503 (it is outside the limiter), a K-Kubelet-Probe request
// passes the full limiter to the upstream, and a layer that is off is not
// in the path.
func TestOrder(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		layers     string // "all": drain, stats, a limiter whose one slot is held; "none": the proxy alone
		header     map[string]string
		wantCode   int
		wantBody   string
		wantUp     int64 // requests that reach the upstream
		wantStatus []int // statuses stats reports (the access log); nil: not counted
	}{
		{name: "probe answered by drain, not counted", layers: "all", header: map[string]string{"User-Agent": "kube-probe/1.30"},
			wantCode: http.StatusOK, wantBody: "queue"},
		{name: "network probe answered by drain", layers: "all", header: map[string]string{"K-Network-Probe": "probe", "K-Network-Hash": "h1"},
			wantCode: http.StatusOK, wantBody: "h1"},
		{name: "limiter full: 503 counted by stats", layers: "all",
			wantCode: http.StatusServiceUnavailable, wantBody: "Service Unavailable", wantStatus: []int{http.StatusServiceUnavailable}},
		{name: "kubelet probe header passes the full limiter, not counted", layers: "all", header: map[string]string{"K-Kubelet-Probe": "queue"},
			wantCode: http.StatusOK, wantBody: "up", wantUp: 1},
		{name: "no layers: a probe is proxied", layers: "none", header: map[string]string{"User-Agent": "kube-probe/1.30"},
			wantCode: http.StatusOK, wantBody: "up", wantUp: 1},
		{name: "no layers: proxied", layers: "none", wantCode: http.StatusOK, wantBody: "up", wantUp: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			up := &upstream{}
			cfg := chain.Config{Proxy: newProxy(t, up)}
			var got []int
			if tt.layers == "all" {
				l, err := limit.New(limit.Config{Capacity: 1})
				if err != nil {
					t.Fatal(err)
				}
				if err := l.Acquire(context.Background()); err != nil {
					t.Fatal(err)
				}
				cfg.Limiter = l
				cfg.Drain = drain.New(drain.Config{})
				// OnDone runs on the request's goroutine before the
				// response completes, so got is set once the client has it.
				cfg.Stats = stats.New(stats.Config{OnDone: func(_ *http.Request, status int, _ int64, _ time.Duration) {
					got = append(got, status)
				}})
			}
			srv := serve(t, cfg)
			req, err := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			res, err := client(srv).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(res.Body)
			res.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if got, want := res.StatusCode, tt.wantCode; got != want {
				t.Errorf("status = %d, want %d", got, want)
			}
			if got, want := string(body), tt.wantBody; got != want {
				t.Errorf("body = %q, want %q", got, want)
			}
			if got, want := up.hits.Load(), tt.wantUp; got != want {
				t.Errorf("upstream requests = %d, want %d", got, want)
			}
			srv.Close() // waits for the handlers: got is complete
			if got, want := len(got), len(tt.wantStatus); got != want {
				t.Fatalf("stats counted %d requests, want %d", got, want)
			}
			for i := range got {
				if got[i] != tt.wantStatus[i] {
					t.Errorf("stats status = %d, want %d", got[i], tt.wantStatus[i])
				}
			}
		})
	}
}

// TestOneOfThree is the scenario of docs/contract.md section 2 through the
// whole chain: capacity 1, queue depth 1, three slow requests: one is
// served, one waits and is then served, one gets 503 at once, in whatever
// order they arrive.
func TestOneOfThree(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{}, 3)
	unblock, release := testnet.Releaser(t)
	p := newProxy(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-unblock
		io.WriteString(w, "ok")
	}))
	l, err := limit.New(limit.Config{Capacity: 1, QueueDepth: 1})
	if err != nil {
		t.Fatal(err)
	}
	st := stats.New(stats.Config{})
	srv := serve(t, chain.Config{Drain: drain.New(drain.Config{}), Stats: st, Limiter: l, Proxy: p})
	t.Cleanup(release) // again, to run first: the servers' Close waits for their handlers

	type result struct {
		code  int
		body  string
		ctype string
		clen  int64
		err   error
	}
	results := make(chan result, 3)
	for range 3 {
		go func() {
			resp, err := client(srv).Get(srv.URL)
			if err != nil {
				results <- result{err: err}
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			results <- result{resp.StatusCode, string(b), resp.Header.Get("Content-Type"), resp.ContentLength, err}
		}()
	}

	// Nothing can finish before unblock but the refused request.
	testnet.Recv(t, entered, failAfter, "request at the upstream")
	first := testnet.Recv(t, results, failAfter, "first response")
	if first.err != nil {
		t.Fatal(first.err)
	}
	if got, want := first.code, http.StatusServiceUnavailable; got != want {
		t.Errorf("first response: status = %d, want %d", got, want)
	}
	if got, want := first.body, "Service Unavailable"; got != want {
		t.Errorf("503 body = %q, want %q", got, want)
	}
	if got, want := first.ctype, "text/plain; charset=utf-8"; got != want {
		t.Errorf("503 Content-Type = %q, want %q", got, want)
	}
	if got, want := first.clen, int64(len("Service Unavailable")); got != want {
		t.Errorf("503 Content-Length = %d, want %d", got, want)
	}
	// The refused request has ended; the served one and the waiting one
	// are both active: stats counts queued requests.
	if got, want := st.Active(), 2; got != want {
		t.Errorf("stats Active() = %d, want %d", got, want)
	}

	release()
	for range 2 {
		r := testnet.Recv(t, results, failAfter, "response")
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.code != http.StatusOK || r.body != "ok" {
			t.Errorf("response = %d %q, want 200 \"ok\"", r.code, r.body)
		}
	}
	if got := l.Waiting(); got != 0 {
		t.Errorf("Waiting() = %d, want 0", got)
	}
}
