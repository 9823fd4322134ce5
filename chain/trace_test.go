package chain

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queue-dev/queue/internal/testnet"
	"github.com/queue-dev/queue/limit"
	"github.com/queue-dev/queue/tracing"
)

// stdoutSpan is the part of a console exporter line the test reads.
type stdoutSpan struct {
	Name        string
	SpanContext struct{ SpanID string }
	Parent      struct{ SpanID string }
	StartTime   time.Time
	EndTime     time.Time
	Status      struct{ Code int } // codes.Code: 1 is Error
}

// TestWaitSpan: with tracing on, every request that goes through the
// limiter gets a kn.queueproxy.wait span inside its kn.queueproxy.proxy
// span, from its arrival at the limiter to its slot (as Knative's
// queue-proxy times its breaker), one that waited as long as it waited, and
// one refused with an error status.
func TestWaitSpan(t *testing.T) {
	t.Parallel()
	var out testnet.SyncBuffer
	tr, err := tracing.New(t.Context(), tracing.Config{
		Getenv:     func(k string) string { return map[string]string{"OTEL_TRACES_EXPORTER": "console"}[k] },
		SampleRate: 1, Stdout: &out,
	})
	if err != nil || tr == nil {
		t.Fatalf("tracing.New = %v, %v", tr, err)
	}
	l := mustLimiter(t, limit.Config{Capacity: 1, QueueDepth: 1})
	entered := make(chan string, 3)
	release, releaseAll := testnet.Releaser(t) // a failing test lets its handlers go
	h := tr.Handler(&limited{l: l, p: newProxy(t), tracer: tr, next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- r.URL.Path
		<-release
	})})
	serve := func(path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec
	}
	var wg sync.WaitGroup
	wg.Go(func() { serve("/first") })
	select {
	case got := <-entered:
		if got != "/first" {
			t.Fatalf("%s entered first", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the first request did not reach the handler within 30 s")
	}
	wg.Go(func() { serve("/second") })
	// The second request's wait is the limiter's own state, with no event
	// to wait on: poll it, within a bound.
	for deadline := time.Now().Add(5 * time.Second); l.Waiting() != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the second request never waited")
		}
	}
	if rec := serve("/third"); rec.Code != http.StatusServiceUnavailable {
		t.Errorf("third request: %d, want 503 (queue full)", rec.Code)
	}
	// A wait of 20 ms for the second request's span to measure: time
	// passing is what is tested, not a synchronisation.
	time.Sleep(20 * time.Millisecond)
	releaseAll()
	wg.Wait()
	if err := tr.Shutdown(t.Context()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}

	var spans []stdoutSpan
	sc := bufio.NewScanner(strings.NewReader(out.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var s stdoutSpan
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		spans = append(spans, s)
	}
	byID := map[string]stdoutSpan{}
	for _, s := range spans {
		byID[s.SpanContext.SpanID] = s
	}
	var waits []stdoutSpan
	for _, s := range spans {
		if s.Name != tracing.WaitSpanName {
			continue
		}
		waits = append(waits, s)
		if p := byID[s.Parent.SpanID]; p.Name != tracing.ProxySpanName {
			t.Errorf("wait span's parent is %q, want %s", p.Name, tracing.ProxySpanName)
		}
	}
	if len(spans) != 9 || len(waits) != 3 {
		t.Fatalf("%d spans, %d of them %s; want 9 and 3 (three requests)", len(spans), len(waits), tracing.WaitSpanName)
	}
	var longest time.Duration
	errors := 0
	for _, w := range waits {
		longest = max(longest, w.EndTime.Sub(w.StartTime))
		if w.Status.Code == 1 {
			errors++
		}
	}
	if longest < 20*time.Millisecond {
		t.Errorf("longest wait span %v, want the second request's wait of 20ms at least", longest)
	}
	if errors != 1 {
		t.Errorf("%d wait spans with an error status, want 1 (the refused request)", errors)
	}
}
