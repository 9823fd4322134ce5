package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// HTTP/3 (QUIC) on the TLS port's number over UDP, with quic-go's http3
// server, into the same handler as every other protocol. The TCP TLS
// port's responses announce it (Alt-Svc). Work in progress: the limits and
// defences below are quic-go's settings as queue sets them; the load and
// attack tests, the cost and the contract's words are still to come.

// h3MaxStreams bounds the requests in flight on one HTTP/3 connection, as
// HTTP/2's MAX_CONCURRENT_STREAMS (h2.MaxConcurrentStreams) does.
const h3MaxStreams = 250

// h3IdleTimeout closes a QUIC connection idle this long.
const h3IdleTimeout = 120 * time.Second

// newHTTP3 makes the HTTP/3 server for handler on pc (the UDP socket on the
// TLS port's number), with the TLS port's configuration (its certificate and
// reload), ALPN h3, and 0-RTT off: a replayed early request could be applied
// twice, and queue does not know which are safe.
func newHTTP3(handler http.Handler, tlsConfig *tls.Config) *http3.Server {
	return &http3.Server{
		Handler:   handler,
		TLSConfig: http3.ConfigureTLSConfig(tlsConfig),
		QUICConfig: &quic.Config{
			Allow0RTT:             false,
			MaxIncomingStreams:    h3MaxStreams,
			MaxIncomingUniStreams: 8,
			MaxIdleTimeout:        h3IdleTimeout,
			HandshakeIdleTimeout:  5 * time.Second,
		},
		MaxHeaderBytes: 1 << 20,
	}
}

// listenHTTP3 opens the UDP socket on the TCP TLS listener's address.
func listenHTTP3(tlsLn net.Listener) (net.PacketConn, error) {
	pc, err := net.ListenPacket("udp", tlsLn.Addr().String())
	if err != nil {
		return nil, fmt.Errorf("listen on udp %s: %w", tlsLn.Addr(), err)
	}
	return pc, nil
}

// altSvc returns the Alt-Svc value that announces HTTP/3 on the port of
// addr, as one []string so that each response can take it without an
// allocation (its capacity is its length: an append copies it).
func altSvc(addr net.Addr) []string {
	port := addr.(*net.UDPAddr).Port
	v := `h3=":` + strconv.Itoa(port) + `"; ma=86400`
	return []string{v}[:1:1]
}

// altSvcHandler makes responses to requests over TCP TLS carry Alt-Svc for
// HTTP/3 (RFC 7838); plain-port and HTTP/3 responses do not. value is set
// once, before serving starts, when the UDP socket is open; nil: none.
type altSvcHandler struct {
	next  http.Handler
	value []string
}

func (a *altSvcHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if a.value != nil && r.TLS != nil && r.ProtoMajor < 3 {
		w.Header()["Alt-Svc"] = a.value
	}
	a.next.ServeHTTP(w, r)
}

// shutdownHTTP3 ends the HTTP/3 server as the drain ends the others: GOAWAY,
// then the requests in flight until ctx is done.
func shutdownHTTP3(ctx context.Context, s *http3.Server) error {
	return s.Shutdown(ctx)
}
