package stats

import (
	"math"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const sec = int64(1e6) // one second in microseconds

type event struct {
	at      int64 // microseconds
	begin   bool
	proxied bool
}

func TestWindowArithmetic(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		events      []event
		closeAt     []int64
		wantConc    []float64
		wantProxied []float64
		wantRPS     []float64
	}{{
		name:     "two requests of 500ms in a 1s window",
		events:   []event{{0, true, false}, {sec / 2, false, false}, {sec / 2, true, false}, {sec, false, false}},
		closeAt:  []int64{sec},
		wantConc: []float64{1}, wantProxied: []float64{0}, wantRPS: []float64{2},
	}, {
		name:     "two overlapping requests",
		events:   []event{{0, true, false}, {0, true, false}, {sec / 4, false, false}, {sec * 3 / 4, false, false}},
		closeAt:  []int64{sec},
		wantConc: []float64{1}, wantProxied: []float64{0}, wantRPS: []float64{2},
	}, {
		name:     "a request spanning three windows",
		events:   []event{{sec / 2, true, false}, {sec*5/2 + 0, false, false}},
		closeAt:  []int64{sec, 2 * sec, 3 * sec},
		wantConc: []float64{0.5, 1, 0.5}, wantProxied: []float64{0, 0, 0}, wantRPS: []float64{1, 0, 0},
	}, {
		name: "proxied requests counted twice",
		events: []event{{0, true, true}, {0, true, false}, {sec / 2, false, true},
			{sec, false, false}},
		closeAt:  []int64{sec},
		wantConc: []float64{1.5}, wantProxied: []float64{0.5}, wantRPS: []float64{2},
	}, {
		name:     "a late close makes a longer window",
		events:   []event{{0, true, false}},
		closeAt:  []int64{2 * sec},
		wantConc: []float64{1}, wantProxied: []float64{0}, wantRPS: []float64{0.5},
	}, {
		name:     "empty window",
		closeAt:  []int64{sec},
		wantConc: []float64{0}, wantProxied: []float64{0}, wantRPS: []float64{0},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := New(Config{})
			ev := tt.events
			for i, at := range tt.closeAt {
				for len(ev) > 0 && ev[0].at <= at && !(ev[0].at == at && i < len(tt.closeAt)-1 && ev[0].begin) {
					if ev[0].begin {
						s.Begin(ev[0].at, ev[0].proxied)
					} else {
						s.End(ev[0].at, ev[0].proxied)
					}
					ev = ev[1:]
				}
				w := s.Close(at)
				if got, want := w.AverageConcurrency, tt.wantConc[i]; !near(got, want) {
					t.Errorf("window %d: average concurrency = %v, want %v", i, got, want)
				}
				if got, want := w.AverageProxiedConcurrency, tt.wantProxied[i]; !near(got, want) {
					t.Errorf("window %d: proxied concurrency = %v, want %v", i, got, want)
				}
				if got, want := w.RequestsPerSecond, tt.wantRPS[i]; !near(got, want) {
					t.Errorf("window %d: requests/s = %v, want %v", i, got, want)
				}
				if got := s.Last(); got != w {
					t.Errorf("Last() = %+v, want %+v", got, w)
				}
			}
		})
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestPackRoundTrip(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		ep, n uint64
		a     int64
	}{{0, 0, 0}, {15, activeMask, -(1 << (areaBits - 1))}, {7, 12345, 1<<(areaBits-1) - 1}, {3, 1, -1}} {
		ep, n, a := unpack(pack(tt.ep, tt.n, tt.a))
		if ep != tt.ep || n != tt.n || a != tt.a {
			t.Errorf("unpack(pack(%d, %d, %d)) = %d, %d, %d", tt.ep, tt.n, tt.a, ep, n, a)
		}
	}
}

