package probe_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/queue-dev/queue/internal/testnet"
	"github.com/queue-dev/queue/probe"
)

// TestTCP: a TCP probe succeeds on a port that accepts and fails on one
// that refuses, by address and by host name.
func TestTCP(t *testing.T) {
	t.Parallel()
	open, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { open.Close() })
	go func() {
		for {
			c, err := open.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	// Held for the test: no other test's listener can take the port.
	closedAddr := testnet.ReservePort(t)
	_, closedPort, err := net.SplitHostPort(closedAddr)
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		addr    string
		wantErr bool
	}{
		{name: "listening", addr: open.Addr().String()},
		{name: "closed port", addr: closedAddr, wantErr: true},
		// A host name is dialed (no raw fast path, connect_linux.go).
		{name: "listening, by name", addr: "localhost:" + port(open.Addr())},
		{name: "closed port, by name", addr: "localhost:" + closedPort, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := probe.TCP{Addr: tt.addr, Timeout: 5 * time.Second}.Probe(t.Context())
			if got, want := err != nil, tt.wantErr; got != want {
				t.Errorf("Probe(%s) error = %v, want error %v", tt.addr, err, want)
			}
		})
	}
}

func port(a net.Addr) string { return strconv.Itoa(a.(*net.TCPAddr).Port) }

// TestHTTPStatus: an HTTP probe is ready on a status from 200 to 399 and
// not on 400 or above, and does not follow a redirect.
func TestHTTPStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		code    int
		wantErr bool
	}{
		{name: "200", code: 200},
		{name: "302 not followed", code: 302},
		{name: "399", code: 399},
		{name: "400", code: 400, wantErr: true},
		{name: "503", code: 503, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex // guards elsewhere, the requests to the redirect target
			elsewhere := 0
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/elsewhere" {
					mu.Lock()
					elsewhere++
					mu.Unlock()
					w.WriteHeader(http.StatusServiceUnavailable)
					return
				}
				w.Header().Set("Location", "/elsewhere")
				w.WriteHeader(tt.code)
			}))
			t.Cleanup(srv.Close)
			err := (&probe.HTTP{URL: srv.URL + "/healthz", Timeout: 5 * time.Second}).Probe(t.Context())
			if got, want := err != nil, tt.wantErr; got != want {
				t.Errorf("Probe() error = %v, want error %v", err, want)
			}
			mu.Lock()
			defer mu.Unlock()
			if got, want := elsewhere, 0; got != want {
				t.Errorf("requests to the redirect target = %d, want %d", got, want)
			}
		})
	}
}

// TestHTTPRequest: the probe's request is a GET of its URL's path and
// query, with its Host and header if set, and the probe's User-Agent
// unless the header sets one.
func TestHTTPRequest(t *testing.T) {
	t.Parallel()
	type seen struct {
		method, path, query, host, ua, custom string
	}
	tests := []struct {
		name   string
		host   string
		header http.Header
		want   func(srvHost string) seen
	}{
		{
			name: "defaults",
			want: func(h string) seen {
				return seen{method: "GET", path: "/healthz", query: "x=1", host: h, ua: probe.UserAgent}
			},
		},
		{
			name:   "host and header",
			host:   "app.example.test",
			header: http.Header{"X-Custom": {"v1"}},
			want: func(string) seen {
				return seen{method: "GET", path: "/healthz", query: "x=1", host: "app.example.test", ua: "kube-probe/queue", custom: "v1"}
			},
		},
		{
			name:   "own user agent kept",
			header: http.Header{"User-Agent": {"mine/1"}},
			want: func(h string) seen {
				return seen{method: "GET", path: "/healthz", query: "x=1", host: h, ua: "mine/1"}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := make(chan seen, 1)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got <- seen{method: r.Method, path: r.URL.Path, query: r.URL.RawQuery, host: r.Host, ua: r.Header.Get("User-Agent"), custom: r.Header.Get("X-Custom")}
			}))
			t.Cleanup(srv.Close)
			p := &probe.HTTP{URL: srv.URL + "/healthz?x=1", Host: tt.host, Header: tt.header, Timeout: 5 * time.Second}
			if err := p.Probe(t.Context()); err != nil {
				t.Fatalf("Probe() = %v, want nil", err)
			}
			// The handler sends before it answers: a probe that got its
			// answer finds the request there.
			select {
			case got := <-got:
				if want := tt.want(strings.TrimPrefix(srv.URL, "http://")); got != want {
					t.Errorf("server saw %+v, want %+v", got, want)
				}
			default:
				t.Fatal("the probe succeeded, but the server's handler saw no request")
			}
		})
	}
}

