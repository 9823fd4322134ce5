package drain_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/queue-dev/queue/drain"
)

// TestIsProbe: a probe is a request from the kubelet (User-Agent
// kube-probe/...), from Knative's activator or autoscaler (their probe
// User-Agents), or any request carrying K-Network-Probe.
func TestIsProbe(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		header http.Header
		want   bool
	}{
		{name: "kubelet", header: http.Header{"User-Agent": {"kube-probe/1.30"}}, want: true},
		{name: "activator", header: http.Header{"User-Agent": {"Knative-Activator-Probe"}}, want: true},
		{name: "autoscaler", header: http.Header{"User-Agent": {"Knative-Autoscaling-Probe"}}, want: true},
		{name: "browser", header: http.Header{"User-Agent": {"Mozilla/5.0"}}},
		{name: "kube-probe without slash", header: http.Header{"User-Agent": {"kube-prober/1.0"}}},
		{name: "kube-probe not a prefix", header: http.Header{"User-Agent": {"not-kube-probe/1.30"}}},
		{name: "no user agent", header: http.Header{}},
		{name: "k-network-probe queue", header: http.Header{"K-Network-Probe": {"queue"}}, want: true},
		{name: "k-network-probe probe", header: http.Header{"K-Network-Probe": {"probe"}}, want: true},
		{name: "k-network-probe other with browser", header: http.Header{"K-Network-Probe": {"other"}, "User-Agent": {"Mozilla/5.0"}}, want: true},
		{name: "k-network-probe empty", header: http.Header{"K-Network-Probe": {""}}, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.Header = tt.header
			if got, want := drain.IsProbe(r), tt.want; got != want {
				t.Errorf("IsProbe(%v) = %v, want %v", tt.header, got, want)
			}
		})
	}
}

// TestHandler: a request that is not a probe goes to the next handler,
// ready or not; a probe is answered by the drain layer itself, 200 when
// ready, 503 when not, 400 for a K-Network-Probe value it does not know.
func TestHandler(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		header   http.Header
		ready    bool
		wantNext bool
		wantCode int
	}{
		{name: "request", header: http.Header{"User-Agent": {"Mozilla/5.0"}}, ready: true, wantNext: true, wantCode: 204},
		{name: "request while unready", header: http.Header{}, wantNext: true, wantCode: 204},
		{name: "kubelet ready", header: http.Header{"User-Agent": {"kube-probe/1.30"}}, ready: true, wantCode: 200},
		{name: "kubelet unready", header: http.Header{"User-Agent": {"kube-probe/1.30"}}, wantCode: 503},
		{name: "activator", header: http.Header{"User-Agent": {"Knative-Activator-Probe"}}, ready: true, wantCode: 200},
		{name: "k-network-probe queue", header: http.Header{"K-Network-Probe": {"queue"}}, ready: true, wantCode: 200},
		{name: "k-network-probe other", header: http.Header{"K-Network-Probe": {"other"}}, ready: true, wantCode: 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := drain.New(drain.Config{Ready: func() bool { return tt.ready }})
			reached := false
			h := d.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				reached = true
				w.WriteHeader(http.StatusNoContent)
			}))
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.Header = tt.header
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			if got, want := reached, tt.wantNext; got != want {
				t.Errorf("reached next = %v, want %v", got, want)
			}
			if got, want := rec.Code, tt.wantCode; got != want {
				t.Errorf("status = %d, want %d", got, want)
			}
		})
	}
}

