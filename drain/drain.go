package drain

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config configures a Drainer.
type Config struct {
	// QuietPeriod is how long no request may arrive after a drain starts
	// before the listeners close. 0 means none.
	QuietPeriod time.Duration
	// Ready reports the upstream's readiness. nil means always ready.
	Ready func() bool
	// WaitForDrainGrace is how long GET /wait-for-drain waits for a drain to
	// start before it answers 200 anyway. 0 means 1 s.
	WaitForDrainGrace time.Duration
	// WaitReady, when set, is called by a probe (and GET /ready) that finds
	// the upstream not ready: it should ask for readiness now and wait until
	// ready, max has passed or ctx is done (probe.Watcher.WaitReady). nil
	// answers at once from Ready.
	WaitReady func(ctx context.Context, max time.Duration) bool
	// OnProbe, when set, is called after each probe that Handler answers,
	// with the status and body bytes written and the time the answer took
	// (a held probe's wait included), on the probe's goroutine: the
	// request log of Knative's enableProbeRequestLog. nil: probes are
	// reported to nobody, and the answer costs no clock read.
	OnProbe func(r *http.Request, status int, bytes int64, d time.Duration)
}

// ProbeHold is the longest a probe waits for a not-ready upstream (with
// Config.WaitReady) before it answers 503. It stays under the kubelet's
// default probe timeout of 1 s, so that a kubelet probe gets an answer
// rather than a timeout; Knative's queue-proxy holds up to 10 s, which
// suits only the activator's probes, whose timeout is longer. 800 ms covers
// a typical cold start of the upstream and leaves 200 ms for the network and
// the kubelet's own overhead. It is also how long the watcher keeps its hold
// pace (probe.HoldInterval) after each held probe: probe.Watcher.WaitReady
// holds that pace for the max it is given, this, so that this constant alone
// sets the window (probe.DemandWindow, the same 800 ms, is only for a bare
// Demand, as neither package may import the other).
const ProbeHold = 800 * time.Millisecond

// Drainer is the drain state. Create it with New.
type Drainer struct {
	cfg       Config
	arrivals  atomic.Uint64
	draining  atomic.Bool
	immediate atomic.Bool // SIGINT: no quiet period
	startOnce sync.Once
	started   chan struct{}
	doneOnce  sync.Once
	done      chan struct{}
}

// New returns a Drainer that is not draining.
func New(cfg Config) *Drainer {
	if cfg.WaitForDrainGrace <= 0 {
		cfg.WaitForDrainGrace = time.Second
	}
	return &Drainer{cfg: cfg, started: make(chan struct{}), done: make(chan struct{})}
}

// Start begins the drain: from now on probes answer 503. With immediate
// (SIGINT, a person pressing Ctrl-C) there is no quiet period. Calling it
// again only makes a pending quiet period immediate.
func (d *Drainer) Start(immediate bool) {
	if immediate {
		d.immediate.Store(true)
	}
	d.startOnce.Do(func() {
		d.draining.Store(true)
		close(d.started)
	})
}

// Started is closed when the drain starts.
func (d *Drainer) Started() <-chan struct{} { return d.started }

// Finish marks the drain complete: GET /wait-for-drain returns.
func (d *Drainer) Finish() { d.doneOnce.Do(func() { close(d.done) }) }

// Ready reports whether probes should answer 200: the upstream is ready and
// no drain has started.
func (d *Drainer) Ready() bool {
	return !d.draining.Load() && (d.cfg.Ready == nil || d.cfg.Ready())
}

// WaitQuiet returns once the drain has started and no request has arrived
// for the quiet period (at once with an immediate drain or no quiet
// period), or when ctx is done. It notices arrivals by polling a counter
// ten times per period (at most every 100 ms), so the hot path pays one
// atomic add and no clock read.
func (d *Drainer) WaitQuiet(ctx context.Context) error {
	select {
	case <-d.started:
	case <-ctx.Done():
		return ctx.Err()
	}
	q := d.cfg.QuietPeriod
	if q <= 0 || d.immediate.Load() {
		return nil
	}
	tick := min(max(q/10, time.Millisecond), 100*time.Millisecond)
	t := time.NewTicker(tick)
	defer t.Stop()
	last := d.arrivals.Load()
	since := time.Now()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		if d.immediate.Load() {
			return nil
		}
		if n := d.arrivals.Load(); n != last {
			last, since = n, time.Now()
			continue
		}
		if time.Since(since) >= q {
			return nil
		}
	}
}

// Header names of the probe protocol (Knative's network and serving
// packages).
const (
	KNetworkProbe = "K-Network-Probe"
	KNetworkHash  = "K-Network-Hash"
	userAgent     = "User-Agent"
)

// IsProbe reports whether r is a probe that queue answers itself:
// a kubelet, activator or autoscaler probe by User-Agent, or any request
// with K-Network-Probe.
func IsProbe(r *http.Request) bool {
	if _, ok := r.Header[KNetworkProbe]; ok {
		return true
	}
	ua := r.Header[userAgent]
	if len(ua) == 0 {
		return false
	}
	return strings.HasPrefix(ua[0], "kube-probe/") ||
		strings.HasPrefix(ua[0], "Knative-Activator-Probe") ||
		strings.HasPrefix(ua[0], "Knative-Autoscaling-Probe")
}