// TestHTTPTimeout: a probe of a server that never answers fails with
// context.DeadlineExceeded once its Timeout has passed, not the longer
// DefaultTimeout.
func TestHTTPTimeout(t *testing.T) {
	t.Parallel()
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-block
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(block) }) // runs before srv.Close
	start := time.Now()
	err := (&probe.HTTP{URL: srv.URL, Timeout: 50 * time.Millisecond}).Probe(t.Context())
	elapsed := time.Since(start)
	if err == nil {
		t.Fatal("Probe() = nil, want a timeout error")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Probe() = %v, want context.DeadlineExceeded", err)
	}
	// DefaultTimeout is 1 s; well under it proves Timeout was used.
	if elapsed >= probe.DefaultTimeout {
		t.Errorf("Probe() took %v, want about 50ms", elapsed)
	}
}

func startGRPC(t *testing.T, statuses map[string]healthpb.HealthCheckResponse_ServingStatus) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	hs := health.NewServer()
	for svc, st := range statuses {
		hs.SetServingStatus(svc, st)
	}
	healthpb.RegisterHealthServer(s, hs)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

// TestGRPC: a gRPC health probe is ready only on SERVING for its service
// (the server's overall status when none is named); NOT_SERVING and the
// unknown statuses are ErrNotServing, an unknown service an error of
// another kind.
func TestGRPC(t *testing.T) {
	t.Parallel()
	const (
		serving    = healthpb.HealthCheckResponse_SERVING
		notServing = healthpb.HealthCheckResponse_NOT_SERVING
	)
	tests := []struct {
		name          string
		statuses      map[string]healthpb.HealthCheckResponse_ServingStatus
		service       string
		wantErr       bool
		wantNotServed bool
	}{
		{name: "serving", statuses: map[string]healthpb.HealthCheckResponse_ServingStatus{"app.v1.App": serving}, service: "app.v1.App"},
		{name: "not serving", statuses: map[string]healthpb.HealthCheckResponse_ServingStatus{"app.v1.App": notServing}, service: "app.v1.App", wantErr: true, wantNotServed: true},
		{name: "unknown status", statuses: map[string]healthpb.HealthCheckResponse_ServingStatus{"app.v1.App": healthpb.HealthCheckResponse_UNKNOWN}, service: "app.v1.App", wantErr: true, wantNotServed: true},
		{name: "service unknown status", statuses: map[string]healthpb.HealthCheckResponse_ServingStatus{"app.v1.App": healthpb.HealthCheckResponse_SERVICE_UNKNOWN}, service: "app.v1.App", wantErr: true, wantNotServed: true},
		{name: "unknown service", statuses: map[string]healthpb.HealthCheckResponse_ServingStatus{"app.v1.App": serving}, service: "other.Svc", wantErr: true},
		{name: "overall serving", statuses: map[string]healthpb.HealthCheckResponse_ServingStatus{"app.v1.App": notServing}},
		{name: "overall not serving", statuses: map[string]healthpb.HealthCheckResponse_ServingStatus{"": notServing, "app.v1.App": serving}, wantErr: true, wantNotServed: true},
		{name: "long service name", statuses: map[string]healthpb.HealthCheckResponse_ServingStatus{strings.Repeat("s", 200): serving}, service: strings.Repeat("s", 200)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			addr := startGRPC(t, tt.statuses)
			err := (&probe.GRPC{Addr: addr, Service: tt.service, Timeout: 5 * time.Second}).Probe(t.Context())
			if got, want := err != nil, tt.wantErr; got != want {
				t.Errorf("Probe(%q) error = %v, want error %v", tt.service, err, want)
			}
			if got, want := errors.Is(err, probe.ErrNotServing), tt.wantNotServed; got != want {
				t.Errorf("Probe(%q) = %v, errors.Is(ErrNotServing) = %v, want %v", tt.service, err, got, want)
			}
		})
	}
}

// counted is a Prober that returns err and counts its calls.
type counted struct {
	err   error
	calls int
}

func (c *counted) Probe(context.Context) error {
	c.calls++
	return c.err
}

// TestNoneAll: None is always ready; All is ready when every prober is,
// calls them in order and stops at the first failure, whose error it
// returns.
func TestNoneAll(t *testing.T) {
	t.Parallel()
	errDown := errors.New("down")
	tests := []struct {
		name      string
		probers   func() (probe.Prober, []*counted)
		wantErr   error
		wantCalls []int
	}{
		{
			name:    "none",
			probers: func() (probe.Prober, []*counted) { return probe.None{}, nil },
		},
		{
			name:    "all empty",
			probers: func() (probe.Prober, []*counted) { return probe.All{}, nil },
		},
		{
			name: "all ok",
			probers: func() (probe.Prober, []*counted) {
				a, b := &counted{}, &counted{}
				return probe.All{a, probe.None{}, b}, []*counted{a, b}
			},
			wantCalls: []int{1, 1},
		},
		{
			name: "last fails",
			probers: func() (probe.Prober, []*counted) {
				a, b := &counted{}, &counted{err: errDown}
				return probe.All{a, b}, []*counted{a, b}
			},
			wantErr:   errDown,
			wantCalls: []int{1, 1},
		},
		{
			name: "first fails",
			probers: func() (probe.Prober, []*counted) {
				a, b := &counted{err: errDown}, &counted{}
				return probe.All{a, b}, []*counted{a, b}
			},
			wantErr:   errDown,
			wantCalls: []int{1, 0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, cs := tt.probers()
			if got, want := p.Probe(t.Context()), tt.wantErr; !errors.Is(got, want) || (want == nil) != (got == nil) {
				t.Errorf("Probe() = %v, want %v", got, want)
			}
			for i, c := range cs {
				if got, want := c.calls, tt.wantCalls[i]; got != want {
					t.Errorf("prober %d called %d times, want %d", i, got, want)
				}
			}
		})
	}
}

