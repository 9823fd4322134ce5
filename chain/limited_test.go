package chain

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/queue-dev/queue/limit"
	"github.com/queue-dev/queue/proxy"
)

func newProxy(t testing.TB) *proxy.Proxy {
	t.Helper()
	// Fail is all these tests use of it: nothing dials the upstream.
	p, err := proxy.New(proxy.Config{Upstream: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func mustLimiter(t testing.TB, cfg limit.Config) *limit.Limiter {
	t.Helper()
	l, err := limit.New(cfg)
	if err != nil {
		t.Fatalf("limit.New(%+v) = %v", cfg, err)
	}
	return l
}

// tryAcquire reports whether a slot is free now: Acquire takes a free one
// without looking at its context, and with a canceled context gives up at
// once when it would have to wait.
func tryAcquire(l *limit.Limiter) bool {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if l.Acquire(ctx) != nil {
		return false
	}
	l.Release()
	return true
}

// TestLimited checks the limiter layer against a limiter whose only slot is
// held: what it answers, when, and that nothing is left behind.
func TestLimited(t *testing.T) {
	t.Parallel()
	p := newProxy(t)
	tests := []struct {
		name      string
		depth     int
		maxWait   time.Duration
		probe     bool
		ctx       string // "canceled", "deadline" (1s) or "" for none
		wantCode  int    // 0: nothing written, the handler aborted
		wantNext  bool
		wantWait  time.Duration
		wantAbort bool
	}{
		{name: "queue full", wantCode: http.StatusServiceUnavailable},
		{name: "max wait", depth: 1, maxWait: 3 * time.Second, wantCode: http.StatusServiceUnavailable, wantWait: 3 * time.Second},
		{name: "deadline in queue", depth: 1, ctx: "deadline", wantCode: http.StatusServiceUnavailable, wantWait: time.Second},
		{name: "deadline before max wait", depth: 1, maxWait: time.Minute, ctx: "deadline", wantCode: http.StatusServiceUnavailable, wantWait: time.Second},
		{name: "client gone while queued", depth: 1, ctx: "canceled", wantAbort: true},
		{name: "client gone, queue full", ctx: "canceled", wantAbort: true},
		{name: "kubelet probe bypasses", probe: true, wantCode: http.StatusOK, wantNext: true},
		{name: "kubelet probe, client gone", probe: true, ctx: "canceled", wantCode: http.StatusOK, wantNext: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				l := mustLimiter(t, limit.Config{Capacity: 1, QueueDepth: tt.depth, MaxWait: tt.maxWait})
				if err := l.Acquire(t.Context()); err != nil {
					t.Fatal(err)
				}
				called := false
				h := &limited{l: l, p: p, next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					called = true
					w.WriteHeader(http.StatusOK)
				})}
				ctx := t.Context()
				switch tt.ctx {
				case "canceled":
					var cancel context.CancelFunc
					ctx, cancel = context.WithCancel(ctx)
					cancel()
				case "deadline":
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, time.Second)
					defer cancel()
				}
				r := httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil)
				if tt.probe {
					r.Header.Set("K-Kubelet-Probe", "queue")
				}
				rec := httptest.NewRecorder()
				start := time.Now()
				var recovered any
				func() {
					defer func() { recovered = recover() }()
					h.ServeHTTP(rec, r)
				}()
				if d := time.Since(start); d != tt.wantWait {
					t.Errorf("answered after %v, want %v", d, tt.wantWait)
				}
				if called != tt.wantNext {
					t.Errorf("next called = %v, want %v", called, tt.wantNext)
				}
				if tt.wantAbort {
					if recovered != http.ErrAbortHandler {
						t.Errorf("recovered %v, want the http.ErrAbortHandler panic", recovered)
					}
					if len(rec.Header()) != 0 || rec.Body.Len() != 0 || rec.Flushed {
						t.Errorf("wrote %v %q to a client that went away, want nothing", rec.Header(), rec.Body)
					}
				} else {
					if recovered != nil {
						t.Fatalf("panicked: %v", recovered)
					}
					if got, want := rec.Code, tt.wantCode; got != want {
						t.Errorf("status = %d, want %d", got, want)
					}
				}
				if tt.wantCode == http.StatusServiceUnavailable {
					if got, want := rec.Body.String(), "Service Unavailable"; got != want {
						t.Errorf("body = %q, want %q", got, want)
					}
					if got, want := rec.Header().Get("Content-Length"), "19"; got != want {
						t.Errorf("Content-Length = %q, want %q", got, want)
					}
					if got, want := rec.Header().Get("Content-Type"), "text/plain; charset=utf-8"; got != want {
						t.Errorf("Content-Type = %q, want %q", got, want)
					}
					if got := rec.Header().Get("Connection"); got != "" {
						t.Errorf("Connection = %q, want none: a 503 keeps the connection", got)
					}
				}
				if got := l.Waiting(); got != 0 {
					t.Errorf("Waiting() = %d, want 0", got)
				}
				if tryAcquire(l) {
					t.Error("the slot the test holds is free")
				}
				l.Release()
				if !tryAcquire(l) {
					t.Error("a slot is still held after the request")
				}
			})
		})
	}
}

// TestLimitedReleases checks that the slot is given back when next returns
// and when it panics.
func TestLimitedReleases(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		panic bool
	}{
		{name: "return", panic: false},
		{name: "panic", panic: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := mustLimiter(t, limit.Config{Capacity: 1})
			var heldInNext bool
			h := &limited{l: l, p: newProxy(t), next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				heldInNext = !tryAcquire(l)
				if tt.panic {
					panic(http.ErrAbortHandler)
				}
			})}
			func() {
				defer func() {
					if p := recover(); (p != nil) != tt.panic {
						t.Errorf("recovered %v, want panic = %v", p, tt.panic)
					}
				}()
				h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
			}()
			if !heldInNext {
				t.Error("no slot held while next served")
			}
			if !tryAcquire(l) {
				t.Error("slot still held after the request")
			}
		})
	}
}

// TestLimitedAllocs: taking a free slot and giving it back adds no
// allocation to the request path.
func TestLimitedAllocs(t *testing.T) {
	l := mustLimiter(t, limit.Config{Capacity: 4, QueueDepth: 4, MaxWait: time.Second})
	h := &limited{l: l, p: newProxy(t), next: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	w := discardWriter{}
	if allocs := testing.AllocsPerRun(1000, func() { h.ServeHTTP(w, r) }); allocs != 0 {
		t.Errorf("limiter layer = %v allocs, want 0", allocs)
	}
}

type discardWriter struct{}

func (discardWriter) Header() http.Header         { return nil }
func (discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (discardWriter) WriteHeader(int)             {}
