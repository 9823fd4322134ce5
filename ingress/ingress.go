// Package ingress is queue's client-facing server: the HTTP/1.1 engine
// (package h1) on the serving and TLS ports, with HTTP/2 connections (h2c
// prior knowledge, ALPN h2, and "Upgrade: h2c") handed to the HTTP/2
// engine (package h2), and HTTP/3 (package h3) on the TLS port's number
// over UDP. cmd/queue, its tests and bench/ all serve through it, so that
// what is measured is what runs.
//
// It also holds the other client-facing pieces: the h2c Upgrade handler
// (H2CUpgrade, RFC 7540 section 3.2) and the TLS certificate reloader
// (CertReloader), which serves the TLS port's certificate.
//
// A *Server is safe for concurrent use once New has returned.
package ingress

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/queue-dev/queue/h1"
	"github.com/queue-dev/queue/h2"
	"github.com/queue-dev/queue/h3"
	"github.com/queue-dev/queue/internal/clock"
)

// Limits of the client-facing servers. They are not flags: they bound
// hostile clients and no honest one comes near them.
const (
	// ReadHeaderTimeout cuts a client that sends its request head slowly
	// (slowloris), unless Config sets another.
	ReadHeaderTimeout = clock.DefaultReadHeaderTimeout
	// IdleTimeout closes keep-alive connections idle this long (see
	// clock.DefaultIdleTimeout for why 120 s).
	IdleTimeout = clock.DefaultIdleTimeout
	// MaxHeaderBytes is the request head limit; over it, 431.
	MaxHeaderBytes = 64 << 10
	// MaxConcurrentStreams per HTTP/2 connection (the HTTP/2 engine's
	// other limits are in package h2).
	MaxConcurrentStreams = h2.MaxConcurrentStreams
)

// Config configures a Server. The zero value of each field is documented.
type Config struct {
	// Handler serves every request, HTTP/1.1, HTTP/2 and HTTP/3 alike.
	// Required.
	Handler http.Handler
	// MaxConns bounds the open client connections over the TCP ports,
	// and the QUIC connections apart. 0 means no bound.
	MaxConns int
	// ReadHeaderTimeout bounds reading a request head. 0 means
	// ReadHeaderTimeout.
	ReadHeaderTimeout time.Duration
	// Gate is the TCP ports' accept gate (h1.Server.Gate). nil: none.
	Gate interface{ Wait() bool }
	// Logger receives handler panics and refused connections. nil
	// discards.
	Logger *slog.Logger
}

// Server serves queue's request chain to clients.
type Server struct {
	h1 *h1.Server
	h2 *h2.Server
	h3 *h3.Server
}

// New returns a Server for cfg.
func New(cfg Config) (*Server, error) {
	if cfg.Handler == nil {
		return nil, errors.New("ingress: no handler")
	}
	timeout := cfg.ReadHeaderTimeout
	if timeout <= 0 {
		timeout = ReadHeaderTimeout
	}
	s := &Server{}
	s.h2 = &h2.Server{
		Handler:           cfg.Handler,
		ReadHeaderTimeout: timeout,
		IdleTimeout:       IdleTimeout,
		Logger:            cfg.Logger,
	}
	s.h3 = &h3.Server{
		Handler:           cfg.Handler,
		ReadHeaderTimeout: timeout,
		IdleTimeout:       IdleTimeout,
		MaxConns:          cfg.MaxConns,
		Logger:            cfg.Logger,
	}
	upgrade := &H2CUpgrade{
		Next: cfg.Handler,
		Serve: func(conn net.Conn, r *http.Request, settings []byte) {
			s.h2.ServeConn(conn, &h2.ConnOptions{Upgrade: r, Settings: settings})
		},
	}
	s.h1 = &h1.Server{
		Handler:           upgrade,
		H2:                func(conn net.Conn) { s.h2.ServeConn(conn, nil) },
		Limits:            h1.Limits{MaxHeadBytes: MaxHeaderBytes},
		ReadHeaderTimeout: timeout,
		IdleTimeout:       IdleTimeout,
		MaxConns:          cfg.MaxConns,
		Gate:              cfg.Gate,
		Logger:            cfg.Logger,
	}
	return s, nil
}

// Serve serves plain connections from ln (HTTP/1.1, h2c) until Shutdown
// or Close; it returns http.ErrServerClosed then.
func (s *Server) Serve(ln net.Listener) error { return s.h1.Serve(ln) }

// ServeTLS serves TLS connections from ln with cfg (ALPN h2 and
// http/1.1) until Shutdown or Close.
func (s *Server) ServeTLS(ln net.Listener, cfg *tls.Config) error { return s.h1.ServeTLS(ln, cfg) }

// ServeHTTP3 serves HTTP/3 on pc with cfg's certificates (ALPN h3) until
// Shutdown or Close, which close pc; it returns http.ErrServerClosed then.
func (s *Server) ServeHTTP3(pc net.PacketConn, cfg *tls.Config) error { return s.h3.Serve(pc, cfg) }

// Shutdown stops accepting and waits for the requests in flight and the
// HTTP/2 and HTTP/3 connections (drained with GOAWAY), upgraded h2c ones
// included, until ctx is done; then it closes what is left and returns
// ctx's error.
func (s *Server) Shutdown(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i, srv := range []interface {
		Shutdown(context.Context) error
		Close() error
	}{s.h1, s.h2, s.h3} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = srv.Shutdown(ctx); errs[i] != nil {
				srv.Close()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Glitches are the glitch counts of the serving ports since the server
// started: protocol abuse that queue counts against each connection's
// budget (h1.MaxGlitches, h2.MaxGlitches, h3.MaxGlitches).
type Glitches struct {
	// HTTP1, HTTP2 and HTTP3 count the glitches, each once whatever its
	// weight.
	HTTP1, HTTP2, HTTP3 uint64
	// HTTP1Closed, HTTP2Closed and HTTP3Closed count the connections
	// closed for going past their budget.
	HTTP1Closed, HTTP2Closed, HTTP3Closed uint64
}

// Glitches reports the serving ports' glitch counts. Safe for concurrent
// use; each count is an atomic load.
func (s *Server) Glitches() Glitches {
	var g Glitches
	g.HTTP1, g.HTTP1Closed = s.h1.Glitches()
	g.HTTP2, g.HTTP2Closed = s.h2.Glitches()
	g.HTTP3, g.HTTP3Closed = s.h3.Glitches()
	return g
}

// Close closes every listener and connection at once.
func (s *Server) Close() error {
	s.h1.Close()
	s.h2.Close()
	s.h3.Close()
	return nil
}