// script is a fake Prober: result(n, since) gives the result of the n-th
// call (from 0), made at since after the script was created. It records
// the time of each call.
type script struct {
	start  time.Time
	result func(n int, since time.Duration) error

	mu    sync.Mutex
	calls []time.Duration
}

func newScript(result func(n int, since time.Duration) error) *script {
	return &script{start: time.Now(), result: result}
}

func (s *script) Probe(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	since := time.Since(s.start)
	n := len(s.calls)
	s.calls = append(s.calls, since)
	return s.result(n, since)
}

func (s *script) times() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.calls...)
}

// seq returns the results in order, then the last one forever.
func seq(results ...error) func(int, time.Duration) error {
	return func(n int, _ time.Duration) error {
		return results[min(n, len(results)-1)]
	}
}

var errDown = errors.New("connection refused")

// messages returns the msg of each log line in b.
func messages(t *testing.T, b *testnet.SyncBuffer) []string {
	t.Helper()
	var msgs []string
	for line := range strings.Lines(b.String()) {
		var rec struct{ Msg string }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		msgs = append(msgs, rec.Msg)
	}
	return msgs
}

func count(msgs []string, msg string) int {
	n := 0
	for _, m := range msgs {
		if m == msg {
			n++
		}
	}
	return n
}

// run starts w in the bubble and returns a stop func that cancels it,
// waits for it to settle and checks that Run returned.
func run(t *testing.T, w *probe.Watcher) (stop func()) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		w.Run(ctx)
		close(done)
	}()
	return func() {
		t.Helper()
		cancel()
		synctest.Wait()
		select {
		case <-done:
		default:
			t.Error("Run did not return after its context was canceled")
		}
	}
}

// sleepUntil sleeps until d after start and lets the bubble settle.
func sleepUntil(start time.Time, d time.Duration) {
	time.Sleep(time.Until(start.Add(d)))
	synctest.Wait()
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestWatcherColdStart: an upstream that starts accepting is probed every
// FastInterval from the start and seen ready at the first probe after it
// accepts (Changed closed, one "upstream ready" line, no line for the
// failures before); once ready it is probed every RelaxedInterval.
func TestWatcherColdStart(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		// The upstream starts accepting at upAt, between two fast probes.
		const upAt = 101*time.Millisecond + 300*time.Microsecond
		start := time.Now()
		s := newScript(func(_ int, since time.Duration) error {
			if since < upAt {
				return errDown
			}
			return nil
		})
		var logs testnet.SyncBuffer
		w := &probe.Watcher{Prober: s, Logger: slog.New(slog.NewJSONHandler(&logs, nil))}
		changed := w.Changed()
		var readyAt time.Duration
		sawReady := make(chan struct{})
		go func() {
			<-changed
			readyAt = time.Since(start)
			close(sawReady)
		}()
		stop := run(t, w)

		sleepUntil(start, upAt-time.Microsecond)
		if w.Ready() {
			t.Fatal("Ready() = true before the upstream accepts")
		}
		if isClosed(changed) {
			t.Error("Changed() closed before the upstream accepts")
		}
		sleepUntil(start, upAt+probe.FastInterval)
		if !w.Ready() {
			t.Fatalf("Ready() = false %v after the upstream accepts, want true", probe.FastInterval)
		}
		if !isClosed(changed) {
			t.Fatal("Changed() not closed on becoming ready")
		}
		<-sawReady
		if got, max := readyAt-upAt, probe.FastInterval; got < 0 || got > max {
			t.Errorf("ready %v after the upstream accepted, want within %v", got, max)
		}

		next := w.Changed()
		sleepUntil(start, upAt+3500*time.Millisecond)
		stop()
		if isClosed(next) {
			t.Error("Changed() closed while staying ready")
		}

		calls := s.times()
		firstOK := -1
		for i, c := range calls {
			if c >= upAt {
				firstOK = i
				break
			}
		}
		if firstOK < 50 {
			t.Fatalf("first success at call %d, want after at least 50 failures (calls %v)", firstOK, calls)
		}
		if got, want := calls[0], time.Duration(0); got != want {
			t.Errorf("first probe at %v, want %v", got, want)
		}
		for i := 1; i <= firstOK; i++ {
			if got, want := calls[i]-calls[i-1], probe.FastInterval; got != want {
				t.Errorf("interval before call %d (not ready) = %v, want %v", i, got, want)
			}
		}
		relaxed := calls[firstOK+1:]
		if got, want := len(relaxed), 3; got != want {
			t.Errorf("%d probes in 3.5s once ready, want %d", got, want)
		}
		prev := calls[firstOK]
		for i, c := range relaxed {
			if got, want := c-prev, probe.RelaxedInterval; got != want {
				t.Errorf("interval before relaxed probe %d = %v, want %v", i, got, want)
			}
			prev = c
		}

		msgs := messages(t, &logs)
		if got, want := count(msgs, "upstream not ready"), 0; got != want {
			t.Errorf("%d %q lines after %d failed attempts, want %d", got, "upstream not ready", firstOK, want)
		}
		if got, want := count(msgs, "upstream ready"), 1; got != want {
			t.Errorf("%d %q lines, want %d", got, "upstream ready", want)
		}
		if got, want := len(msgs), 1; got != want {
			t.Errorf("log = %q, want one line", msgs)
		}
	})
}

