package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// DefaultRetryWindow is how long queue's --upstream-retry-window lets a
// request whose connect the upstream refused try again by default.
//
// A refused connect reached nothing, so it is safe to retry whatever the
// method, as HAProxy's "retry-on conn-failure" and Envoy's
// "connect-failure" retries do: an upstream that restarts (its process
// crashed, or a reload) then costs the requests that meet the gap some
// latency instead of a 502 each. 3 s covers a process that exits and
// listens again within a couple of seconds, the common restart of a
// container that keeps its pod, with room to spare, and stays well under
// the timeouts clients commonly set (10 s and more). Longer outages are
// readiness' business: the probe turns the pod unready and the platform
// stops sending (docs/contract.md section 4). A request that meets an
// outage that has already lasted longer than the window gets its 502 at
// once, after its one refused connect, until a connect succeeds again (a
// request's, or the readiness probe's: Proxy.UpstreamUp), as HAProxy
// answers at once for a server it has marked down: the window is for a
// blip, and waiting it out again for every request of a long outage only
// holds clients and slots.
const DefaultRetryWindow = 3 * time.Second

// Waits between two probes of an upstream that refuses connects: the first
// comes soon, for a blip; the wait doubles to probeMax, which bounds how
// late a waiting request learns that the upstream is back (a request that
// arrives meanwhile connects at once and tells the others). A refused
// loopback connect costs some ten microseconds: ten a second is nothing,
// for the upstream or for queue.
const (
	probeMin = 5 * time.Millisecond
	probeMax = 100 * time.Millisecond
)

// outage is what the proxy knows of an upstream that refuses connects,
// shared by every request that waits for it to come back (reconnect), so
// that they do not each connect in a loop: one of them at a time, the
// holder of the probe token, connects again after a backoff, for everyone;
// the others wait until a connect succeeds (back is closed), theirs or any
// other request's or the h2c Transport's (up), or until the token comes to
// them. The dials call up on a nil *outage (no retry window), which does
// nothing. It is safe for concurrent use.
type outage struct {
	window  time.Duration
	down    atomic.Bool   // a connect was refused and none has succeeded since
	token   chan struct{} // capacity 1, full while no waiting request probes
	waiting atomic.Int32  // requests in reconnect (read by tests)

	mu      sync.Mutex
	back    chan struct{} // closed when a connect succeeds; nil while not down
	backoff time.Duration // the wait after the last probe
	last    time.Time     // the last probe, or the refusal that began the outage
	began   time.Time     // the refusal that began the outage
}

func newOutage(window time.Duration) *outage {
	if window <= 0 {
		return nil
	}
	o := &outage{window: window, token: make(chan struct{}, 1)}
	o.token <- struct{}{}
	return o
}

// up ends the outage, if there is one: a connect succeeded. Every new
// connection calls it; with the upstream up it costs an atomic load.
func (o *outage) up() {
	if o == nil || !o.down.Load() {
		return
	}
	o.mu.Lock()
	if o.back != nil {
		close(o.back)
		o.back = nil
		o.down.Store(false)
	}
	o.mu.Unlock()
}

// refused records a refused connect and returns the channel that is closed
// when a connect succeeds.
func (o *outage) refused() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.back == nil {
		o.back = make(chan struct{})
		o.backoff, o.last = probeMin, time.Now()
		o.began = o.last
		o.down.Store(true)
	}
	return o.back
}

// long reports whether the upstream has refused connects, none succeeding
// since, for longer than the window: a request then fails at once instead
// of waiting.
func (o *outage) long(now time.Time) bool {
	if !o.down.Load() {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.back != nil && now.Sub(o.began) > o.window
}

// errWindow is wait's answer when the request's retry window (or deadline)
// ends first.
var errWindow = errors.New("retry window ended")

// wait blocks after a refused connect until the caller should connect
// again: a connect succeeded, or the caller took the probe token and the
// backoff since the last probe has passed (probe is true then, and the
// caller must give the token back with probed). It returns ctx's error
// when ctx ends first, and errWindow when expired fires.
func (o *outage) wait(ctx context.Context, expired <-chan time.Time) (probe bool, err error) {
	back := o.refused()
	select {
	case <-back:
		return false, nil
	case <-o.token:
	case <-ctx.Done():
		return false, ctx.Err()
	case <-expired:
		return false, errWindow
	}
	o.mu.Lock()
	d := time.Until(o.last.Add(o.backoff))
	o.mu.Unlock()
	if d <= 0 {
		return true, nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true, nil
	case <-back:
	case <-ctx.Done():
		err = ctx.Err()
	case <-expired:
		err = errWindow
	}
	o.token <- struct{}{}
	return false, err
}

// probed gives the probe token back after the holder's connect; refused
// says the upstream refused it again, and the next probe waits longer.
func (o *outage) probed(refused bool) {
	o.mu.Lock()
	o.last = time.Now()
	if refused {
		o.backoff = min(2*o.backoff, probeMax)
	}
	o.mu.Unlock()
	o.token <- struct{}{}
}

// reconnect calls connect again while its connect to the upstream is
// refused (err first), for at most --upstream-retry-window and never past
// the request's deadline (zero: none) or ctx: a refused connect reached
// nothing, so any request may be retried, whatever its method. Requests
// that wait share one outage: only one of them connects at a time, with a
// backoff, and all of them go as soon as any connect succeeds. Other errors
// return as they are. After the window the last refusal is returned (502);
// at the deadline a timeout (504); when ctx ends, its error (499 for a
// client that went away). A request that comes when the outage has lasted
// longer than the window returns its refusal at once (outage.long).
//
// It runs on the request's goroutine, only after a failed connect: the
// request stays counted as in flight, and a pooled connection never comes
// here.
func (p *Proxy) reconnect(ctx context.Context, deadline time.Time, err error, connect func() error) error {
	o := p.outage
	if o == nil || !refusedConnect(err) || o.long(time.Now()) {
		return err
	}
	o.waiting.Add(1)
	defer o.waiting.Add(-1)
	stop := time.Now().Add(o.window)
	late := !deadline.IsZero() && deadline.Before(stop)
	if late {
		stop = deadline
	}
	expired := time.NewTimer(time.Until(stop))
	defer expired.Stop()
	for {
		probe, werr := o.wait(ctx, expired.C)
		switch {
		case werr == errWindow && late:
			return fmt.Errorf("%w: the upstream refused connects until the deadline: %w", context.DeadlineExceeded, err)
		case werr == errWindow:
			return err
		case werr != nil:
			return fmt.Errorf("wait for the upstream: %w", werr)
		}
		err = connect()
		if probe {
			o.probed(refusedConnect(err))
		}
		if err == nil {
			o.up() // as the dial did, unless an open connection served it
		}
		if !refusedConnect(err) {
			return err
		}
	}
}

// refusedConnect reports a connect that reached nothing because nothing
// listens at the upstream's address: refused (ECONNREFUSED: a reset in
// answer to the SYN), or reset before it completed. Only the dialer's
// errors count (net.OpError "dial"): a reset on an open connection may
// come after the upstream read the request. A connect that timed out is
// not retried: it took the dial timeout (5 s) already, longer than the
// window, and means an upstream that is overloaded or unreachable rather
// than restarting.
func refusedConnect(err error) bool {
	var oe *net.OpError
	return err != nil && errors.As(err, &oe) && oe.Op == "dial" &&
		(errors.Is(oe.Err, syscall.ECONNREFUSED) || errors.Is(oe.Err, syscall.ECONNRESET))
}
