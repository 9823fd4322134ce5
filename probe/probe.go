package probe

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queue-dev/queue/internal/clock"
)

// Prober checks the upstream once. It must honour ctx.
type Prober interface {
	Probe(ctx context.Context) error
}

// DefaultTimeout bounds one probe when a prober's Timeout is zero.
const DefaultTimeout = time.Second

func timeout(d time.Duration) time.Duration {
	if d <= 0 {
		return DefaultTimeout
	}
	return d
}

// TCP is ready when a connection to Addr is accepted. The connection is
// closed at once.
type TCP struct {
	Addr    string
	Timeout time.Duration // 0 means DefaultTimeout
}

// Probe connects and closes.
func (p TCP) Probe(ctx context.Context) error {
	if ok, err := connectNow(p.Addr); ok {
		return err
	}
	// No TCP keep-alive: the connection is closed at once, and setting it
	// up is four system calls per probe.
	d := net.Dialer{Timeout: timeout(p.Timeout), KeepAlive: -1}
	c, err := d.DialContext(ctx, "tcp", p.Addr)
	if err != nil {
		return err
	}
	return c.Close()
}

// None is always ready.
type None struct{}

// Probe returns nil.
func (None) Probe(context.Context) error { return nil }

// All is ready when every prober is.
type All []Prober

// Probe runs each prober in turn and returns the first error.
func (a All) Probe(ctx context.Context) error {
	for _, p := range a {
		if err := p.Probe(ctx); err != nil {
			return err
		}
	}
	return nil
}

// UserAgent is what HTTP probes send, as the kubelet does (kube-probe/...).
const UserAgent = "kube-probe/queue"

// HTTP is ready when a GET of URL answers 200-399.
type HTTP struct {
	// URL is the full URL to get, such as http://127.0.0.1:8080/healthz.
	URL string
	// Host, when set, is sent as the Host header.
	Host string
	// Header is added to the request; User-Agent defaults to UserAgent.
	Header http.Header
	// Timeout bounds one probe; 0 means DefaultTimeout. With DetectHTTP2,
	// it bounds each of a probe's two attempts.
	Timeout time.Duration
	// Client sends the request; nil means one of the package's own, with no
	// keep-alive, so that each probe proves a fresh connect works.
	Client *http.Client
	// DetectHTTP2 has the probe find out which protocol the upstream
	// speaks, as Knative's queue-proxy does with
	// ENABLE_HTTP2_AUTO_DETECTION: HTTP/2 with prior knowledge (h2c)
	// first, then HTTP/1.1, so that an upstream that speaks only h2c can
	// be probed with a GET. false (the zero value) speaks HTTP/1.1 only.
	// It applies to an http:// URL without a Client; see Probe.
	DetectHTTP2 bool

	// speaks is what the upstream answered ready over: 0 while unknown,
	// else speaksH1 or speaksH2C. Only with DetectHTTP2.
	speaks atomic.Uint32
}

// What an HTTP probe with DetectHTTP2 learned the upstream speaks.
const (
	speaksH1 = 1 + iota
	speaksH2C
)

