//lint:file-ignore SA1019 x/net's http2.Server serves the connections that "Upgrade: h2c" hands over (see proxy.H2CUpgrade); ConfigureServer gives those connections a GOAWAY on drain.

// Package ingress is queue's client-facing server: the HTTP/1.1 engine
// (package h1) on the serving and TLS ports, with HTTP/2 connections (h2c
// prior knowledge, ALPN h2, and "Upgrade: h2c") handed to net/http's HTTP/2
// server. cmd/queue, its tests and bench/ all serve through it, so that
// what is measured is what runs.
//
// A *Server is safe for concurrent use once New has returned.
package ingress

import (
	"context"
	"crypto/tls"
	"errors"
	"log"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/queue-dev/queue/h1"
	"github.com/queue-dev/queue/proxy"
	"golang.org/x/net/http2"
)

// Limits of the client-facing servers. They are not flags: they bound
// hostile clients and no honest one comes near them.
const (
	// ReadHeaderTimeout cuts a client that sends its request head slowly
	// (slowloris), unless Config sets another.
	ReadHeaderTimeout = 10 * time.Second
	// IdleTimeout closes keep-alive connections idle this long. It is above
	// the 90 s that Go's and Envoy's clients keep idle connections, so that
	// the client, not queue, closes first and no request races a close.
	IdleTimeout = 120 * time.Second
	// MaxHeaderBytes is the request head limit; over it, 431.
	MaxHeaderBytes = 64 << 10
	// MaxConcurrentStreams per HTTP/2 connection.
	MaxConcurrentStreams = 250
	// maxFrameSize is the protocol's default frame size (RFC 9113 section
	// 4.2): a larger frame is a FRAME_SIZE_ERROR (h2spec 4.2/3) and no peer
	// can make queue buffer a 1 MiB frame (net/http's default).
	maxFrameSize = 16 << 10
)

// Config configures a Server. The zero value of each field is documented.
type Config struct {
	// Handler serves every request, HTTP/1.1 and HTTP/2 alike. Required.
	Handler http.Handler
	// MaxConns bounds the open client connections over every port. 0
	// means no bound.
	MaxConns int
	// ReadHeaderTimeout bounds reading a request head. 0 means
	// ReadHeaderTimeout.
	ReadHeaderTimeout time.Duration
	// Logger receives handler panics and refused connections. nil
	// discards.
	Logger *slog.Logger
	// ErrorLog receives net/http's HTTP/2 server errors. nil discards.
	ErrorLog *log.Logger
}

// Server serves queue's request chain to clients.
type Server struct {
	h1         *h1.Server
	h2         *http.Server
	handoff    *h1.Handoff
	upgrade    *proxy.H2CUpgrade
	h2Shutdown *http.Server // fronts upgraded h2c connections for GOAWAY on drain

	h2Once sync.Once
	h2Err  chan error
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
	errLog := cfg.ErrorLog
	if errLog == nil {
		errLog = log.New(discardWriter{}, "", 0)
	}
	var p http.Protocols
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	s := &Server{h2Err: make(chan error, 1)}
	s.h2 = &http.Server{
		Handler:           cfg.Handler,
		Protocols:         &p,
		ReadHeaderTimeout: timeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams: MaxConcurrentStreams,
			MaxReadFrameSize:     maxFrameSize,
		},
		ErrorLog: errLog,
	}
	s.upgrade = &proxy.H2CUpgrade{
		Next: cfg.Handler,
		H2: &http2.Server{
			MaxConcurrentStreams: MaxConcurrentStreams,
			IdleTimeout:          IdleTimeout,
			MaxReadFrameSize:     maxFrameSize,
		},
		Base: s.h2,
	}
	s.h2Shutdown = &http.Server{}
	if err := http2.ConfigureServer(s.h2Shutdown, s.upgrade.H2); err != nil {
		return nil, err
	}
	s.handoff = h1.NewHandoff(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	s.h1 = &h1.Server{
		Handler:           s.upgrade,
		H2:                s.handoff.Give,
		Limits:            h1.Limits{MaxHeadBytes: MaxHeaderBytes},
		ReadHeaderTimeout: timeout,
		IdleTimeout:       IdleTimeout,
		MaxConns:          cfg.MaxConns,
		Logger:            cfg.Logger,
	}
	return s, nil
}

type discardWriter struct{}

func (discardWriter) Write(p []byte) (int, error) { return len(p), nil }

// startH2 runs the HTTP/2 server on the handed-over connections, once.
func (s *Server) startH2() {
	s.h2Once.Do(func() {
		go func() { s.h2Err <- s.h2.Serve(s.handoff) }()
	})
}

// Serve serves plain connections from ln (HTTP/1.1, h2c) until Shutdown
// or Close; it returns http.ErrServerClosed then.
func (s *Server) Serve(ln net.Listener) error {
	s.startH2()
	return s.h1.Serve(ln)
}

// ServeTLS serves TLS connections from ln with cfg (ALPN h2 and
// http/1.1) until Shutdown or Close.
func (s *Server) ServeTLS(ln net.Listener, cfg *tls.Config) error {
	s.startH2()
	return s.h1.ServeTLS(ln, cfg)
}

// Shutdown stops accepting and waits for the requests in flight, the
// HTTP/2 connections (sent GOAWAY) and the upgraded h2c connections, until
// ctx is done; then it closes what is left and returns ctx's error.
func (s *Server) Shutdown(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i, srv := range []interface {
		Shutdown(context.Context) error
		Close() error
	}{s.h1, s.h2, s.h2Shutdown} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = srv.Shutdown(ctx); errs[i] != nil {
				srv.Close()
			}
		}()
	}
	wg.Wait()
	s.handoff.Close()
	if err := s.upgrade.Wait(ctx); err != nil {
		return errUpgraded
	}
	return errors.Join(errs...)
}

// errUpgraded reports upgraded h2c connections cut at the drain timeout.
var errUpgraded = errors.New("upgraded h2c connections cut at drain timeout")

// Close closes every listener and connection at once.
func (s *Server) Close() error {
	s.h1.Close()
	s.h2.Close()
	s.h2Shutdown.Close()
	s.handoff.Close()
	return nil
}