// TestWatcherFailureWhileReady: a ready upstream that fails is probed every
// FastInterval, turns unready only after three failures in a row (a
// success between resets the count) and ready again at the next success;
// each change closes Changed and logs one line.
func TestWatcherFailureWhileReady(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const fast, relaxed = probe.FastInterval, probe.RelaxedInterval
		start := time.Now()
		s := newScript(seq(
			nil,     // 0 at 0: ready
			errDown, // 1 at 1s
			errDown, // 2 at 1s+fast
			nil,     // 3 at 1s+2fast: resets the count
			errDown, // 4 at 2s+2fast
			errDown, // 5 at 2s+3fast
			errDown, // 6 at 2s+4fast: third in a row, unready
			errDown, // 7 at 2s+5fast
			nil,     // 8 at 2s+6fast: ready again
		))
		var logs testnet.SyncBuffer
		w := &probe.Watcher{Prober: s, Logger: slog.New(slog.NewJSONHandler(&logs, nil))}
		stop := run(t, w)

		synctest.Wait()
		if !w.Ready() {
			t.Fatal("Ready() = false after a first success")
		}
		ch := w.Changed()
		sleepUntil(start, 2*relaxed+3*fast+fast/2) // after call 5
		if !w.Ready() {
			t.Error("Ready() = false after 2 consecutive failures, want true until 3")
		}
		if isClosed(ch) {
			t.Error("Changed() closed without a change of state")
		}
		sleepUntil(start, 2*relaxed+4*fast+fast/2) // after call 6
		if w.Ready() {
			t.Error("Ready() = true after 3 consecutive failures")
		}
		if !isClosed(ch) {
			t.Error("Changed() not closed on becoming unready")
		}
		ch = w.Changed()
		sleepUntil(start, 2*relaxed+6*fast+fast/2) // after call 8
		if !w.Ready() {
			t.Error("Ready() = false after a success")
		}
		if !isClosed(ch) {
			t.Error("Changed() not closed on becoming ready again")
		}
		sleepUntil(start, 3*relaxed+6*fast+fast/2) // after call 9
		stop()

		want := []time.Duration{
			0, relaxed, relaxed + fast, relaxed + 2*fast,
			2*relaxed + 2*fast, 2*relaxed + 3*fast, 2*relaxed + 4*fast, 2*relaxed + 5*fast, 2*relaxed + 6*fast,
			3*relaxed + 6*fast,
		}
		if got := s.times(); !equal(got, want) {
			t.Errorf("probe times = %v, want %v", got, want)
		}
		if got, want := strings.Join(messages(t, &logs), ","), "upstream ready,upstream not ready,upstream ready"; got != want {
			t.Errorf("log = %q, want %q", got, want)
		}
	})
}

func equal(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestWatcherThresholds: a ready upstream turns unready after
// FailureThreshold failures in a row (3 when unset), not one before.
func TestWatcherThresholds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		threshold int
		// wantFailures is the number of consecutive failures after which
		// the watcher is unready.
		wantFailures int
	}{
		{name: "default", threshold: 0, wantFailures: 3},
		{name: "one", threshold: 1, wantFailures: 1},
		{name: "five", threshold: 5, wantFailures: 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				s := newScript(seq(nil, errDown))
				w := &probe.Watcher{Prober: s, FailureThreshold: tt.threshold}
				stop := run(t, w)
				defer stop()
				// Failure k (from 1) is at RelaxedInterval+(k-1)*FastInterval.
				at := func(k int) time.Duration {
					return probe.RelaxedInterval + time.Duration(k-1)*probe.FastInterval + probe.FastInterval/2
				}
				sleepUntil(start, at(tt.wantFailures-1))
				if !w.Ready() {
					t.Errorf("Ready() = false after %d failures", tt.wantFailures-1)
				}
				sleepUntil(start, at(tt.wantFailures))
				if w.Ready() {
					t.Errorf("Ready() = true after %d failures", tt.wantFailures)
				}
			})
		})
	}
}