// TestConcurrentExact: whatever the interleaving of updates and closes,
// the areas of all windows add up to the sum of the requests' durations,
// and no update is lost.
//
// An update that stalls across 64 closes can be misattributed (the epoch
// wraps: conc.go). Real windows are a second apart; here the closer may
// close a window only once every worker still running has finished an
// update since the last close, so closes still land in the middle of
// updates but no update can span more than a few of them, however the
// scheduler stalls a worker.
func TestConcurrentExact(t *testing.T) {
	t.Parallel()
	var c conc
	const workers, each = 8, 2000
	var wg sync.WaitGroup
	var progress [workers]atomic.Int64 // updates finished; -1 once a worker is done
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer progress[w].Store(-1)
			for i := range each {
				begin := int64(w*each + i)
				c.add(begin, 1)
				progress[w].Add(1)
				c.add(begin+3*sec, -1) // every request lasts 3s
				progress[w].Add(1)
			}
		}()
	}
	var seen [workers]int64
	waitProgress := func() {
		for w := range workers {
			for {
				p := progress[w].Load()
				if p < 0 || p > seen[w] {
					seen[w] = p
					break
				}
				runtime.Gosched()
			}
		}
	}
	var total int64
	closes := 0
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for now := int64(0); ; now += 100 {
		select {
		case <-done:
			area, _ := c.close(now)
			total += area
			if got, want := total, int64(workers*each)*3*sec; got != want {
				t.Errorf("sum of window areas = %d, want %d (after %d racing closes)", got, want, closes)
			}
			if got := c.active(); got != 0 {
				t.Errorf("active = %d after all ended, want 0", got)
			}
			return
		default:
			area, _ := c.close(now)
			total += area
			closes++
			waitProgress()
		}
	}
}

func TestHandler(t *testing.T) {
	t.Parallel()
	var got struct {
		status int
		bytes  int64
	}
	s := New(Config{OnDone: func(r *http.Request, status int, bytes int64, _ time.Duration) {
		got.status, got.bytes = status, bytes
	}})
	h := s.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.Active() != 1 {
			t.Errorf("active inside the handler = %d, want 1", s.Active())
		}
		if _, ok := w.(http.Flusher); !ok {
			t.Error("the wrapper hides http.Flusher")
		}
		if http.NewResponseController(w).Flush() != nil {
			t.Error("ResponseController cannot reach the server's writer")
		}
		w.WriteHeader(201)
		w.Write([]byte("hello"))
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if got.status != 201 || got.bytes != 5 {
		t.Errorf("OnDone got %d, %d bytes; want 201, 5", got.status, got.bytes)
	}
	if s.Active() != 0 {
		t.Errorf("active after = %d", s.Active())
	}
	// A kubelet probe is proxied but not counted.
	req := httptest.NewRequest("GET", "/", nil)
	req.Header.Set(KKubeletProbe, "1")
	got.status = -1
	s.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.Active() != 0 {
			t.Error("a kubelet probe was counted")
		}
	})).ServeHTTP(httptest.NewRecorder(), req)
	if got.status != -1 {
		t.Error("OnDone ran for a kubelet probe")
	}
	w := s.Close(s.now())
	if w.RequestsPerSecond == 0 {
		t.Error("no request counted")
	}
	var b strings.Builder
	s.WritePrometheus(&b, `revision="r1"`, Gauges{Depth: func() int { return 3 }})
	for _, want := range []string{
		`queue_depth{revision="r1"} 3`,
		`queue_active_requests{revision="r1"} 0`,
		`http_server_request_duration_seconds_count{revision="r1",http_response_status_code="201"} 1`,
		`http_server_request_duration_seconds_bucket{revision="r1",http_response_status_code="201",le="+Inf"} 1`,
		"# TYPE queue_requests_per_second gauge",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("metrics lack %q:\n%s", want, b.String())
		}
	}
}

// TestHandlerAllocs: counting costs no allocation per request.
func TestHandlerAllocs(t *testing.T) {
	s := New(Config{})
	h := s.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	req := httptest.NewRequest("GET", "/", nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req) // warm the pool
	budget := 0.0
	if raceEnabled {
		budget = 1
	}
	if n := testing.AllocsPerRun(1000, func() { h.ServeHTTP(w, req) }); n > budget {
		t.Errorf("allocs per request = %v, want at most %v", n, budget)
	}
}

func BenchmarkRecorder(b *testing.B) {
	b.Run("begin-end", func(b *testing.B) {
		s := New(Config{})
		b.ReportAllocs()
		for b.Loop() {
			now := s.now()
			s.Begin(now, false)
			s.End(now, false)
		}
	})
	b.Run("begin-end-parallel", func(b *testing.B) {
		s := New(Config{})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				now := s.now()
				s.Begin(now, false)
				s.End(now, false)
			}
		})
	})
	b.Run("handler-parallel", func(b *testing.B) {
		s := New(Config{})
		h := s.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			req := httptest.NewRequest("GET", "/", nil)
			w := httptest.NewRecorder()
			for pb.Next() {
				h.ServeHTTP(w, req)
			}
		})
	})
}