// TestOnProbe: with Config.OnProbe, each probe Handler answers is reported
// with the status and body bytes written, and its duration; a request that
// is not a probe is not.
func TestOnProbe(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		header     http.Header
		ready      bool
		wantStatus int // 0: not reported
		wantBytes  int64
	}{
		{name: "kubelet, ready", header: http.Header{"User-Agent": {"kube-probe/1.31"}, "K-Network-Probe": {"queue"}}, ready: true, wantStatus: 200, wantBytes: 5},
		{name: "activator, unready", header: http.Header{"User-Agent": {"Knative-Activator-Probe"}, "K-Network-Probe": {"queue"}}, wantStatus: 503, wantBytes: 19},
		{name: "network probe", header: http.Header{"K-Network-Probe": {"probe"}, "K-Network-Hash": {"abc"}}, wantStatus: 200, wantBytes: 3},
		{name: "bad network probe", header: http.Header{"K-Network-Probe": {"nonsense"}}, wantStatus: 400, wantBytes: int64(len("unknown K-Network-Probe value"))},
		{name: "a request", header: http.Header{"User-Agent": {"curl/8"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got struct {
				n      int
				status int
				bytes  int64
				d      time.Duration
			}
			d := drain.New(drain.Config{Ready: func() bool { return tt.ready }, OnProbe: func(_ *http.Request, status int, bytes int64, d time.Duration) {
				got.n++
				got.status, got.bytes, got.d = status, bytes, d
			}})
			h := d.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("upstream")) }))
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.Header = tt.header
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			if tt.wantStatus == 0 {
				if got.n != 0 {
					t.Errorf("reported %d times, want none", got.n)
				}
				return
			}
			if got.n != 1 || got.status != tt.wantStatus || got.bytes != tt.wantBytes || got.d <= 0 {
				t.Errorf("reported %d times, status %d, %d bytes, %v; want once, %d, %d bytes, a duration", got.n, got.status, got.bytes, got.d, tt.wantStatus, tt.wantBytes)
			}
			if got.status != rec.Code || got.bytes != int64(rec.Body.Len()) {
				t.Errorf("reported %d and %d bytes, wrote %d and %d bytes", got.status, got.bytes, rec.Code, rec.Body.Len())
			}
		})
	}
}

// probeCase is a probe (or readiness) request against a Drainer in a
// given state.
type probeCase struct {
	name     string
	ready    func() bool // nil: Config.Ready unset
	draining bool
	header   http.Header
	wantCode int
	wantBody string // checked when set
	wantHash string
}

var (
	yes = func() bool { return true }
	no  = func() bool { return false }
)

func (tt probeCase) run(t *testing.T, serve func(*drain.Drainer) http.HandlerFunc) {
	t.Helper()
	d := drain.New(drain.Config{Ready: tt.ready})
	if tt.draining {
		d.Start(false)
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header = tt.header
	rec := httptest.NewRecorder()
	serve(d)(rec, r)
	if got, want := rec.Code, tt.wantCode; got != want {
		t.Errorf("status = %d, want %d", got, want)
	}
	if tt.wantBody != "" {
		if got, want := rec.Body.String(), tt.wantBody; got != want {
			t.Errorf("body = %q, want %q", got, want)
		}
	}
	if got, want := rec.Header().Get(drain.KNetworkHash), tt.wantHash; got != want {
		t.Errorf("%s = %q, want %q", drain.KNetworkHash, got, want)
	}
}

// TestServeProbe: a probe is answered 200 "queue" when the upstream is
// ready (or no readiness is configured) and the drain has not started, else
// 503; a network probe ("probe") is answered 200 with its K-Network-Hash
// echoed whatever the readiness, and 400 without a hash or with a value it
// does not know.
func TestServeProbe(t *testing.T) {
	t.Parallel()
	kube := http.Header{"User-Agent": {"kube-probe/1.30"}}
	tests := []probeCase{
		{name: "not ready", ready: no, header: kube, wantCode: 503},
		{name: "ready", ready: yes, header: kube, wantCode: 200, wantBody: "queue"},
		{name: "ready by default", header: kube, wantCode: 200, wantBody: "queue"},
		{name: "draining and ready", ready: yes, draining: true, header: kube, wantCode: 503},
		{name: "draining and not ready", ready: no, draining: true, header: kube, wantCode: 503},
		{name: "network probe with hash", ready: yes, header: http.Header{"K-Network-Probe": {"probe"}, "K-Network-Hash": {"abc"}}, wantCode: 200, wantHash: "abc"},
		{name: "network probe with hash while unready", ready: no, header: http.Header{"K-Network-Probe": {"probe"}, "K-Network-Hash": {"abc"}}, wantCode: 200, wantHash: "abc"},
		{name: "network probe without hash", ready: yes, header: http.Header{"K-Network-Probe": {"probe"}}, wantCode: 400},
		{name: "network probe other value", ready: yes, header: http.Header{"K-Network-Probe": {"other"}}, wantCode: 400},
		{name: "network probe queue ready", ready: yes, header: http.Header{"K-Network-Probe": {"queue"}}, wantCode: 200, wantBody: "queue"},
		{name: "network probe queue not ready", ready: no, header: http.Header{"K-Network-Probe": {"queue"}}, wantCode: 503},
		{name: "network probe queue draining", ready: yes, draining: true, header: http.Header{"K-Network-Probe": {"queue"}}, wantCode: 503},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.run(t, func(d *drain.Drainer) http.HandlerFunc { return d.ServeProbe })
		})
	}
}