// TestWatcherSuccessThreshold: with SuccessThreshold 2, an unready
// upstream turns ready after two successes in a row, not after one.
func TestWatcherSuccessThreshold(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		s := newScript(seq(errDown, nil, errDown, nil, nil))
		w := &probe.Watcher{Prober: s, SuccessThreshold: 2}
		stop := run(t, w)
		defer stop()
		sleepUntil(start, 3*probe.FastInterval+probe.FastInterval/2) // after call 3
		if w.Ready() {
			t.Error("Ready() = true after one success, want 2 in a row")
		}
		sleepUntil(start, 4*probe.FastInterval+probe.FastInterval/2) // after call 4
		if !w.Ready() {
			t.Error("Ready() = false after 2 successes in a row")
		}
	})
}

// TestWatcherPeriod: with a Period set, the upstream is probed every
// Period whatever its state, and turns ready and unready on the same
// thresholds.
func TestWatcherPeriod(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const period = 5 * time.Second
		start := time.Now()
		s := newScript(seq(errDown, errDown, nil, errDown, errDown, errDown, nil))
		var logs testnet.SyncBuffer
		w := &probe.Watcher{Prober: s, Period: period, Logger: slog.New(slog.NewJSONHandler(&logs, nil))}
		stop := run(t, w)

		sleepUntil(start, 2*period-time.Millisecond)
		if w.Ready() {
			t.Error("Ready() = true before the first success")
		}
		sleepUntil(start, 2*period)
		if !w.Ready() {
			t.Error("Ready() = false after the first success")
		}
		sleepUntil(start, 5*period-time.Millisecond)
		if !w.Ready() {
			t.Error("Ready() = false after 2 failures")
		}
		sleepUntil(start, 5*period)
		if w.Ready() {
			t.Error("Ready() = true after 3 failures")
		}
		sleepUntil(start, 7*period+period/2)
		stop()

		var want []time.Duration
		for i := range 8 {
			want = append(want, time.Duration(i)*period)
		}
		if got := s.times(); !equal(got, want) {
			t.Errorf("probe times = %v, want %v", got, want)
		}
		if got, want := strings.Join(messages(t, &logs), ","), "upstream ready,upstream not ready,upstream ready"; got != want {
			t.Errorf("log = %q, want %q", got, want)
		}
	})
}

// TestWatcherManyFailuresLogNothing: an upstream that never accepts is
// probed every FastInterval in its first second, and neither logs nor
// closes Changed.
func TestWatcherManyFailuresLogNothing(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		s := newScript(seq(errDown))
		var logs testnet.SyncBuffer
		w := &probe.Watcher{Prober: s, Logger: slog.New(slog.NewJSONHandler(&logs, nil))}
		ch := w.Changed()
		stop := run(t, w)
		sleepUntil(start, time.Second)
		stop()
		if got, min := len(s.times()), 50; got < min {
			t.Errorf("%d probes in 1s, want at least %d", got, min)
		}
		if w.Ready() {
			t.Error("Ready() = true, never succeeded")
		}
		if isClosed(ch) {
			t.Error("Changed() closed without a change of state")
		}
		if got := messages(t, &logs); len(got) != 0 {
			t.Errorf("log = %q, want nothing", got)
		}
	})
}

// gaps returns the waits between consecutive probe times.
func gaps(calls []time.Duration) []time.Duration {
	var g []time.Duration
	for i := 1; i < len(calls); i++ {
		g = append(g, calls[i]-calls[i-1])
	}
	return g
}

// countIn counts the probe times in [from, to).
func countIn(calls []time.Duration, from, to time.Duration) int {
	n := 0
	for _, c := range calls {
		if c >= from && c < to {
			n++
		}
	}
	return n
}

