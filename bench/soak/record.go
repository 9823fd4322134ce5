package main

import (
	"sync"
	"time"
)

// proto is a kind of client the soak runs; each is a column of the table.
type proto int

const (
	pH1         proto = iota // HTTP/1.1 keep-alive GET and POST, plain
	pH2C                     // HTTP/2 with prior knowledge, plain
	pTLSH1                   // HTTP/1.1 over TLS (ALPN http/1.1)
	pTLSH2                   // HTTP/2 over TLS (ALPN h2)
	pWS                      // a websocket session: connect, echo, close
	pGRPC                    // a unary gRPC call
	pGRPCStream              // a bidirectional gRPC stream: echo, close
	pSlow                    // a slow client's request
	pVanish                  // a vanishing client: a request it abandons
	pCert                    // a certificate rotation, checked by a new handshake
	nProto
)

var protoNames = [nProto]string{"h1", "h2c", "tls-h1", "tls-h2", "ws", "grpc", "grpc-stream", "slow", "vanish", "cert"}

func (p proto) String() string { return protoNames[p] }

// window is one injected upstream kill, from the SIGKILL to the first
// success after the restart, plus slack.
type window struct {
	kill    time.Time     // just before the SIGKILL
	died    time.Time     // the killed upstream was reaped; zero until then
	up      time.Time     // the restarted upstream accepted a connection; zero while down
	firstOK time.Time     // the end of the first success that started at or after up; zero if none
	end     time.Time     // firstOK (or, without one, the end of its phase) plus the slack; zero while open
	down    time.Duration // the downtime asked for
}

// kind is how a failure is counted.
type kind int

const (
	atKill    kind = iota // in flight when the upstream was killed, or sent while it died
	afterKill             // started after a kill, before its window closed
	other                 // everything else: a failure of queue's
)

// classify says which window, if any, a request that failed explains: the
// first whose span [kill, end] overlaps the request's [start, stop].
func classify(start, stop time.Time, ws []*window) kind {
	for _, w := range ws {
		if w.end.IsZero() || start.After(w.end) || stop.Before(w.kill) {
			continue
		}
		dying := w.died
		if dying.IsZero() {
			dying = w.kill
		}
		if start.Before(dying) {
			return atKill
		}
		return afterKill
	}
	return other
}

// failure is a request that failed, kept until its phase ends and the
// windows it may overlap are closed.
type failure struct {
	p           proto
	start, stop time.Time
	err         error
}

// count is one protocol's figures over a phase.
type count struct {
	req       int // requests (sessions, streams, abandoned requests) that ended
	atKill    int // failed, in flight at a kill
	afterKill int // failed, started after a kill before its window closed
	own       int // a vanishing client's own abandoned request
	other     int // failed outside every window
}

// fault is every failure an injected fault explains.
func (c count) fault() int { return c.atKill + c.afterKill + c.own }

// phaseResult is what the recorder saw in one phase.
type phaseResult struct {
	counts  [nProto]count
	kills   []time.Duration // downtime of each kill in the phase
	longest time.Duration   // the longest kill-to-first-success of those kills
	others  []failure       // the failures counted as other (for the log)
	faults  []failure       // the failures an upstream kill explains (for failures.log)
}

// recorder counts requests by protocol and keeps the kill windows. Clients
// report each request's end to done; the fault injector opens and closes
// windows; the phase loop calls endPhase once the clients of a phase have
// returned. It is safe for concurrent use.
type recorder struct {
	slack time.Duration // added to a window's end for requests in flight at its close

	mu       sync.Mutex
	counts   [nProto]count
	fails    []failure
	windows  []*window // every kill of the run, in order
	newKills []*window // kills since the last endPhase
}

// done records a request of p that started at start and ended now; err is
// nil for a success.
func (r *recorder) done(p proto, start time.Time, err error) {
	stop := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts[p].req++
	if err != nil {
		r.fails = append(r.fails, failure{p: p, start: start, stop: stop, err: err})
		return
	}
	// Kills are serialized, so only the last window can be waiting for its
	// first success. A certificate check does not reach the upstream: its
	// success says nothing about the restart.
	if n := len(r.windows); n > 0 && p != pCert {
		w := r.windows[n-1]
		if !w.up.IsZero() && w.firstOK.IsZero() && !start.Before(w.up) {
			w.firstOK = stop
			w.end = stop.Add(r.slack)
		}
	}
}

// vanished records a vanishing client's request, abandoned by design.
func (r *recorder) vanished(p proto) {
	r.mu.Lock()
	r.counts[p].req++
	r.counts[p].own++
	r.mu.Unlock()
}

// kill opens a window; call it just before the SIGKILL.
func (r *recorder) kill(down time.Duration) *window {
	w := &window{kill: time.Now(), down: down}
	r.mu.Lock()
	r.windows = append(r.windows, w)
	r.newKills = append(r.newKills, w)
	r.mu.Unlock()
	return w
}

// died notes that the killed upstream is gone: reaped, its connections and
// listener closed. A request that started before then met it dying (its
// connection reset, or accepted into a backlog that was then dropped), and
// is counted as in flight at the kill.
func (r *recorder) died(w *window) {
	now := time.Now()
	r.mu.Lock()
	w.died = now
	r.mu.Unlock()
}

// up notes that the restarted upstream accepts connections again.
func (r *recorder) up(w *window) {
	now := time.Now()
	r.mu.Lock()
	w.up = now
	r.mu.Unlock()
}

// endPhase closes a window still waiting for its first success (the load
// stopped before one came), classifies the phase's failures and starts the
// next phase's counts.
func (r *recorder) endPhase() phaseResult {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, w := range r.windows {
		if w.end.IsZero() {
			w.end = now.Add(r.slack)
		}
	}
	var res phaseResult
	res.counts = r.counts
	for _, f := range r.fails {
		c := &res.counts[f.p]
		switch classify(f.start, f.stop, r.windows) {
		case atKill:
			c.atKill++
			res.faults = append(res.faults, f)
		case afterKill:
			c.afterKill++
			res.faults = append(res.faults, f)
		default:
			c.other++
			res.others = append(res.others, f)
		}
	}
	for _, w := range r.newKills {
		res.kills = append(res.kills, w.down)
		if !w.firstOK.IsZero() {
			res.longest = max(res.longest, w.firstOK.Sub(w.kill))
		}
	}
	r.counts = [nProto]count{}
	r.fails = r.fails[:0]
	r.newKills = r.newKills[:0]
	return res
}