// Arrivals returns how many requests (probes aside) have arrived since the
// Drainer was made.
func (d *Drainer) Arrivals() uint64 { return d.arrivals.Load() }

// Handler answers probes, reporting each to Config.OnProbe when set, and
// passes every other request to next, noting its arrival. A request that
// is not a probe pays the same either way.
func (d *Drainer) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if IsProbe(r) {
			if d.cfg.OnProbe == nil {
				d.serveProbe(w, r)
				return
			}
			start := time.Now()
			status, n := d.serveProbe(w, r)
			d.cfg.OnProbe(r, status, int64(n), time.Since(start))
			return
		}
		d.arrivals.Add(1)
		next.ServeHTTP(w, r)
	})
}

// ServeProbe answers a probe request (docs/contract.md section 4):
//
//	K-Network-Probe: probe + K-Network-Hash: H   200, the hash echoed
//	K-Network-Probe: probe without a hash        400
//	K-Network-Probe: anything but queue/probe    400
//	otherwise                                    200 "queue" when ready, else 503
func (d *Drainer) ServeProbe(w http.ResponseWriter, r *http.Request) { d.serveProbe(w, r) }

// serveProbe is ServeProbe; it returns the status and body bytes it wrote.
func (d *Drainer) serveProbe(w http.ResponseWriter, r *http.Request) (int, int) {
	h := w.Header()
	h["Cache-Control"] = noStore
	switch v := r.Header.Get(KNetworkProbe); v {
	case "", "queue":
	case "probe":
		hash := r.Header.Get(KNetworkHash)
		if hash == "" {
			refuse(w)
			return write(w, http.StatusBadRequest, "missing "+KNetworkHash)
		}
		h.Set(KNetworkHash, hash)
		return write(w, http.StatusOK, hash)
	default:
		refuse(w)
		return write(w, http.StatusBadRequest, "unknown "+KNetworkProbe+" value")
	}
	return d.serveReady(w, r)
}

// ServeReady answers like a probe: 200 "queue" when ready, else 503. When
// the upstream is not ready and no drain has started, it first waits up to
// ProbeHold with Config.WaitReady (if set) for it to become ready.
func (d *Drainer) ServeReady(w http.ResponseWriter, r *http.Request) { d.serveReady(w, r) }

func (d *Drainer) serveReady(w http.ResponseWriter, r *http.Request) (int, int) {
	if !d.Ready() && !d.draining.Load() && d.cfg.WaitReady != nil {
		// The hold is bounded (ProbeHold) and reads nothing of the
		// client: the engine need not look at the client meanwhile.
		unwatch(w)
		d.cfg.WaitReady(r.Context(), ProbeHold)
	}
	if d.Ready() {
		return write(w, http.StatusOK, "queue")
	}
	return write(w, http.StatusServiceUnavailable, http.StatusText(http.StatusServiceUnavailable))
}

// ServeWaitForDrain blocks until the drain has finished and answers 200. If
// no drain starts within the grace (1 s), it answers 200 at once: it is the
// user container's preStop hook, which must not hang when queue was not
// asked to stop.
func (d *Drainer) ServeWaitForDrain(w http.ResponseWriter, r *http.Request) {
	grace := time.NewTimer(d.cfg.WaitForDrainGrace)
	defer grace.Stop()
	select {
	case <-d.started:
		select {
		case <-d.done:
		case <-r.Context().Done():
			return
		}
	case <-grace.C:
	case <-r.Context().Done():
		return
	}
	write(w, http.StatusOK, "drained")
}

var (
	noStore   = []string{"no-store"}
	textPlain = []string{"text/plain; charset=utf-8"}
)

// refuse tells the engine that wrote w that queue refuses the request
// itself (the engines' engine.Refuser, written out here as the package
// imports only the standard library): a glitch of the connection's. Drain's layer
// is the request path's first, so w is the engine's own writer.
func refuse(w http.ResponseWriter) {
	if rf, ok := w.(interface{ Refuse() }); ok {
		rf.Refuse()
	}
}

// unwatch tells the engine that wrote w that the request now waits on
// queue alone, for a bounded time (the engines' engine.Unwatcher, written
// out here likewise): the HTTP/1.1 engine stops looking at its client, and
// the hold costs no wake-ups of the engine's.
func unwatch(w http.ResponseWriter) {
	if u, ok := w.(interface{ Unwatch() }); ok {
		u.Unwatch()
	}
}

// write answers code with body and returns the status and the body bytes
// written, for Config.OnProbe.
func write(w http.ResponseWriter, code int, body string) (int, int) {
	w.Header()["Content-Type"] = textPlain
	w.WriteHeader(code)
	n, _ := w.Write([]byte(body))
	return code, n
}
