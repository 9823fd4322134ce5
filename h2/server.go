package h2

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/queue-dev/queue/internal/clock"
	"github.com/queue-dev/queue/internal/conns"
	"github.com/queue-dev/queue/internal/workers"
)

// Server serves HTTP/2 connections that its caller accepted (and, for TLS,
// negotiated "h2" on) or upgraded from HTTP/1.1. Set the fields before the
// first ServeConn; they must not change afterwards.
type Server struct {
	// Handler serves every stream. Required. The *http.Request, its
	// header map and body, and the ResponseWriter are reused for a later
	// stream once ServeHTTP returned: a handler must not keep them.
	Handler http.Handler
	// ReadHeaderTimeout bounds the wait for the client preface and for the
	// rest of a header block. 0 means clock.DefaultReadHeaderTimeout.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes a connection (GOAWAY NO_ERROR) that carries no
	// stream for this long. 0 means clock.DefaultIdleTimeout.
	IdleTimeout time.Duration
	// Logger receives handler panics (warn) and connection errors
	// (debug). nil discards.
	Logger *slog.Logger

	conns conns.Set[*conn]

	glitches     atomic.Uint64 // counted by every connection (Glitches)
	glitchCloses atomic.Uint64 // connections closed past MaxGlitches

	workers workers.Pool[*stream]
}

// Glitches reports the glitches (MaxGlitches) that the server's
// connections have counted since it started, each once whatever its
// weight, and how many connections it closed for going past their budget.
// Safe for concurrent use.
func (s *Server) Glitches() (glitches, closed uint64) {
	return s.glitches.Load(), s.glitchCloses.Load()
}

// Conn options for ServeConn.
type ConnOptions struct {
	// Upgrade is the HTTP/1.1 request that asked for "Upgrade: h2c"; it is
	// served as stream 1, half-closed by the client. Its body must be
	// empty. nil for a connection that starts with the client preface.
	Upgrade *http.Request
	// Settings is the decoded HTTP2-Settings field of Upgrade.
	Settings []byte
}

func (s *Server) idleTimeout() time.Duration {
	if s.IdleTimeout > 0 {
		return s.IdleTimeout
	}
	return clock.DefaultIdleTimeout
}

func (s *Server) headerTimeout() time.Duration {
	if s.ReadHeaderTimeout > 0 {
		return s.ReadHeaderTimeout
	}
	return clock.DefaultReadHeaderTimeout
}

func (s *Server) logger() *slog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return discard
}

var discard = slog.New(slog.DiscardHandler)

// ServeConn serves HTTP/2 on nc until the connection ends, and closes it.
// It runs the connection's read loop on the calling goroutine.
func (s *Server) ServeConn(nc net.Conn, opts *ConnOptions) {
	c := newConn(s, nc)
	if !s.conns.Add(c, 0) {
		nc.Close()
		return
	}
	defer s.conns.Remove(c)
	c.serve(opts)
}

// Shutdown drains every connection: GOAWAY, in two steps (RFC 9113
// section 6.8), so that no stream the client sent meanwhile is lost; the
// streams in flight are served to their end; each connection closes when
// it has none left. It returns when all have closed, or, once ctx is done,
// closes what is left and returns ctx's error.
func (s *Server) Shutdown(ctx context.Context) error {
	conns, done := s.conns.Shutdown()
	for _, c := range conns {
		c.drain()
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.Close()
		return ctx.Err()
	}
}

// Close closes every connection at once.
func (s *Server) Close() error {
	for _, c := range s.conns.Close() {
		c.nc.Close()
	}
	s.workers.StopIdle()
	return nil
}

var errClosed = errors.New("h2: connection closed")
