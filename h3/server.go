package h3

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/queue-dev/queue/internal/clock"
	"github.com/queue-dev/queue/internal/conns"
	"github.com/queue-dev/queue/internal/peer"
	"github.com/queue-dev/queue/internal/workers"
)

// Server serves HTTP/3 on a UDP socket. Set the fields before Serve; they
// must not change afterwards.
type Server struct {
	// Handler serves every request. Required. The *http.Request, its
	// header map and body, and the ResponseWriter are reused for a later
	// request once ServeHTTP returned: a handler must not keep them.
	Handler http.Handler
	// ReadHeaderTimeout bounds the wait for a request stream's HEADERS
	// frame. 0 means clock.DefaultReadHeaderTimeout.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes a QUIC connection that carried no packet for this
	// long (QUIC's idle timeout). 0 means clock.DefaultIdleTimeout.
	IdleTimeout time.Duration
	// WriteTimeout fails a response write that waits longer than this for
	// the client's flow control. 0 means WriteTimeout (limits.go).
	WriteTimeout time.Duration
	// MaxConns bounds the QUIC connections open at once: one past it is
	// closed as soon as its handshake ends (H3_EXCESSIVE_LOAD). 0: no
	// bound.
	MaxConns int
	// Logger receives handler panics (warn) and connection errors
	// (debug). nil discards.
	Logger *slog.Logger

	conns conns.Set[*conn]
	mu    sync.Mutex // for tr and ln
	tr    *quic.Transport
	ln    *quic.Listener

	glitches     atomic.Uint64
	glitchCloses atomic.Uint64

	retry   retryGate
	workers workers.Pool[*stream]
}

// Glitches reports the glitches (MaxGlitches) the server's connections
// counted, each once whatever its weight, and how many connections it
// closed for going past their budget.
func (s *Server) Glitches() (glitches, closed uint64) {
	return s.glitches.Load(), s.glitchCloses.Load()
}

func (s *Server) logger() *slog.Logger {
	if s.Logger == nil {
		return discard
	}
	return s.Logger
}

var discard = slog.New(slog.DiscardHandler)

// Serve serves HTTP/3 on pc, with tlsConfig's certificates (ALPN h3, TLS
// 1.3) until Shutdown or Close, which close pc.
func (s *Server) Serve(pc net.PacketConn, tlsConfig *tls.Config) error {
	reset, token := keys(tlsConfig)
	tr := &quic.Transport{
		Conn:                pc,
		StatelessResetKey:   &reset,
		TokenGeneratorKey:   &token,
		VerifySourceAddress: s.retry.verify,
		ConnContext: func(ctx context.Context, info *quic.ClientInfo) (context.Context, error) {
			if a, ok := info.RemoteAddr.(*net.UDPAddr); ok {
				ctx = peer.With(ctx, netip.AddrPortFrom(unmap(a.AddrPort().Addr()), a.AddrPort().Port()))
			}
			return ctx, nil
		},
	}
	tc := tlsConfig.Clone()
	tc.NextProtos = []string{"h3"}
	tc.MinVersion = tls.VersionTLS13
	ln, err := tr.Listen(tc, s.quicConfig())
	if err != nil {
		tr.Close()
		return err
	}
	s.mu.Lock()
	if s.conns.ShuttingDown() {
		s.mu.Unlock()
		ln.Close()
		tr.Close()
		return http.ErrServerClosed
	}
	s.tr, s.ln = tr, ln
	s.mu.Unlock()
	for {
		qc, err := ln.Accept(context.Background())
		if err != nil {
			if s.conns.ShuttingDown() {
				return http.ErrServerClosed
			}
			return err
		}
		c := newConn(s, qc)
		if !s.conns.Add(c, s.MaxConns) {
			qc.CloseWithError(quic.ApplicationErrorCode(errExcessiveLoad), "")
			continue
		}
		go c.serve()
	}
}

func unmap(a netip.Addr) netip.Addr { return a.Unmap() }

// keys derives the stateless-reset key and the address-validation token
// key from the serving certificate's private key, so that a queue that
// restarted on the same port with the same certificate answers the
// packets of its predecessor's connections with a stateless reset the
// client recognises (RFC 9000 section 10.3: the client stops at once
// instead of waiting out its idle timeout), and takes the tokens its
// predecessor issued. Without a key to derive from, both are random.
func keys(c *tls.Config) (reset quic.StatelessResetKey, token quic.TokenGeneratorKey) {
	var der []byte
	var cert *tls.Certificate
	if c.GetCertificate != nil {
		cert, _ = c.GetCertificate(&tls.ClientHelloInfo{})
	} else if len(c.Certificates) > 0 {
		cert = &c.Certificates[0]
	}
	if cert != nil && cert.PrivateKey != nil {
		der, _ = x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	}
	if der == nil {
		rand.Read(reset[:])
		rand.Read(token[:])
		return reset, token
	}
	reset = sha256.Sum256(append([]byte("queue h3 stateless reset\x00"), der...))
	token = sha256.Sum256(append([]byte("queue h3 address token\x00"), der...))
	return reset, token
}

func (s *Server) writeTimeout() time.Duration {
	if s.WriteTimeout > 0 {
		return s.WriteTimeout
	}
	return WriteTimeout
}

// quicConfig is the transport's configuration: the limits of limits.go.
func (s *Server) quicConfig() *quic.Config {
	return &quic.Config{
		// 0-RTT stays off: a replayed early request could be applied
		// twice, and queue does not know which requests are safe.
		Allow0RTT:                      false,
		HandshakeIdleTimeout:           HandshakeTimeout,
		MaxIdleTimeout:                 s.idleTimeout(),
		MaxIncomingStreams:             MaxConcurrentStreams,
		MaxIncomingUniStreams:          MaxUniStreams,
		InitialStreamReceiveWindow:     StreamWindow,
		MaxStreamReceiveWindow:         StreamWindow,
		InitialConnectionReceiveWindow: ConnWindow,
		MaxConnectionReceiveWindow:     ConnWindow,
	}
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

// Shutdown stops accepting connections, sends GOAWAY on every connection
// and waits for their requests in flight, then closes the socket. When
// ctx is done first, it closes what is left (Close) and returns ctx.Err.
func (s *Server) Shutdown(ctx context.Context) error {
	conns, done := s.conns.Shutdown()
	s.mu.Lock()
	ln := s.ln
	s.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	for _, c := range conns {
		c.drain()
	}
	select {
	case <-done:
		s.closeTransport()
		return nil
	case <-ctx.Done():
		s.Close()
		return ctx.Err()
	}
}

// Close closes every connection and the socket at once.
func (s *Server) Close() error {
	for _, c := range s.conns.Close() {
		c.qc.CloseWithError(quic.ApplicationErrorCode(errNoError), "")
	}
	s.closeTransport()
	s.workers.StopIdle()
	return nil
}

func (s *Server) closeTransport() {
	s.mu.Lock()
	tr, ln := s.tr, s.ln
	s.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	if tr != nil {
		tr.Close()
		tr.Conn.Close()
	}
}

// retryGate asks for address validation (a Retry) once more than
// RetryAbove handshakes began within the current second.
type retryGate struct {
	mu     sync.Mutex
	window time.Duration // the counting window; 0 is a second (tests set a longer one)
	start  time.Time
	n      int
}

func (g *retryGate) verify(net.Addr) bool {
	now := time.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	window := g.window
	if window == 0 {
		window = time.Second
	}
	if now.Sub(g.start) >= window {
		g.start, g.n = now, 0
	}
	g.n++
	return g.n > RetryAbove
}