// TestWatcherBacksOffWhenNobodyAsks: an upstream that never accepts is
// probed every FastInterval for StartWindow, then less and less often, the
// wait growing to MaxBackoff and no further.
func TestWatcherBacksOffWhenNobodyAsks(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		s := newScript(seq(errDown))
		w := &probe.Watcher{Prober: s}
		stop := run(t, w)
		sleepUntil(start, probe.StartWindow+30*time.Second)
		stop()

		calls := s.times()
		if got, min := countIn(calls, 0, probe.StartWindow), int(probe.StartWindow/probe.FastInterval); got < min {
			t.Errorf("%d probes in the start window, want at least %d (every %v)", got, min, probe.FastInterval)
		}
		if got, max := countIn(calls, probe.StartWindow+probe.FastInterval, probe.StartWindow+30*time.Second), 50; got > max {
			t.Errorf("%d probes in the 30s after the start window, want at most %d", got, max)
		}
		// After the window the waits never shrink and reach the ceiling.
		var after []time.Duration
		for i, g := range gaps(calls) {
			if calls[i] >= probe.StartWindow {
				after = append(after, g)
			}
		}
		if len(after) < 20 {
			t.Fatalf("only %d probes after the start window: %v", len(after), after)
		}
		for i := 1; i < len(after); i++ {
			if after[i] < after[i-1] {
				t.Errorf("wait %d after the start window = %v, shorter than the one before (%v)", i, after[i], after[i-1])
			}
			if after[i] > probe.MaxBackoff {
				t.Errorf("wait %d after the start window = %v, above the ceiling %v", i, after[i], probe.MaxBackoff)
			}
		}
		if got, want := after[len(after)-1], probe.MaxBackoff; got != want {
			t.Errorf("last wait = %v, want the ceiling %v", got, want)
		}
		if w.Ready() {
			t.Error("Ready() = true, never succeeded")
		}
	})
}

// TestWatcherDemand: a Demand while down and backed off probes at once,
// then every HoldInterval for DemandWindow, then backs off again, the wait
// doubling from HoldInterval up to MaxBackoff.
func TestWatcherDemand(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		s := newScript(seq(errDown))
		w := &probe.Watcher{Prober: s}
		stop := run(t, w)
		defer stop()

		// Backed off to the ceiling; Demand half-way between two probes.
		sleepUntil(start, 10*time.Second)
		last := s.times()[len(s.times())-1]
		at := last + probe.MaxBackoff + probe.MaxBackoff/2
		sleepUntil(start, at)
		before := s.times()
		if got, want := before[len(before)-1], last+probe.MaxBackoff; got != want {
			t.Fatalf("last probe before the demand at %v, want %v (backed off to the ceiling)", got, want)
		}
		w.Demand()
		end := at + probe.DemandWindow + 5*time.Second
		sleepUntil(start, end)

		var want []time.Duration
		for d := time.Duration(0); d <= probe.DemandWindow; d += probe.HoldInterval {
			want = append(want, at+d)
		}
		next := at + probe.DemandWindow
		for wait := 2 * probe.HoldInterval; next+wait < end; wait = min(2*wait, probe.MaxBackoff) {
			next += wait
			want = append(want, next)
		}
		if got := s.times()[len(before):]; !equal(got, want) {
			t.Errorf("probe times from the demand = %v, want %v", got, want)
		}
	})
}

// TestWatcherDemandRepeated: probe requests that keep coming while the
// upstream is down each get a probe at once, at most one per FastInterval,
// so the upstream is seen within one such probe of accepting, and every
// held request is answered at that moment.
func TestWatcherDemandRepeated(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		every time.Duration // between two probe requests
		// wantGap is between two probes while the requests come.
		wantGap time.Duration
	}{
		{name: "every 5ms", every: 5 * time.Millisecond, wantGap: 5 * time.Millisecond},
		{name: "every 1ms, bounded", every: time.Millisecond, wantGap: probe.FastInterval},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				// The first request comes half-way between two probes of
				// the ceiling's back-off (at 10.02 s, 11.02 s ...), and
				// the upstream starts accepting between two requests.
				const from = 10*time.Second + 520*time.Millisecond
				const upAt = from + 103*time.Millisecond + 300*time.Microsecond
				s := newScript(func(_ int, since time.Duration) error {
					if since < upAt {
						return errDown
					}
					return nil
				})
				w := &probe.Watcher{Prober: s}
				stop := run(t, w)
				defer stop()
				changed := w.Changed()
				var readyAt time.Duration
				sawReady := make(chan struct{})
				go func() {
					<-changed
					readyAt = time.Since(start)
					close(sawReady)
				}()

				sleepUntil(start, from)
				type answer struct {
					calledAt, at time.Duration
					ready        bool
				}
				n := int((upAt - from + 20*time.Millisecond) / tt.every)
				answers := make(chan answer, n)
				for range n {
					go func() {
						called := time.Since(start)
						ready := w.WaitReady(t.Context(), probe.DemandWindow)
						answers <- answer{calledAt: called, at: time.Since(start), ready: ready}
					}()
					time.Sleep(tt.every)
				}
				synctest.Wait()
				<-sawReady

				var want []time.Duration
				for at := from; ; at += tt.wantGap {
					want = append(want, at)
					if at >= upAt {
						break
					}
				}
				if got, want := readyAt, want[len(want)-1]; got != want {
					t.Errorf("ready at %v, want %v (the first probe after the upstream accepts at %v)", got, want, upAt)
				}
				// Once ready, the requests leave the relaxed pace alone.
				if got := s.times(); len(got) < len(want) || !equal(got[len(got)-len(want):], want) || countIn(got, upAt, time.Since(start)+time.Nanosecond) != 1 {
					t.Errorf("probe times from the first request = %v, want %v and none after", got[len(got)-min(len(got), len(want)+1):], want)
				}
				for range n {
					a := <-answers
					if !a.ready {
						t.Errorf("request at %v: WaitReady = false, want true", a.calledAt)
					}
					if got, want := a.at, max(a.calledAt, readyAt); got != want {
						t.Errorf("request at %v answered at %v, want %v", a.calledAt, got, want)
					}
				}
			})
		})
	}
}

