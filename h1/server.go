package h1

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/queue-dev/queue/internal/clock"
)

// Server serves HTTP/1.1 on the connections it accepts, with one goroutine
// per connection that reads, parses, runs Handler and writes. Connections
// that speak HTTP/2 (the client preface on a plain connection, ALPN "h2"
// on TLS) are handed to H2. Set the fields before the first Serve; they
// must not change afterwards.
type Server struct {
	// Handler serves every request. Required. The *http.Request and its
	// fields (strings included) are valid only until ServeHTTP returns: the
	// connection reuses them for its next request (doc.go).
	Handler http.Handler
	// H2 takes over a connection whose first bytes are the HTTP/2 client
	// preface, or a TLS connection that negotiated "h2". The connection
	// replays what was already read. nil: such connections are closed.
	H2 func(net.Conn)
	// Limits bound a request head (see Limits for the defaults).
	Limits Limits
	// ReadHeaderTimeout bounds the reading of a request head once its first
	// byte came (and of a TLS handshake). 0 means 10 s.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that carries no request
	// for this long. 0 means 120 s.
	IdleTimeout time.Duration
	// Gate, when set, is waited on before each accept (overload.Guard):
	// while Wait blocks, new connections stay in the kernel's backlog.
	// When it reports true (overloaded), the connections whose clients
	// have already closed their side are reset at once, unserved, all
	// on that one turn (acceptLive): their requests waited in the
	// backlog until the clients gave up.
	Gate interface{ Wait() bool }

	// MaxConns bounds the open connections; one beyond is closed at once,
	// before any byte is read. 0 means no bound.
	MaxConns int
	// Logger receives handler panics (warn) and refused connections
	// (debug). nil discards.
	Logger *slog.Logger

	mu       sync.Mutex
	conns    map[*conn]struct{}
	lns      map[net.Listener]struct{}
	shutdown atomic.Bool
	open     atomic.Int64 // connections counted against MaxConns

	glitches     atomic.Uint64 // requests refused by queue itself (Glitches)
	glitchCloses atomic.Uint64 // connections closed past MaxGlitches

	watcher     *clock.Busy // ticks (watch) while requests are in a handler; made by Serve
	watcherOnce sync.Once
	scratch     []*conn       // the watcher's snapshot, reused; guarded by the watcher's lock
	round       uint32        // the watcher's round (maxPeeks); guarded by the watcher's lock
	ticks       atomic.Uint32 // the watcher's ticks, counted: a request's age
}

// MaxGlitches is an HTTP/1.1 connection's budget of glitches: requests
// that queue answers itself with a 4xx, which the upstream never sees (a
// handler's Refuse: the proxy's 400 for a CONNECT or absolute-form target
// or a bad Host, the probe handler's 400 for a bad K-Network-Probe). Each
// costs one, and a request served otherwise takes one back (down to zero).
// The response that goes past the budget carries "Connection: close", and
// the connection closes after it: a client that sends request after
// request that queue refuses is made to reconnect. (The proxy's 400s close
// their connection at once anyway; a malformed head does too, and counts
// as a glitch in Server.Glitches.)
const MaxGlitches = 8

// Glitches reports the glitches the server's connections have counted
// since it started (MaxGlitches; a malformed head answered 4xx included),
// and how many connections it closed for going past their budget. Safe
// for concurrent use.
func (s *Server) Glitches() (glitches, closed uint64) {
	return s.glitches.Load(), s.glitchCloses.Load()
}

// ErrServerClosed is returned by Serve after Shutdown or Close.
var ErrServerClosed = http.ErrServerClosed

func (s *Server) headerTimeout() time.Duration {
	if s.ReadHeaderTimeout > 0 {
		return s.ReadHeaderTimeout
	}
	return clock.DefaultReadHeaderTimeout
}

func (s *Server) idleTimeout() time.Duration {
	if s.IdleTimeout > 0 {
		return s.IdleTimeout
	}
	return clock.DefaultIdleTimeout
}

func (s *Server) logger() *slog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return discard
}

var discard = slog.New(slog.DiscardHandler)

// Serve accepts connections on ln until Shutdown or Close, and serves each
// on its own goroutine. It always returns a non-nil error.
func (s *Server) Serve(ln net.Listener) error { return s.serve(ln, nil) }

// ServeTLS is Serve with TLS terminated on every connection. cfg's
// NextProtos decide what ALPN offers; "h2" connections go to H2.
func (s *Server) ServeTLS(ln net.Listener, cfg *tls.Config) error { return s.serve(ln, cfg) }

