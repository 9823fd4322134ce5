package stats

import (
	"crypto/tls"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queue-dev/queue/h1"
)

const sec = int64(1e6) // one second in microseconds

type event struct {
	at      int64 // microseconds
	begin   bool
	proxied bool
}

// times returns n copies of e.
func times(n int, e event) []event {
	ev := make([]event, n)
	for i := range ev {
		ev[i] = e
	}
	return ev
}

// TestWindowArithmetic: a window's average concurrency is the area under
// the count of requests in flight divided by its length, its request rate
// the arrivals divided by its length, proxied requests counted in both
// totals and in their own; areas too large for one segment are folded,
// not lost.
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
	}, {
		// 200 requests for an hour make an area of 7.2e11 microsecond-
		// requests, beyond the 40 bits of conc's word: the segments fold.
		name:     "an hour unread, 200 requests lasting all of it",
		events:   append(times(200, event{0, true, true}), times(200, event{3600 * sec, false, true})...),
		closeAt:  []int64{3600 * sec},
		wantConc: []float64{200}, wantProxied: []float64{200}, wantRPS: []float64{200.0 / 3600},
	}, {
		// Each arrival an hour into the segment would subtract 3.6e9 from
		// the area: 1000 of them would overflow it without a fold.
		name:     "1000 requests arriving an hour into the window",
		events:   times(1000, event{3600 * sec, true, false}),
		closeAt:  []int64{3601 * sec},
		wantConc: []float64{1000.0 / 3601}, wantProxied: []float64{0}, wantRPS: []float64{1000.0 / 3601},
	}, {
		name: "requests across hours of windows read late",
		events: append(append(times(300, event{sec / 2, true, false}), times(300, event{2 * 3600 * sec, false, false})...),
			times(300, event{3 * 3600 * sec, true, false})...),
		closeAt:     []int64{3600 * sec, 3*3600*sec + sec},
		wantConc:    []float64{300 * (3600 - 0.5) / 3600, (300*3600 + 300*1) / (2*3600 + 1.0)},
		wantProxied: []float64{0, 0}, wantRPS: []float64{300.0 / 3600, 300.0 / (2*3600 + 1)},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := New(Config{})
			ev := tt.events
			var prev int64
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
				if got, want := w.Length, time.Duration(at-prev)*time.Microsecond; got != want {
					t.Errorf("window %d: length = %v, want %v", i, got, want)
				}
				prev = at
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

// TestPackRoundTrip: unpack gives back what pack was given, at the edges
// of each field's range.
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
// wraps: conc.go). Real segments are half a second apart at least; here the
// closer may close one only once every worker still running has finished
// an update since the last close, so closes still land in the middle of
// updates but no update can span more than a few of them, however the
// scheduler stalls a worker. Every update is less than maxSegment after
// its segment's start, so add never refuses one.
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
				if !c.add(begin, 1) {
					t.Errorf("add(%d, 1) refused", begin)
				}
				progress[w].Add(1)
				if !c.add(begin+3000, -1) { // every request lasts 3 ms
					t.Errorf("add(%d, -1) refused", begin+3000)
				}
				progress[w].Add(1)
			}
		}()
	}
	var seen [workers]int64
	// The failure bound of the whole test: a worker's updates are
	// lock-free and take microseconds each.
	deadline := time.Now().Add(time.Minute)
	waitProgress := func() {
		for w := range workers {
			for {
				p := progress[w].Load()
				if p < 0 || p > seen[w] {
					seen[w] = p
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("worker %d made no progress since update %d, a minute into the test", w, seen[w])
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
			if got, want := total, int64(workers*each)*3000; got != want {
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

// TestConcRefusesStale: an update maxSegment or more after its segment's
// start changes nothing and is refused, and goes through once the segment
// is closed.
func TestConcRefusesStale(t *testing.T) {
	t.Parallel()
	var c conc
	if !c.add(maxSegment-1, 1) {
		t.Fatal("an update within the segment was refused")
	}
	before := c.x.Load()
	if c.add(maxSegment, 1) {
		t.Error("an update maxSegment after the segment's start was taken")
	}
	if got := c.x.Load(); got != before {
		t.Errorf("a refused update changed the word: %x, want %x", got, before)
	}
	if area, length := c.close(maxSegment); area != 1 || length != maxSegment {
		t.Errorf("close = %d, %d; want 1, %d", area, length, maxSegment)
	}
	if !c.add(maxSegment, 1) {
		t.Error("the update was refused after the close")
	}
	if got, want := c.active(), 2; got != want {
		t.Errorf("active = %d, want %d", got, want)
	}
}

// TestCurrent: a read closes the window only when it is at least
// Config.Window old and otherwise serves the last closed one again; a late
// read gets one window averaged over its real length.
func TestCurrent(t *testing.T) {
	t.Parallel()
	type step struct {
		at   int64
		do   string // "begin", "end" or "read"
		want Window // for "read"
	}
	one := Window{Length: time.Second, AverageConcurrency: 1, RequestsPerSecond: 1, Uptime: time.Second}
	tests := []struct {
		name   string
		window time.Duration
		steps  []step
	}{{
		name: "younger than the window: the last one again",
		steps: []step{
			{at: 0, do: "begin"},
			{at: sec / 2, do: "read", want: Window{}},
			{at: sec, do: "read", want: one},
			{at: sec * 3 / 2, do: "read", want: one},
			{at: 2*sec - 1, do: "read", want: one},
		},
	}, {
		name: "older: a new window over its real length",
		steps: []step{
			{at: 0, do: "begin"},
			{at: sec, do: "read", want: one},
			{at: sec * 3 / 2, do: "end"},
			{at: 4 * sec, do: "read", want: Window{Length: 3 * time.Second, AverageConcurrency: 0.5 / 3, Uptime: 4 * time.Second}},
		},
	}, {
		name: "a late first read",
		steps: []step{
			{at: 0, do: "begin"},
			{at: sec / 2, do: "end"},
			{at: 10 * sec, do: "read", want: Window{Length: 10 * time.Second, AverageConcurrency: 0.05, RequestsPerSecond: 0.1, Uptime: 10 * time.Second}},
		},
	}, {
		name: "two readers do not cut each other's windows short",
		steps: []step{
			{at: 0, do: "begin"},
			{at: sec, do: "read", want: one},
			{at: sec * 13 / 10, do: "read", want: one},
			{at: sec * 16 / 10, do: "read", want: one},
			{at: 2 * sec, do: "read", want: Window{Length: time.Second, AverageConcurrency: 1, Uptime: 2 * time.Second}},
			{at: sec * 29 / 10, do: "read", want: Window{Length: time.Second, AverageConcurrency: 1, Uptime: 2 * time.Second}},
		},
	}, {
		name:   "a longer configured window",
		window: 5 * time.Second,
		steps: []step{
			{at: 0, do: "begin"},
			{at: 3 * sec, do: "read", want: Window{}},
			{at: 5 * sec, do: "read", want: Window{Length: 5 * time.Second, AverageConcurrency: 1, RequestsPerSecond: 0.2, Uptime: 5 * time.Second}},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := New(Config{Window: tt.window})
			for i, st := range tt.steps {
				switch st.do {
				case "begin":
					s.Begin(st.at, false)
				case "end":
					s.End(st.at, false)
				case "read":
					got := s.Current(st.at)
					if got.Length != st.want.Length || got.Uptime != st.want.Uptime ||
						!near(got.AverageConcurrency, st.want.AverageConcurrency) ||
						!near(got.RequestsPerSecond, st.want.RequestsPerSecond) {
						t.Errorf("step %d: Current(%d) = %+v, want %+v", i, st.at, got, st.want)
					}
					if last := s.Last(); last != got {
						t.Errorf("step %d: Last() = %+v, want what Current returned, %+v", i, last, got)
					}
				}
			}
		})
	}
}

// TestConcurrentReaders: readers racing each other and the request path
// never close a window shorter than Config.Window, and the windows they
// close cover the whole time and add up to every request's duration, with
// or without segments folded between closes.
func TestConcurrentReaders(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		window time.Duration
	}{
		{"windows shorter than a segment", time.Millisecond},
		{"segments folded between closes", 1500 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := New(Config{Window: tt.window})
			const workers, readers, each, reads, step = 4, 3, 2000, 3000, 500 // step: microseconds per clock reading
			var clock atomic.Int64
			var total, ptotal atomic.Int64 // microsecond-requests
			start := make(chan struct{})
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					<-start
					for i := range each {
						proxied := (w+i)%2 == 0
						b := clock.Add(step)
						s.Begin(b, proxied)
						e := clock.Add(step)
						s.End(e, proxied)
						total.Add(e - b)
						if proxied {
							ptotal.Add(e - b)
						}
					}
				})
			}
			var mu sync.Mutex
			closed := map[time.Duration]Window{} // by end
			for range readers {
				wg.Go(func() {
					<-start
					seen := map[time.Duration]Window{}
					for range reads {
						if w := s.Current(clock.Add(step)); w.Length > 0 {
							seen[w.Uptime] = w
						}
					}
					mu.Lock()
					defer mu.Unlock()
					for k, v := range seen {
						closed[k] = v
					}
				})
			}
			close(start)
			finished := make(chan struct{})
			go func() { wg.Wait(); close(finished) }()
			select {
			case <-finished:
			case <-time.After(time.Minute): // a failure bound: the work takes milliseconds
				t.Fatal("the workers and readers did not finish within a minute")
			}
			if len(closed) == 0 {
				t.Fatal("the readers closed no window")
			}
			final := s.Close(clock.Add(step))
			var length time.Duration
			var area, parea, n, pn float64
			for _, w := range closed {
				if w.Length < tt.window {
					t.Errorf("a window of %v, shorter than %v", w.Length, tt.window)
				}
			}
			closed[final.Uptime] = final
			for _, w := range closed {
				secs := w.Length.Seconds()
				length += w.Length
				area += w.AverageConcurrency * secs * 1e6
				parea += w.AverageProxiedConcurrency * secs * 1e6
				n += w.RequestsPerSecond * secs
				pn += w.ProxiedRequestsPerSecond * secs
			}
			t.Logf("%d windows", len(closed))
			if got, want := length, final.Uptime; got != want {
				t.Errorf("windows cover %v, want %v", got, want)
			}
			for _, c := range []struct {
				what      string
				got, want float64
			}{
				{"area", area, float64(total.Load())},
				{"proxied area", parea, float64(ptotal.Load())},
				{"requests", n, workers * each},
				{"proxied requests", pn, workers * each / 2},
			} {
				if math.Abs(c.got-c.want) > 1e-6*c.want {
					t.Errorf("sum of the windows' %s = %v, want %v", c.what, c.got, c.want)
				}
			}
			if got := s.Active(); got != 0 {
				t.Errorf("active = %d after all ended, want 0", got)
			}
		})
	}
}