// TestWatcherDemandCost: one probe request a second (the kubelet's
// period) while the upstream is down for good costs at most
// DemandWindow/HoldInterval+2 probes a second: the immediate probe, the
// hold pace, and a first back-off step. This is the CPU bound in probes.
func TestWatcherDemandCost(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		s := newScript(seq(errDown))
		w := &probe.Watcher{Prober: s}
		stop := run(t, w)
		defer stop()

		const from, seconds = 10*time.Second + 300*time.Millisecond, 30
		sleepUntil(start, from)
		answers := make(chan bool, seconds)
		for range seconds {
			go func() { answers <- w.WaitReady(t.Context(), probe.DemandWindow) }()
			time.Sleep(time.Second)
		}
		synctest.Wait()
		for range seconds {
			if <-answers {
				t.Error("WaitReady = true, never succeeded")
			}
		}

		perSecond := int(probe.DemandWindow / probe.HoldInterval)
		got := countIn(s.times(), from, from+seconds*time.Second)
		if max := seconds * (perSecond + 2); got > max {
			t.Errorf("%d probes in %ds with a request each second, want at most %d", got, seconds, max)
		}
		// At least the hold pace: a held request sees the upstream within
		// HoldInterval of it accepting.
		if min := seconds * perSecond; got < min {
			t.Errorf("%d probes in %ds with a request each second, want at least %d", got, seconds, min)
		}
	})
}

// TestWatcherDemandWithPeriod: with a Period set, a Demand does not probe
// out of the period's turn.
func TestWatcherDemandWithPeriod(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		s := newScript(seq(errDown))
		w := &probe.Watcher{Prober: s, Period: 5 * time.Second}
		stop := run(t, w)
		defer stop()
		sleepUntil(start, time.Second)
		w.Demand()
		sleepUntil(start, 2*time.Second)
		if got, want := s.times(), []time.Duration{0}; !equal(got, want) {
			t.Errorf("probe times = %v, want %v: a period is kept", got, want)
		}
	})
}

// TestWatcherWaitReady: WaitReady returns true at the first held probe that
// finds the upstream ready, and false when its wait or its context ends
// first, at that moment.
func TestWatcherWaitReady(t *testing.T) {
	t.Parallel()
	const max = 800 * time.Millisecond
	tests := []struct {
		name string
		// upAfter is when the upstream starts accepting, after the call;
		// negative means never.
		upAfter time.Duration
		// cancelAfter cancels the call's context; 0 means never.
		cancelAfter time.Duration
		want        bool
		// wantWithin bounds when the call returns, after upAfter (or the
		// cancel, or max).
		wantAt     time.Duration
		wantWithin time.Duration
	}{
		{name: "ready in time", upAfter: 300 * time.Millisecond, want: true, wantAt: 300 * time.Millisecond, wantWithin: probe.FastInterval},
		// Held probes come HoldInterval apart: at 300 ms, then 400 ms.
		{name: "ready between hold probes", upAfter: 310 * time.Millisecond, want: true, wantAt: 300*time.Millisecond + probe.HoldInterval},
		{name: "ready at once", upAfter: 0, want: true, wantAt: 0, wantWithin: probe.FastInterval},
		{name: "never", upAfter: -1, want: false, wantAt: max},
		{name: "too late", upAfter: max + time.Second, want: false, wantAt: max},
		{name: "canceled", upAfter: -1, cancelAfter: 100 * time.Millisecond, want: false, wantAt: 100 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				// The call is made at 10 s, backed off to the ceiling.
				const callAt = 10*time.Second + 300*time.Millisecond
				s := newScript(func(_ int, since time.Duration) error {
					if tt.upAfter >= 0 && since >= callAt+tt.upAfter {
						return nil
					}
					return errDown
				})
				w := &probe.Watcher{Prober: s}
				stop := run(t, w)
				defer stop()
				sleepUntil(start, callAt)
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				if tt.cancelAfter > 0 {
					time.AfterFunc(tt.cancelAfter, cancel)
				}
				got := w.WaitReady(ctx, max)
				took := time.Since(start) - callAt
				if got != tt.want {
					t.Errorf("WaitReady = %v, want %v", got, tt.want)
				}
				if took < tt.wantAt || took > tt.wantAt+tt.wantWithin {
					t.Errorf("WaitReady returned after %v, want within %v of %v", took, tt.wantWithin, tt.wantAt)
				}
				if got, want := w.Ready(), tt.want; got != want {
					t.Errorf("Ready() = %v after WaitReady, want %v", got, want)
				}
			})
		})
	}
}