// TestServeReady: the readiness endpoint answers 200 "queue" when the
// upstream is ready (or no readiness is configured) and the drain has not
// started, else 503.
func TestServeReady(t *testing.T) {
	t.Parallel()
	tests := []probeCase{
		{name: "not ready", ready: no, wantCode: 503},
		{name: "ready", ready: yes, wantCode: 200, wantBody: "queue"},
		{name: "ready by default", wantCode: 200, wantBody: "queue"},
		{name: "draining and ready", ready: yes, draining: true, wantCode: 503},
		{name: "draining and not ready", ready: no, draining: true, wantCode: 503},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.run(t, func(d *drain.Drainer) http.HandlerFunc { return d.ServeReady })
		})
	}
}

// TestStart: a Drainer is ready until Start, which closes Started; Start
// and Finish may each be called twice.
func TestStart(t *testing.T) {
	t.Parallel()
	d := drain.New(drain.Config{})
	if !d.Ready() {
		t.Error("Ready() = false before Start")
	}
	select {
	case <-d.Started():
		t.Error("Started() closed before Start")
	default:
	}
	d.Start(false)
	d.Start(true) // a second call must not panic
	if d.Ready() {
		t.Error("Ready() = true after Start")
	}
	select {
	case <-d.Started():
	default:
		t.Error("Started() not closed after Start")
	}
	d.Finish()
	d.Finish() // a second call must not panic
}