var probeClient = &http.Client{
	Transport: &http.Transport{DisableKeepAlives: true, DisableCompression: true, Proxy: nil},
	// A probe reports what the upstream answered; it does not follow.
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// h2cProbeClient is probeClient over HTTP/2 with prior knowledge. With
// keep-alives off, each connection carries one request and is closed
// after it, as probeClient's are.
var h2cProbeClient = &http.Client{
	Transport: func() *http.Transport {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		return &http.Transport{Protocols: &p, DisableKeepAlives: true, DisableCompression: true, Proxy: nil}
	}(),
	CheckRedirect: probeClient.CheckRedirect,
}

// Probe sends the GET. With DetectHTTP2 (an http:// URL, no Client), a
// probe speaks what the upstream last answered ready over; until it has
// (and again after that protocol fails with the connection made, the mark
// of an upstream that no longer speaks it), it tries h2c and then, unless
// h2c answered ready, HTTP/1.1, as Knative's prober does, and remembers
// the one that answered ready. Knative's prober detects again on every
// probe, which costs an HTTP/1.1 upstream two connections a probe for
// ever. A refused h2c connect skips the HTTP/1.1 attempt: it would be
// refused too, and while the upstream starts the probe then costs one
// connect, as without DetectHTTP2. It is safe for concurrent use.
func (p *HTTP) Probe(ctx context.Context) error {
	if !p.DetectHTTP2 || p.Client != nil || !strings.HasPrefix(p.URL, "http://") {
		c := p.Client
		if c == nil {
			c = probeClient
		}
		_, err := p.get(ctx, c)
		return err
	}
	switch p.speaks.Load() {
	case speaksH2C:
		return p.known(ctx, h2cProbeClient)
	case speaksH1:
		return p.known(ctx, probeClient)
	}
	answered, err := p.get(ctx, h2cProbeClient)
	if err == nil {
		p.speaks.Store(speaksH2C)
		return nil
	}
	if !answered && dialFailed(err) {
		return err
	}
	// An h2c answer that is not ready may be an upstream that speaks h2c
	// badly: HTTP/1.1 decides, as in Knative.
	if _, err1 := p.get(ctx, probeClient); err1 == nil {
		p.speaks.Store(speaksH1)
		return nil
	} else if !answered {
		err = err1
	}
	return err
}

// known probes over the protocol the upstream last answered ready over,
// and forgets it when it fails after the connect without an answer: the
// upstream no longer speaks it (it was replaced), so the next probe
// detects again. A refused connect or a timeout says nothing of the
// protocol, and an answer that is not ready is still that protocol.
func (p *HTTP) known(ctx context.Context, c *http.Client) error {
	answered, err := p.get(ctx, c)
	if err != nil && !answered && !dialFailed(err) && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
		p.speaks.Store(0)
	}
	return err
}

// dialFailed reports whether err is a failed connect: nothing listens, so
// no protocol was spoken.
func dialFailed(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// get sends the GET with c; answered reports whether a response came,
// whatever its status.
func (p *HTTP) get(ctx context.Context, c *http.Client) (answered bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout(p.Timeout))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL, nil)
	if err != nil {
		return false, err
	}
	for k, vv := range p.Header {
		req.Header[k] = vv
	}
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", UserAgent)
	}
	if p.Host != "" {
		req.Host = p.Host
	}
	res, err := c.Do(req)
	if err != nil {
		return false, err
	}
	io.Copy(io.Discard, io.LimitReader(res.Body, 4<<10))
	res.Body.Close()
	if res.StatusCode < 200 || res.StatusCode >= 400 {
		return true, fmt.Errorf("%s answered %d over %s", p.URL, res.StatusCode, res.Proto)
	}
	return true, nil
}

// GRPC is ready when grpc.health.v1.Health/Check for Service answers
// SERVING, over HTTP/2 with prior knowledge.
type GRPC struct {
	Addr    string
	Service string
	Timeout time.Duration // 0 means DefaultTimeout
}

var grpcTransport = func() *http.Transport {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Transport{Protocols: &p, DisableCompression: true}
}()

// ErrNotServing is the error of a gRPC health check that answered, but not
// SERVING.
var ErrNotServing = errors.New("grpc health: not serving")

// Probe calls Check. The messages are encoded by hand: HealthCheckRequest
// is field 1 (service, a string), HealthCheckResponse field 1 (status, an
// enum where SERVING is 1); this avoids a protobuf dependency for four
// bytes.
func (p *GRPC) Probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, timeout(p.Timeout))
	defer cancel()
	msg := []byte{}
	if p.Service != "" {
		msg = append(msg, 0x0a)
		msg = binary.AppendUvarint(msg, uint64(len(p.Service)))
		msg = append(msg, p.Service...)
	}
	body := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(body[1:], uint32(len(msg)))
	body = append(body, msg...)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+p.Addr+"/grpc.health.v1.Health/Check", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	req.Header.Set("User-Agent", UserAgent)
	res, err := grpcTransport.RoundTrip(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	reply, err := io.ReadAll(io.LimitReader(res.Body, 1<<10))
	if err != nil {
		return err
	}
	status := res.Trailer.Get("Grpc-Status")
	if status == "" {
		status = res.Header.Get("Grpc-Status") // trailers-only response
	}
	if res.StatusCode != 200 || status != "0" {
		return fmt.Errorf("grpc health: http %d, grpc-status %q", res.StatusCode, status)
	}
	// A length-prefixed HealthCheckResponse; field 1 varint 1 is SERVING.
	if len(reply) < 5 {
		return ErrNotServing
	}
	m := reply[5:]
	for len(m) > 0 {
		key, n := binary.Uvarint(m)
		if n <= 0 {
			return ErrNotServing
		}
		m = m[n:]
		if key&7 != 0 { // only varints are expected; anything else ends the scan
			break
		}
		v, n := binary.Uvarint(m)
		if n <= 0 {
			return ErrNotServing
		}
		m = m[n:]
		if key>>3 == 1 {
			if v == 1 {
				return nil
			}
			return ErrNotServing
		}
	}
	return ErrNotServing
}