func (s *Server) serve(ln net.Listener, cfg *tls.Config) error {
	s.watcherOnce.Do(func() { s.watcher = clock.NewBusy(watchPeriod, s.watch) })
	if !s.track(ln, true) {
		ln.Close()
		return ErrServerClosed
	}
	defer s.track(ln, false)
	var delay time.Duration
	for {
		overloaded := s.Gate != nil && s.Gate.Wait()
		var nc net.Conn
		if overloaded {
			nc = acceptLive(ln) // its client is there: acceptLive looked
		}
		if nc == nil {
			var err error
			if nc, err = ln.Accept(); err != nil {
				if s.shutdown.Load() {
					return ErrServerClosed
				}
				if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ECONNABORTED) {
					// Out of file descriptors and the like: back off as
					// net/http does, then accept again.
					delay = min(max(2*delay, 5*time.Millisecond), time.Second)
					time.Sleep(delay)
					continue
				}
				return err
			}
			delay = 0
			if overloaded && peerClosed(nc) {
				reset(nc)
				continue
			}
		}
		if s.MaxConns > 0 && s.open.Add(1) > int64(s.MaxConns) {
			s.open.Add(-1)
			reset(nc)
			continue
		} else if s.MaxConns <= 0 {
			s.open.Add(1)
		}
		c := newConn(s, nc)
		c.tlsConfig = cfg
		if !s.add(c) {
			c.closeConn()
			return ErrServerClosed
		}
		go c.serve()
	}
}

func (s *Server) track(ln net.Listener, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if add {
		if s.shutdown.Load() {
			return false
		}
		if s.lns == nil {
			s.lns = map[net.Listener]struct{}{}
		}
		s.lns[ln] = struct{}{}
	} else {
		delete(s.lns, ln)
	}
	return true
}

func (s *Server) add(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutdown.Load() {
		return false
	}
	if s.conns == nil {
		s.conns = map[*conn]struct{}{}
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Server) remove(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// Shutdown stops accepting, closes idle connections, and waits until every
// request in flight has been answered (each connection then closes) or ctx
// is done; then it closes what is left and returns ctx's error. Hijacked
// and handed-over connections are not waited for.
func (s *Server) Shutdown(ctx context.Context) error {
	s.closeListeners()
	// Poll as net/http does: from 1 ms, doubling, to at most 500 ms.
	wait := time.Millisecond
	for {
		if s.closeIdle() {
			return nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			s.Close()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// Close closes the listeners and every connection at once.
func (s *Server) Close() error {
	s.closeListeners()
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.abort()
	}
	return nil
}

func (s *Server) closeListeners() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shutdown.Store(true)
	for ln := range s.lns {
		ln.Close()
	}
}

// closeIdle closes the connections that wait for a request and reports
// whether none is left.
func (s *Server) closeIdle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.state.CompareAndSwap(stateIdle, stateClosed) {
			c.nc.Close()
		}
	}
	return len(s.conns) == 0
}

// watchPeriod is how often connections with a request in a handler are
// checked for a client that went away.
const watchPeriod = 100 * time.Millisecond

// maxPeeks bounds the connections one tick of the watcher peeks at: a
// backlog of requests (a process held to its CPU quota, a slow upstream)
// must not make the watcher's work grow with it, or the backlog feeds
// itself. Past it, each is still seen, later: the ticks go round in
// rounds, and a tick takes only connections not yet peeked at in the
// current round (conn.peekRound). The order a tick finds them in is the
// map's, which the Go spec leaves unspecified; the rounds do not depend
// on it.
const maxPeeks = 64

// begin counts a request into a handler and end counts it out: the
// watcher ticks while any is in one (clock.Busy), and an idle server has no
// timer.
func (s *Server) begin() { s.watcher.Begin() }

func (s *Server) end() { s.watcher.End() }

// watch is a tick of the watcher, run while requests are in flight: it
// cancels the context of every request whose client closed its
// connection. This replaces net/http's background read per connection (a
// goroutine wake-up and a read per request) with a peek per tick at each
// request in a handler for a whole tick or more (one that ends sooner is
// not worth a system call), at most maxPeeks a tick.
func (s *Server) watch() {
	now := s.ticks.Add(1)
	s.mu.Lock()
	s.scratch = s.scratch[:0]
	if s.round == 0 {
		s.round = 1 // round 0 is no round: see below
	}
	for c := range s.conns {
		if c.watch.Load() && now-c.since.Load() >= 2 && c.peekRound != s.round {
			c.peekRound = s.round
			s.scratch = append(s.scratch, c)
			if len(s.scratch) == maxPeeks {
				break
			}
		}
	}
	if len(s.scratch) < maxPeeks {
		// Every connection due was peeked at this round: the next tick
		// starts another. Round 0 is no round, so that a new connection
		// (peekRound 0) is never taken for one already peeked at.
		if s.round++; s.round == 0 {
			s.round = 1
		}
	}
	s.mu.Unlock()
	for _, c := range s.scratch {
		if c.watch.Load() && c.peerGone() {
			c.cancel()
		}
	}
	clear(s.scratch)
}
