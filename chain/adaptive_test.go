package chain

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/queue-dev/queue/limit"
	"github.com/queue-dev/queue/proxy"
)

func adaptiveProxy(t testing.TB) *proxy.Proxy {
	t.Helper()
	// Fail is all these tests use of it: nothing dials the upstream.
	p, err := proxy.New(proxy.Config{Upstream: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newLimiter(t testing.TB, cfg limit.Config) *limit.Limiter {
	t.Helper()
	l, err := limit.New(cfg)
	if err != nil {
		t.Fatalf("limit.New(%+v) = %v", cfg, err)
	}
	return l
}

// TestNewTimesAdaptive: New gives the round trips to an adaptive limiter
// only; a fixed one is released as before.
func TestNewTimesAdaptive(t *testing.T) {
	t.Parallel()
	p := adaptiveProxy(t)
	tests := []struct {
		name      string
		cfg       limit.Config
		wantTimed bool
	}{
		{"fixed", limit.Config{Capacity: 4}, false},
		{"adaptive", limit.Config{Adaptive: true}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h, err := New(Config{Limiter: newLimiter(t, tt.cfg), Proxy: p})
			if err != nil {
				t.Fatal(err)
			}
			lh, ok := h.(*limited)
			if !ok {
				t.Fatalf("New with a Limiter only = %T, want *limited outermost", h)
			}
			if lh.timed != tt.wantTimed {
				t.Errorf("timed = %v, want %v", lh.timed, tt.wantTimed)
			}
		})
	}
}

// TestLimitedFeedsController serves requests through the limiter layer of
// an adaptive limiter, as many at once as its limit, against a handler
// that takes 10 ms of fake time: the controller gets their round trips
// and raises the limit off MinLimit, which it would never do if the
// layer released the slots without them. A panic releases the slot too.
func TestLimitedFeedsController(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, limit.Config{Adaptive: true})
		h := &limited{l: l, p: adaptiveProxy(t), timed: true, next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(10 * time.Millisecond)
			if r.URL.Path == "/panic" {
				panic(http.ErrAbortHandler)
			}
		})}
		serve := func(path string) (code int, recovered any) {
			defer func() { recovered = recover() }()
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, path, nil))
			return rec.Code, nil
		}
		for round := 0; l.Limit() <= limit.MinLimit && round < 500; round++ {
			var wg sync.WaitGroup
			for range l.Limit() {
				wg.Go(func() {
					if code, p := serve("/"); code != http.StatusOK || p != nil {
						t.Errorf("status %d, panic %v; want 200", code, p)
					}
				})
			}
			wg.Wait()
		}
		if got := l.Limit(); got <= limit.MinLimit {
			t.Fatalf("Limit() = %d after 500 rounds at the limit, want above MinLimit %d", got, limit.MinLimit)
		}
		if _, p := serve("/panic"); p != http.ErrAbortHandler {
			t.Fatalf("recovered %v, want http.ErrAbortHandler", p)
		}
		if got := l.Waiting(); got != 0 {
			t.Errorf("Waiting() = %d, want 0", got)
		}
		// Every slot is free again: as many as the limit are taken at once.
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		n := l.Limit()
		for i := range n {
			if err := l.Acquire(ctx); err != nil {
				t.Fatalf("slot %d of %d: Acquire = %v, want a free slot", i+1, n, err)
			}
		}
		for range n {
			l.Release()
		}
	})
}

// TestLimitedAdaptiveAllocs: with an adaptive limiter, the layer's clock
// reading and ReleaseSince add no allocation to the request path.
func TestLimitedAdaptiveAllocs(t *testing.T) {
	l := newLimiter(t, limit.Config{Adaptive: true, MaxWait: time.Second})
	h := &limited{l: l, p: adaptiveProxy(t), timed: true, next: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	w := nopWriter{}
	if allocs := testing.AllocsPerRun(1000, func() { h.ServeHTTP(w, r) }); allocs != 0 {
		t.Errorf("adaptive limiter layer = %v allocs, want 0", allocs)
	}
}

type nopWriter struct{}

func (nopWriter) Header() http.Header         { return nil }
func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }
func (nopWriter) WriteHeader(int)             {}