// TestWaitQuiet, on testing/synctest's clock: WaitQuiet returns once the
// drain has started and the quiet period has passed since the start or the
// last request that is not a probe (requests before the start do not
// count), at once on Start(true), at the start with no quiet period, and
// with the context's error when the context ends first; it has not
// returned before any event of a case's timeline, and returns within the
// bounds the case gives.
func TestWaitQuiet(t *testing.T) {
	t.Parallel()
	const never = -1
	tests := []struct {
		name      string
		quiet     time.Duration
		startAt   time.Duration // never: no Start(false)
		sigintAt  time.Duration // never: no Start(true)
		requests  []time.Duration
		probes    []time.Duration
		cancelAt  time.Duration // never: ctx not canceled
		min, max  time.Duration // bounds of when WaitQuiet returns
		wantError error
	}{
		{name: "no requests", quiet: 30 * time.Second, startAt: 0, sigintAt: never, cancelAt: never, min: 30 * time.Second, max: 33 * time.Second},
		{name: "requests push it back", quiet: 30 * time.Second, startAt: 0, sigintAt: never, cancelAt: never, requests: []time.Duration{10 * time.Second, 25 * time.Second}, min: 55 * time.Second, max: 58 * time.Second},
		{name: "probes do not count", quiet: 30 * time.Second, startAt: 0, sigintAt: never, cancelAt: never, probes: []time.Duration{10 * time.Second, 25 * time.Second}, min: 30 * time.Second, max: 33 * time.Second},
		{name: "requests before start do not count", quiet: 30 * time.Second, startAt: 10 * time.Second, sigintAt: never, cancelAt: never, requests: []time.Duration{5 * time.Second}, min: 40 * time.Second, max: 43 * time.Second},
		{name: "immediate", quiet: 30 * time.Second, startAt: never, sigintAt: 0, cancelAt: never, min: 0, max: 0},
		{name: "immediate during the wait", quiet: 30 * time.Second, startAt: 0, sigintAt: 10 * time.Second, cancelAt: never, requests: []time.Duration{5 * time.Second}, min: 10 * time.Second, max: 10*time.Second + 100*time.Millisecond},
		{name: "no quiet period", quiet: 0, startAt: 0, sigintAt: never, cancelAt: never, min: 0, max: 0},
		{name: "canceled during the wait", quiet: 30 * time.Second, startAt: 0, sigintAt: never, cancelAt: 5 * time.Second, min: 5 * time.Second, max: 5 * time.Second, wantError: context.Canceled},
		{name: "canceled before start", quiet: 30 * time.Second, startAt: never, sigintAt: never, cancelAt: 5 * time.Second, min: 5 * time.Second, max: 5 * time.Second, wantError: context.Canceled},
		{name: "blocks until start", quiet: 0, startAt: 20 * time.Second, sigintAt: never, cancelAt: never, min: 20 * time.Second, max: 20 * time.Second},
		{name: "quiet counted from start", quiet: 30 * time.Second, startAt: 20 * time.Second, sigintAt: never, cancelAt: never, min: 50 * time.Second, max: 53 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				d := drain.New(drain.Config{QuietPeriod: tt.quiet})
				h := d.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()

				type event struct {
					at time.Duration
					do func()
				}
				var events []event
				if tt.startAt != never {
					events = append(events, event{tt.startAt, func() { d.Start(false) }})
				}
				if tt.sigintAt != never {
					events = append(events, event{tt.sigintAt, func() { d.Start(true) }})
				}
				if tt.cancelAt != never {
					events = append(events, event{tt.cancelAt, cancel})
				}
				for _, at := range tt.requests {
					events = append(events, event{at, func() {
						h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
					}})
				}
				for _, at := range tt.probes {
					events = append(events, event{at, func() {
						r := httptest.NewRequest(http.MethodGet, "/", nil)
						r.Header.Set("User-Agent", "kube-probe/1.30")
						h.ServeHTTP(httptest.NewRecorder(), r)
					}})
				}
				slices.SortStableFunc(events, func(a, b event) int { return int(a.at - b.at) })

				start := time.Now()
				var err error
				var elapsed time.Duration
				done := make(chan struct{})
				go func() {
					err = d.WaitQuiet(ctx)
					elapsed = time.Since(start)
					close(done)
				}()
				for _, e := range events {
					time.Sleep(time.Until(start.Add(e.at)))
					synctest.Wait()
					select {
					case <-done:
						t.Fatalf("WaitQuiet returned at %v, before the event at %v", elapsed, e.at)
					default:
					}
					e.do()
				}
				<-done
				if !errors.Is(err, tt.wantError) || (err == nil) != (tt.wantError == nil) {
					t.Errorf("WaitQuiet() = %v, want %v", err, tt.wantError)
				}
				if elapsed < tt.min || elapsed > tt.max {
					t.Errorf("WaitQuiet returned after %v, want between %v and %v", elapsed, tt.min, tt.max)
				}
			})
		})
	}
}