// Watcher keeps probing and holds the latest state.
type Watcher struct {
	// Prober checks the upstream. Required.
	Prober Prober
	// Period between probes. 0 means aggressive: while not ready, every
	// FastInterval for StartWindow after Run starts; on each Demand at once
	// (at most once per FastInterval) and then every HoldInterval while the
	// demand holds (see Demand); else backing off up to MaxBackoff. Once
	// ready, every RelaxedInterval, and every FastInterval again while
	// failures are being confirmed.
	Period time.Duration
	// FailureThreshold is the number of consecutive failures that make a
	// ready upstream unready. 0 means 3.
	FailureThreshold int
	// SuccessThreshold is the number of consecutive successes that make an
	// unready upstream ready. 0 means 1.
	SuccessThreshold int
	// Logger gets one line per change of state. nil discards.
	Logger *slog.Logger
	// OnReady is called, on Run's goroutine, each time the upstream
	// becomes ready: the probe that made it so succeeded (for a TCP or
	// HTTP probe, a connect did). It must not block. nil: nothing is
	// called.
	OnReady func()

	ready atomic.Bool
	mu    sync.Mutex
	ch    chan struct{} // closed and replaced on each change
	wake  chan struct{} // size 1: Demand's nudge to Run; made on first use
	// holdUntil is the latest end of a demand's hold: Run probes every
	// HoldInterval before it while not ready. Guarded by mu.
	holdUntil time.Time
	alarms    []*clock.Alarm // kept for held probe requests; guarded by mu
	stopped   bool           // Run has returned; guarded by mu
}

// FastInterval is the aggressive pace: ready is seen within this (plus one
// connect) of the upstream accepting. A refused loopback connect is not
// free, even by the raw fast path (BenchmarkRefusedProbe measures it and
// the dialer's), and it costs more when a timer spaces the probes, with
// the thread wake-ups: at this pace for good, the probes would be a
// steady share of an idle sidecar's CPU. The pace is therefore kept for short windows only:
// StartWindow after Run starts, and while a failure of a ready upstream is
// confirmed. It is also the least time between two probes that demands
// bring forward.
const FastInterval = 2 * time.Millisecond

// HoldInterval is the pace while a demand holds (see Demand) and the
// upstream is not ready. Knative's queue-proxy polls a held probe every
// 50 ms; queue polls every 100 ms, because this pace costs CPU for ever when
// the upstream stays down and the kubelet probes once a second
// (DemandWindow/HoldInterval probes a second), each held poll with its
// thread wake-ups: halving the pace halves that CPU (bench/sidecar.sh
// measures it). The wait it adds to a
// cold start is at most this, and none when probe requests come more
// often, since each demand probes at once.
const HoldInterval = 100 * time.Millisecond

// RelaxedInterval is the aggressive mode's pace once ready. Probe requests
// (WaitReady, Demand) take it over while they come: one probes when the
// last probe is half this old or more, and the timer then waits twice
// this, so that requests each second drive the probing in the wake-ups
// they cause anyway.
const RelaxedInterval = time.Second

// StartWindow is how long the aggressive mode probes every FastInterval
// while not ready: from Run's start, and from the first failure seen while
// ready. A starting upstream is usually seen within it at the fast pace.
const StartWindow = time.Second

// DemandWindow is how long a Demand holds the aggressive mode at
// HoldInterval: the time a probe request is held waiting for readiness,
// 800 ms as the drain package's ProbeHold. WaitReady holds for its own max
// instead, which is what the drain package passes, so the held probe's
// bound alone decides the window on that path (neither package may import
// the other). It stops earlier once ready, as the ready pace applies.
const DemandWindow = 800 * time.Millisecond

// MaxBackoff is the ceiling of the back-off once StartWindow and any
// demand's hold have passed without the upstream becoming ready: the wait
// doubles after each probe, from FastInterval after StartWindow and from
// HoldInterval after a hold, up to this. An upstream that is down and that
// nobody asks about then costs one probe a second instead of 500, and a
// ready upstream is still seen within a second (plus one probe) without
// any demand; a probe request (Demand) brings a probe at once and the hold
// pace.
const MaxBackoff = time.Second