// TestHandler: the Handler counts a request as active while it runs, keeps
// http.Flusher and the ResponseController's reach, reports its status and
// bytes to OnDone and to the metrics, and neither counts nor reports a
// kubelet probe.
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
		`http_server_request_duration_seconds_count{revision="r1",http_request_method="GET",http_response_status_code="201",network_protocol_name="http",network_protocol_version="1.1",url_scheme="http"} 1`,
		`http_server_request_duration_seconds_bucket{revision="r1",http_request_method="GET",http_response_status_code="201",network_protocol_name="http",network_protocol_version="1.1",url_scheme="http",le="+Inf"} 1`,
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

// TestHandlerEngine runs the Handler under queue's HTTP/1.1 engine, whose
// ResponseWriter counts status and bytes itself (Reporter): it is passed on
// unwrapped, and OnDone gets what the wrapper would have counted.
func TestHandlerEngine(t *testing.T) {
	t.Parallel()
	type done struct {
		path   string
		status int
		bytes  int64
	}
	got := make(chan done, 8)
	s := New(Config{OnDone: func(r *http.Request, status int, bytes int64, _ time.Duration) {
		got <- done{r.URL.Path, status, bytes}
	}})
	h := s.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, wrapped := w.(interface{ Unwrap() http.ResponseWriter }); wrapped {
			t.Error("the engine's writer was wrapped")
		}
		switch r.URL.Path {
		case "/created":
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, "hello")
		case "/implicit":
			io.WriteString(w, "seven b")
		case "/short":
			w.Header().Set("Content-Length", "3")
			io.WriteString(w, "abcdef") // cut at the declared length
		case "/none":
		}
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &h1.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	c := &http.Client{Timeout: 10 * time.Second}
	for _, want := range []done{{"/created", 201, 5}, {"/implicit", 200, 7}, {"/short", 200, 3}, {"/none", 0, 0}} {
		res, err := c.Get("http://" + ln.Addr().String() + want.path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		select {
		case d := <-got:
			if d != want {
				t.Errorf("OnDone got %+v, want %+v", d, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: OnDone not called", want.path)
		}
	}
}

// TestDurations: the histogram keeps a series per status code, method,
// scheme and HTTP version, with OpenTelemetry's values for each; ByStatus
// sums them per code.
func TestDurations(t *testing.T) {
	t.Parallel()
	s := New(Config{})
	serve := func(method, proto string, secure bool, status int) {
		r := httptest.NewRequest(method, "/", nil)
		r.Proto = proto
		r.ProtoMajor, r.ProtoMinor, _ = http.ParseHTTPVersion(proto)
		r.TLS = nil
		if secure {
			r.TLS = &tls.ConnectionState{}
		}
		s.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(status)
		})).ServeHTTP(httptest.NewRecorder(), r)
	}
	serve("GET", "HTTP/1.1", false, 200)
	serve("GET", "HTTP/1.1", false, 200)
	serve("POST", "HTTP/2.0", true, 200)
	serve("BREW", "HTTP/1.0", false, 200)
	serve("GET", "HTTP/1.1", false, 503)
	type key struct {
		status                  int
		method, scheme, version string
	}
	got := map[key]uint64{}
	var order []key
	for _, d := range s.Durations() {
		k := key{d.Status, d.Method, d.Scheme, d.ProtocolVersion}
		got[k] = d.Count()
		order = append(order, k)
	}
	want := map[key]uint64{
		{200, "GET", "http", "1.1"}:    2,
		{200, "POST", "https", "2"}:    1,
		{200, "_OTHER", "http", "1.0"}: 1,
		{503, "GET", "http", "1.1"}:    1,
	}
	if len(got) != len(want) {
		t.Errorf("series %v, want %v", got, want)
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("series %v: %d requests, want %d", k, got[k], n)
		}
	}
	if len(order) == 4 && (order[0] != key{200, "GET", "http", "1.1"} || order[3].status != 503) {
		t.Errorf("order %v, want by status, then method", order)
	}
	by := ByStatus(s.Durations())
	if len(by) != 2 || by[0].Status != 200 || by[0].Count() != 4 || by[1].Status != 503 || by[1].Count() != 1 || by[0].Method != "" {
		t.Errorf("ByStatus = %+v, want 4 requests at 200 and 1 at 503", by)
	}
}