// TestServeWaitForDrain, on testing/synctest's clock: /wait-for-drain
// answers 200 after its grace (a second by default) when no drain starts
// within it, or once a started drain finishes; a request whose context
// ends first gets nothing written. It returns exactly then, not before.
func TestServeWaitForDrain(t *testing.T) {
	t.Parallel()
	const never = -1
	tests := []struct {
		name     string
		grace    time.Duration
		startAt  time.Duration
		finishAt time.Duration
		cancelAt time.Duration
		wantAt   time.Duration // when it returns
		want200  bool          // else nothing written
	}{
		{name: "no drain", startAt: never, finishAt: never, cancelAt: never, wantAt: time.Second, want200: true},
		{name: "no drain, own grace", grace: 3 * time.Second, startAt: never, finishAt: never, cancelAt: never, wantAt: 3 * time.Second, want200: true},
		{name: "drain finishes", startAt: 0, finishAt: 10 * time.Second, cancelAt: never, wantAt: 10 * time.Second, want200: true},
		{name: "drain starts within the grace", startAt: 500 * time.Millisecond, finishAt: 5 * time.Second, cancelAt: never, wantAt: 5 * time.Second, want200: true},
		{name: "already finished", startAt: 0, finishAt: 0, cancelAt: never, wantAt: 0, want200: true},
		{name: "canceled while draining", startAt: 0, finishAt: never, cancelAt: 2 * time.Second, wantAt: 2 * time.Second},
		{name: "canceled within the grace", startAt: never, finishAt: never, cancelAt: 500 * time.Millisecond, wantAt: 500 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				d := drain.New(drain.Config{WaitForDrainGrace: tt.grace})
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				start := time.Now()
				at := func(when time.Duration, f func()) {
					if when != never {
						time.AfterFunc(when, f)
					}
				}
				if tt.startAt == 0 {
					d.Start(false)
				} else {
					at(tt.startAt, func() { d.Start(false) })
				}
				if tt.finishAt == 0 {
					d.Finish()
				} else {
					at(tt.finishAt, d.Finish)
				}
				at(tt.cancelAt, cancel)

				rec := httptest.NewRecorder()
				r := httptest.NewRequest(http.MethodGet, "/wait-for-drain", nil).WithContext(ctx)
				var elapsed time.Duration
				done := make(chan struct{})
				go func() {
					d.ServeWaitForDrain(rec, r)
					elapsed = time.Since(start)
					close(done)
				}()

				if tt.wantAt > 0 {
					time.Sleep(tt.wantAt - time.Nanosecond)
					synctest.Wait()
					select {
					case <-done:
						t.Fatalf("returned after %v, want %v", elapsed, tt.wantAt)
					default:
					}
				}
				<-done
				if got, want := elapsed, tt.wantAt; got != want {
					t.Errorf("returned after %v, want %v", got, want)
				}
				if tt.want200 {
					if got, want := rec.Code, http.StatusOK; got != want {
						t.Errorf("status = %d, want %d", got, want)
					}
					if rec.Body.Len() == 0 {
						t.Error("empty body, want one")
					}
				} else {
					if got := rec.Body.String(); got != "" {
						t.Errorf("body = %q, want nothing written", got)
					}
					if got := rec.Header().Get("Content-Type"); got != "" {
						t.Errorf("Content-Type = %q, want nothing written", got)
					}
				}
			})
		})
	}
}

// TestServeWaitForDrainBlocksUntilFinish, on testing/synctest's clock: once
// a drain has started, /wait-for-drain waits for Finish however long it
// takes, and answers 200 at once then.
func TestServeWaitForDrainBlocksUntilFinish(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		d := drain.New(drain.Config{})
		d.Start(false)
		rec := httptest.NewRecorder()
		done := make(chan struct{})
		go func() {
			d.ServeWaitForDrain(rec, httptest.NewRequest(http.MethodGet, "/wait-for-drain", nil))
			close(done)
		}()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("returned after 10s without Finish")
		default:
		}
		d.Finish()
		synctest.Wait()
		select {
		case <-done:
		default:
			t.Fatal("still blocking after Finish")
		}
		if got, want := rec.Code, http.StatusOK; got != want {
			t.Errorf("status = %d, want %d", got, want)
		}
	})
}

// unwatchRecorder is a recorder that offers Unwatch, as queue's HTTP/1.1
// engine's writer does, and counts the calls.
type unwatchRecorder struct {
	*httptest.ResponseRecorder
	unwatched int
}

func (w *unwatchRecorder) Unwatch() { w.unwatched++ }