// Ready reports the last state.
func (w *Watcher) Ready() bool { return w.ready.Load() }

// Changed returns a channel that is closed at the next change of state.
func (w *Watcher) Changed() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch == nil {
		w.ch = make(chan struct{})
	}
	return w.ch
}

func (w *Watcher) set(ready bool, err error) {
	w.ready.Store(ready)
	w.mu.Lock()
	if w.ch != nil {
		close(w.ch)
	}
	w.ch = make(chan struct{})
	w.mu.Unlock()
	if ready && w.OnReady != nil {
		w.OnReady()
	}
	if w.Logger == nil {
		return
	}
	if ready {
		w.Logger.LogAttrs(context.Background(), slog.LevelInfo, "upstream ready")
	} else {
		w.Logger.LogAttrs(context.Background(), slog.LevelWarn, "upstream not ready", slog.Any("err", err))
	}
}

// Demand asks for readiness now: it makes an aggressive-mode watcher that
// is not ready probe at once, waking Run from a back-off, and then every
// HoldInterval for DemandWindow. Each call probes again, so that frequent
// probe requests see the upstream within one probe of it accepting, but
// never sooner than FastInterval after the last probe, and not at all when
// a probe is due within FastInterval anyway. It never blocks and does not
// allocate; calls while a nudge is pending are merged. A watcher with a
// Period keeps its pace: the period is the user's choice.
func (w *Watcher) Demand() { w.demand(time.Now().Add(DemandWindow)) }

// demand extends the hold to until and nudges Run.
func (w *Watcher) demand(until time.Time) {
	w.mu.Lock()
	if w.wake == nil {
		w.wake = make(chan struct{}, 1)
	}
	if until.After(w.holdUntil) {
		w.holdUntil = until
	}
	wake := w.wake
	w.mu.Unlock()
	select {
	case wake <- struct{}{}:
	default:
	}
}

// wakeup returns the channel that Demand sends on, making it on first use
// (a Watcher is built as a struct literal).
func (w *Watcher) wakeup() chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.wake == nil {
		w.wake = make(chan struct{}, 1)
	}
	return w.wake
}

// hold returns the end of the latest demand's hold.
func (w *Watcher) hold() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.holdUntil
}

// nudge tells Run that a probe request came while ready (see Run).
func (w *Watcher) nudge() {
	select {
	case w.wakeup() <- struct{}{}:
	default:
	}
}

// WaitReady demands readiness like Demand, holding the HoldInterval pace
// for max rather than DemandWindow, and waits until the watcher is ready,
// max has passed or ctx is done, and returns Ready(). It returns at once
// when already ready.
func (w *Watcher) WaitReady(ctx context.Context, max time.Duration) bool {
	if w.Ready() {
		w.nudge()
		return true
	}
	// Changed before Ready: set stores the state before it closes the
	// channel, so a change between the two is not missed.
	ch := w.Changed()
	w.demand(time.Now().Add(max))
	if w.Ready() {
		return true
	}
	t := w.alarm()
	defer w.release(t)
	t.Reset(max)
	for {
		select {
		case <-ch:
			if w.Ready() {
				return true
			}
			ch = w.Changed()
		case <-t.C:
			return w.Ready()
		case <-ctx.Done():
			return w.Ready()
		}
	}
}

// alarm returns an Alarm for a held probe request, one kept from an
// earlier request if there is one: an Alarm is a timerfd and a goroutine.
func (w *Watcher) alarm() *clock.Alarm {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := len(w.alarms); n > 0 {
		a := w.alarms[n-1]
		w.alarms = w.alarms[:n-1]
		return a
	}
	return newAlarm()
}

// newAlarm makes the Watcher's Alarms (a test's is clock.NewTimerAlarm).
var newAlarm = clock.NewAlarm

// release keeps a for the next held probe request, or closes it when
// keptAlarms are kept already.
func (w *Watcher) release(a *clock.Alarm) {
	a.Stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped && len(w.alarms) < keptAlarms {
		w.alarms = append(w.alarms, a)
		return
	}
	a.Close()
}

// stop closes the Alarms kept for held probe requests as Run returns;
// later requests close theirs as they end.
func (w *Watcher) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	for _, a := range w.alarms {
		a.Close()
	}
	w.alarms = nil
}

