package chain

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/queue-dev/queue/drain"
	"github.com/queue-dev/queue/internal/engine"
	"github.com/queue-dev/queue/limit"
	"github.com/queue-dev/queue/overload"
	"github.com/queue-dev/queue/proxy"
	"github.com/queue-dev/queue/stats"
	"github.com/queue-dev/queue/tracing"
)

// Config names the layers of the request path. A nil layer is off: it is not
// in the path at all. New reads it once.
type Config struct {
	// Drain answers probe requests itself and notes the arrival of every
	// other request for the drain's quiet period. nil: probes are proxied
	// like any request and arrivals are not noted.
	Drain *drain.Drainer

	// Stats counts every request that is not a probe from arrival to the end
	// of its response, queued ones included, and reports each one's status
	// to its OnDone (the access log). nil: nothing is counted.
	Stats *stats.Recorder

	// Tracer wraps each request in a server span and its
	// kn.queueproxy.proxy span. It sits inside Stats, whose writer reports
	// the status for the span, and outside Limiter, so that the wait for a
	// slot is part of the span; with a Limiter, the wait is a
	// kn.queueproxy.wait span of its own. nil: tracing is off.
	Tracer *tracing.Tracer

	// Limiter bounds the requests in flight to the upstream. A request holds
	// a slot while the proxy serves it; one that gets none is answered
	// through Proxy.Fail. Requests with a K-Kubelet-Probe header bypass it.
	// nil: no limit.
	Limiter *limit.Limiter

	// Guard sheds Limiter while the CPU quota binds; every request that
	// goes through Limiter has it look (overload.Guard.Check). nil: none.
	// It needs a Limiter.
	Guard *overload.Guard

	// Proxy is the terminal handler and the one writer of error responses.
	// Required.
	Proxy *proxy.Proxy
}

// New returns the request path for cfg, its layers composed in request
// order: Drain, Stats, Tracer, Limiter, then Proxy. It fails only when
// Proxy is nil.
func New(cfg Config) (http.Handler, error) {
	if cfg.Proxy == nil {
		return nil, errors.New("chain: Config.Proxy is required")
	}
	if cfg.Guard != nil && cfg.Limiter == nil {
		return nil, errors.New("chain: Config.Guard needs a Limiter")
	}
	var mw []func(http.Handler) http.Handler
	if cfg.Drain != nil {
		mw = append(mw, cfg.Drain.Handler)
	}
	if cfg.Stats != nil {
		mw = append(mw, cfg.Stats.Handler)
	}
	if cfg.Tracer != nil {
		mw = append(mw, cfg.Tracer.Handler)
	}
	if cfg.Limiter != nil {
		mw = append(mw, func(next http.Handler) http.Handler {
			return &limited{l: cfg.Limiter, guard: cfg.Guard, p: cfg.Proxy, tracer: cfg.Tracer, next: next, timed: cfg.Limiter.Adaptive()}
		})
	}
	return compose(cfg.Proxy, mw...), nil
}

// compose wraps final in mw: mw[0] is the outermost layer.
func compose(final http.Handler, mw ...func(http.Handler) http.Handler) http.Handler {
	h := final
	for i := len(mw) - 1; i >= 0; i-- {
		h = mw[i](h)
	}
	return h
}

// limited adapts a Limiter to the request path: it holds a slot while next
// serves the request, and releases it when next returns (also when it
// panics). A request that gets no slot is answered by p.Fail: 503 for a full
// queue or a wait that ran out of time, nothing for a client that went away.
// One that waited for its slot is looked at again once it has it: if its
// client left meanwhile (clientLeft), the slot goes back at once and the
// upstream never sees the request.
// With a tracer, the time to a slot (or to giving up) is a
// kn.queueproxy.wait span, as Knative's queue-proxy makes it around its
// breaker; without one, that costs a nil check. With an adaptive limiter
// (timed), the slot is given back with ReleaseSince and the time it was
// taken, which is the controller's round trip; a fixed limiter costs that
// a bool test and no clock reading. With an overload guard, each request
// has it look at the CPU quota first (at most once per overload.Look).
type limited struct {
	l      *limit.Limiter
	guard  *overload.Guard // nil: none
	p      *proxy.Proxy
	tracer *tracing.Tracer // nil: tracing off
	next   http.Handler
	timed  bool // l.Adaptive(), read once by New
}

// errLeftWhileQueued is the error of a request whose client left while it
// waited for a slot: a 499, of which nothing is written.
var errLeftWhileQueued = fmt.Errorf("limit: client left while queued: %w", context.Canceled)

// clientLeft reports whether the client of the request w answers has gone,
// looking now: one peek at an HTTP/1.1 connection (engine.PeerChecker).
// Other engines cancel a request's context as soon as its client goes,
// which Acquire has already seen.
func clientLeft(w http.ResponseWriter) bool {
	pc, ok := engine.As[engine.PeerChecker](w)
	return ok && pc.PeerGone()
}

func (h *limited) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, ok := r.Header[stats.KKubeletProbe]; ok {
		// A kubelet probe is proxied but neither counted nor queued
		// (docs/contract.md section 4).
		h.next.ServeHTTP(w, r)
		return
	}
	if h.guard != nil {
		h.guard.Check()
	}
	ctx := r.Context()
	var waited bool
	var err error
	if h.tracer != nil {
		span := h.tracer.StartWait(ctx)
		waited, err = h.l.AcquireWaited(ctx)
		tracing.EndWait(span, err)
	} else {
		waited, err = h.l.AcquireWaited(ctx)
	}
	if err == nil && waited && clientLeft(w) {
		// It left while it waited, and the HTTP/1.1 engine's watcher
		// has not looked since: the upstream is not asked for an answer
		// nobody will read.
		h.l.Release()
		err = errLeftWhileQueued
	}
	if err != nil {
		if errors.Is(ctx.Err(), context.Canceled) && !errors.Is(err, context.Canceled) {
			// The client went away just as the wait ran out: nobody is
			// left to read a 503.
			err = fmt.Errorf("%w: %w", err, context.Canceled)
		}
		h.p.Fail(w, r, err)
		return
	}
	if h.timed {
		// The deferred call's argument is read now: the round trip runs
		// from here to the end of next, panics included.
		defer h.l.ReleaseSince(time.Now())
	} else {
		defer h.l.Release()
	}
	h.next.ServeHTTP(w, r)
}
