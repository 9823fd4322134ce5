package main

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
)

// HTTP/3 (QUIC) on the TLS port's number over UDP, served by the ingress
// (package h3) into the same handler as every other protocol. The TCP TLS
// port's responses announce it (Alt-Svc).

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