// keptAlarms is how many Alarms a Watcher keeps for held probe requests:
// the kubelet's and the activator's, a few at a time.
const keptAlarms = 4

// Run probes until ctx is done.
func (w *Watcher) Run(ctx context.Context) {
	failures, successes := w.FailureThreshold, w.SuccessThreshold
	if failures <= 0 {
		failures = 3
	}
	if successes <= 0 {
		successes = 1
	}
	wake := w.wakeup()
	t := newAlarm()
	defer t.Close()
	defer w.stop()
	t.Reset(0)
	p := pace{fastUntil: time.Now().Add(StartWindow), backoff: FastInterval}
	var failed, succeeded int
	var due time.Time  // when t fires next
	var last time.Time // when the last probe started
	asked := false     // the probe due now was brought forward by a request while ready
	for {
		select {
		case <-ctx.Done():
			return
		case <-wake:
			if w.Period > 0 {
				continue // a period is the user's choice
			}
			now := time.Now()
			if w.ready.Load() {
				// A probe request while ready (the kubelet's, each
				// second) takes the probing over: it probes in its own
				// wake-up when the last probe is half a RelaxedInterval old
				// or more, and the timer waits two RelaxedIntervals, a
				// fallback should the requests stop. The process then
				// wakes once a second, not twice.
				if failed == 0 {
					if now.Sub(last) >= RelaxedInterval/2 {
						t.Reset(0)
						due, asked = now, true
					} else {
						t.Reset(2 * RelaxedInterval)
						due = now.Add(2 * RelaxedInterval)
					}
				}
				continue
			}
			// Probe now unless the next probe is due within FastInterval
			// anyway; never sooner than FastInterval after the last one,
			// which bounds what a flood of probe requests costs.
			if due.Sub(now) > FastInterval {
				at := now
				if soonest := last.Add(FastInterval); soonest.After(now) {
					at = soonest
				}
				t.Reset(at.Sub(now))
				due = at
			}
			continue
		case <-t.C:
		}
		last = time.Now()
		err := w.Prober.Probe(ctx)
		if ctx.Err() != nil {
			return
		}
		now := time.Now()
		ready := w.ready.Load()
		if err == nil {
			failed, succeeded = 0, succeeded+1
			if !ready && succeeded >= successes {
				w.set(true, nil)
				ready = true
			}
		} else {
			failed, succeeded = failed+1, 0
			if ready && failed == 1 {
				p.fast(now.Add(StartWindow))
			}
			if ready && failed >= failures {
				w.set(false, err)
				ready = false
			}
		}
		p.hold(w.hold())
		d := w.next(&p, now, ready, failed, succeeded)
		if asked && ready && failed == 0 {
			d = 2 * RelaxedInterval
		}
		asked = false
		t.Reset(d)
		due = now.Add(d)
	}
}

// pace is the aggressive mode's state while not ready: FastInterval until
// fastUntil, HoldInterval until holdUntil, then a back-off that doubles up
// to MaxBackoff.
type pace struct {
	fastUntil time.Time
	holdUntil time.Time
	backoff   time.Duration // the last wait while backing off
}

// fast makes the pace FastInterval until at least until.
func (p *pace) fast(until time.Time) {
	if until.After(p.fastUntil) {
		p.fastUntil = until
	}
	p.backoff = FastInterval
}

// hold makes the pace at most HoldInterval until until, the end of the
// latest demand's hold; the back-off after it starts again from
// HoldInterval.
func (p *pace) hold(until time.Time) {
	if until.After(p.holdUntil) {
		p.holdUntil = until
		p.backoff = min(p.backoff, HoldInterval)
	}
}

// next is the wait before the next probe.
func (w *Watcher) next(p *pace, now time.Time, ready bool, failed, succeeded int) time.Duration {
	switch {
	case w.Period > 0:
		return w.Period
	case ready && failed == 0:
		return RelaxedInterval
	case ready, succeeded > 0, now.Before(p.fastUntil):
		// Confirming failures (ready) or successes (not yet ready), or
		// inside a start window.
		return FastInterval
	case now.Before(p.holdUntil):
		// A demand holds: a probe request is waiting for readiness.
		return HoldInterval
	default:
		p.backoff = min(2*p.backoff, MaxBackoff)
		return p.backoff
	}
}