// TestProbeHold: a probe that finds the upstream not ready waits with
// Config.WaitReady up to ProbeHold, and answers 200 as soon as the upstream
// becomes ready within it; it gives up the engine's watch of its client
// (Unwatch) before each hold, since the hold is bounded.
func TestProbeHold(t *testing.T) {
	t.Parallel()
	kube := http.Header{"User-Agent": {"kube-probe/1.30"}}
	const never = -1
	tests := []struct {
		name string
		// readyAfter is when the upstream becomes ready; 0 means already,
		// never means never.
		readyAfter time.Duration
		noWait     bool // Config.WaitReady unset
		draining   bool
		header     http.Header
		path       string // "/ready" uses ServeReady, else Handler
		// cancelAfter cancels the request's context; 0 means never.
		cancelAfter time.Duration
		wantCode    int
		wantAt      time.Duration
		wantWaits   int
	}{
		{name: "ready within the hold", readyAfter: 300 * time.Millisecond, header: kube, wantCode: 200, wantAt: 300 * time.Millisecond, wantWaits: 1},
		{name: "ready just before the bound", readyAfter: drain.ProbeHold - time.Millisecond, header: kube, wantCode: 200, wantAt: drain.ProbeHold - time.Millisecond, wantWaits: 1},
		{name: "activator probe", readyAfter: 300 * time.Millisecond, header: http.Header{"K-Network-Probe": {"queue"}}, wantCode: 200, wantAt: 300 * time.Millisecond, wantWaits: 1},
		{name: "GET /ready", readyAfter: 300 * time.Millisecond, path: "/ready", wantCode: 200, wantAt: 300 * time.Millisecond, wantWaits: 1},
		{name: "never ready", readyAfter: never, header: kube, wantCode: 503, wantAt: drain.ProbeHold, wantWaits: 1},
		{name: "ready after the bound", readyAfter: drain.ProbeHold + time.Second, header: kube, wantCode: 503, wantAt: drain.ProbeHold, wantWaits: 1},
		{name: "prober gone", readyAfter: never, header: kube, cancelAfter: 100 * time.Millisecond, wantCode: 503, wantAt: 100 * time.Millisecond, wantWaits: 1},
		{name: "already ready", readyAfter: 0, header: kube, wantCode: 200, wantWaits: 0},
		{name: "draining", readyAfter: never, draining: true, header: kube, wantCode: 503, wantWaits: 0},
		{name: "no WaitReady", readyAfter: 300 * time.Millisecond, noWait: true, header: kube, wantCode: 503, wantWaits: 0},
		{name: "network probe with hash", readyAfter: never, header: http.Header{"K-Network-Probe": {"probe"}, "K-Network-Hash": {"abc"}}, wantCode: 200, wantWaits: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				var ready atomic.Bool
				became := make(chan struct{})
				switch {
				case tt.readyAfter == 0:
					ready.Store(true)
					close(became)
				case tt.readyAfter > 0:
					time.AfterFunc(tt.readyAfter, func() {
						ready.Store(true)
						close(became)
					})
				}
				var waits atomic.Int32
				cfg := drain.Config{Ready: ready.Load}
				if !tt.noWait {
					cfg.WaitReady = func(ctx context.Context, max time.Duration) bool {
						waits.Add(1)
						if got, want := max, drain.ProbeHold; got != want {
							t.Errorf("WaitReady max = %v, want %v", got, want)
						}
						tm := time.NewTimer(max)
						defer tm.Stop()
						select {
						case <-became:
						case <-tm.C:
						case <-ctx.Done():
						}
						return ready.Load()
					}
				}
				d := drain.New(cfg)
				if tt.draining {
					d.Start(false)
				}
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				if tt.cancelAfter > 0 {
					time.AfterFunc(tt.cancelAfter, cancel)
				}
				r := httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil)
				if tt.header != nil {
					r.Header = tt.header
				}
				w := &unwatchRecorder{ResponseRecorder: httptest.NewRecorder()}
				if tt.path == "/ready" {
					d.ServeReady(w, r)
				} else {
					d.Handler(http.NotFoundHandler()).ServeHTTP(w, r)
				}
				rec := w.ResponseRecorder
				if got, want := w.unwatched, tt.wantWaits; got != want {
					t.Errorf("Unwatch called %d times, want %d (once for each hold)", got, want)
				}
				if got, want := rec.Code, tt.wantCode; got != want {
					t.Errorf("status = %d, want %d", got, want)
				}
				if got, want := time.Since(start), tt.wantAt; got != want {
					t.Errorf("answered after %v, want %v", got, want)
				}
				if got, want := int(waits.Load()), tt.wantWaits; got != want {
					t.Errorf("WaitReady called %d times, want %d", got, want)
				}
			})
		})
	}
}