// TestWatcherWaitReadyWhenReady: WaitReady on a ready upstream returns true
// at once, and its probe takes the place of the timer's next one.
func TestWatcherWaitReadyWhenReady(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		s := newScript(seq(nil))
		w := &probe.Watcher{Prober: s}
		stop := run(t, w)
		defer stop()
		sleepUntil(start, 1500*time.Millisecond)
		if !w.WaitReady(t.Context(), time.Second) {
			t.Error("WaitReady = false for a ready upstream")
		}
		if got := time.Since(start); got != 1500*time.Millisecond {
			t.Errorf("WaitReady took %v, want no wait", got-1500*time.Millisecond)
		}
		// A request while ready, half a RelaxedInterval after the last
		// probe, probes with it; the timer then waits two intervals.
		sleepUntil(start, 3500*time.Millisecond+time.Millisecond)
		want := []time.Duration{0, probe.RelaxedInterval, 1500 * time.Millisecond, 1500*time.Millisecond + 2*probe.RelaxedInterval}
		if got := s.times(); !equal(got, want) {
			t.Errorf("probe times = %v, want %v", got, want)
		}
	})
}

// TestWatcherFailureThenBackOff: a ready upstream is probed every
// RelaxedInterval; a failure is confirmed every FastInterval, probing
// stays fast for StartWindow from the first failure, then backs off.
func TestWatcherFailureThenBackOff(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const fast, relaxed = probe.FastInterval, probe.RelaxedInterval
		start := time.Now()
		const downAt = 3*relaxed + relaxed/2
		s := newScript(func(_ int, since time.Duration) error {
			if since >= downAt {
				return errDown
			}
			return nil
		})
		w := &probe.Watcher{Prober: s}
		stop := run(t, w)
		sleepUntil(start, 4*relaxed+2*fast-time.Microsecond)
		if !w.Ready() {
			t.Error("Ready() = false after 2 failures")
		}
		sleepUntil(start, 4*relaxed+2*fast)
		if w.Ready() {
			t.Error("Ready() = true after 3 failures")
		}
		sleepUntil(start, 4*relaxed+probe.StartWindow+10*time.Second)
		stop()

		calls := s.times()
		if got, want := calls[:5], []time.Duration{0, relaxed, 2 * relaxed, 3 * relaxed, 4 * relaxed}; !equal(got, want) {
			t.Errorf("first probe times = %v, want %v", got, want)
		}
		firstFail := 4 * relaxed
		if got, min := countIn(calls, firstFail, firstFail+probe.StartWindow), int(probe.StartWindow/fast); got < min {
			t.Errorf("%d probes in the window after the first failure, want at least %d", got, min)
		}
		if got, max := countIn(calls, firstFail+probe.StartWindow+5*time.Second, firstFail+probe.StartWindow+10*time.Second), 6; got > max {
			t.Errorf("%d probes in 5s once backed off, want at most %d", got, max)
		}
	})
}

// BenchmarkRefusedProbe measures a TCP probe of a closed loopback port:
// what each probe costs while the upstream is down.
func BenchmarkRefusedProbe(b *testing.B) {
	p := probe.TCP{Addr: testnet.ReservePort(b), Timeout: time.Second}
	b.ReportAllocs()
	for b.Loop() {
		if err := p.Probe(b.Context()); err == nil {
			b.Fatal("Probe of a closed port = nil, want an error")
		}
	}
}

// TestWatcherReadyFollowsRequests: once ready, probe requests each second
// (the kubelet's, its period a little over a second) take the probing over:
// from the second request on, one probe at each request and none from the
// timer in between; when they stop, the timer probes 2 RelaxedIntervals
// after the last, then every RelaxedInterval.
func TestWatcherReadyFollowsRequests(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		s := newScript(func(int, time.Duration) error { return nil })
		w := &probe.Watcher{Prober: s}
		stop := run(t, w)
		defer stop()
		const from = 5*time.Second + 300*time.Millisecond
		const period = time.Second + 10*time.Millisecond
		var reqs []time.Duration
		for i := range 10 {
			at := from + time.Duration(i)*period
			sleepUntil(start, at)
			if !w.WaitReady(t.Context(), time.Second) {
				t.Fatalf("request at %v: WaitReady = false", at)
			}
			synctest.Wait()
			reqs = append(reqs, at)
		}
		last := reqs[len(reqs)-1]
		end := last + 4*probe.RelaxedInterval + probe.RelaxedInterval/2
		sleepUntil(start, end)
		var got []time.Duration
		for _, at := range s.times() {
			if at >= from {
				got = append(got, at)
			}
		}
		want := append(reqs[1:], last+2*probe.RelaxedInterval, last+3*probe.RelaxedInterval, last+4*probe.RelaxedInterval)
		if !equal(got, want) {
			t.Errorf("probes from the first request = %v, want %v", got, want)
		}
	})
}
