package ingress

import (
	"bufio"
	"encoding/base64"
	"net"
	"net/http"
	"strings"

	"github.com/queue-dev/queue/headers"
	"golang.org/x/net/http/httpguts"
)

// H2CUpgrade serves HTTP/2 over cleartext reached by "Upgrade: h2c" (RFC
// 7540 section 3.2) on an HTTP/1.1 connection, on any method: it takes the
// connection over, answers 101 and hands it to Serve, which serves the
// upgrading request as stream 1 and the rest of the connection.
//
// A request with a body is served over HTTP/1.1 instead: upgrading it would
// mean holding the whole body in memory first, and RFC 7540 lets a server
// ignore the upgrade. Upgrade and HTTP2-Settings never reach the upstream
// either way (see headers.Outbound.Forward).
type H2CUpgrade struct {
	// Next serves every request, upgraded or not. Required.
	Next http.Handler
	// Serve serves an upgraded connection until it ends: r is the
	// upgrading request, settings its decoded HTTP2-Settings. Required.
	// The HTTP/1.1 server's Shutdown does not wait for the upgraded
	// connections (they were hijacked): Serve's server must.
	Serve func(conn net.Conn, r *http.Request, settings []byte)
}

// ServeHTTP upgrades r's connection when r asks for h2c, else calls Next.
func (u *H2CUpgrade) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// One map lookup on the common path.
	if up, ok := r.Header[headers.Upgrade]; !ok || r.ProtoMajor != 1 || !httpguts.HeaderValuesContainsToken(up, "h2c") {
		u.Next.ServeHTTP(w, r)
		return
	}
	settings, ok := h2cSettings(r)
	if !ok {
		u.Next.ServeHTTP(w, r)
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		u.Next.ServeHTTP(w, r)
		return
	}
	if _, err := brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n"); err != nil || brw.Flush() != nil {
		conn.Close()
		return
	}
	for _, k := range [...]string{headers.Upgrade, headers.HTTP2Settings, headers.Connection} {
		delete(r.Header, k)
	}
	if brw.Reader.Buffered() > 0 {
		conn = &bufferedConn{Conn: conn, r: brw.Reader}
	}
	u.Serve(conn, r, settings)
}

// h2cSettings checks the rest of an upgrade request: no body, Connection
// naming Upgrade and HTTP2-Settings, and exactly one HTTP2-Settings value in
// base64url (RFC 7540 section 3.2.1).
func h2cSettings(r *http.Request) ([]byte, bool) {
	if r.ContentLength != 0 || (r.Body != nil && r.Body != http.NoBody && r.ContentLength < 0) {
		return nil, false
	}
	conn := r.Header[headers.Connection]
	if !httpguts.HeaderValuesContainsToken(conn, "upgrade") || !httpguts.HeaderValuesContainsToken(conn, "http2-settings") {
		return nil, false
	}
	v := r.Header[headers.HTTP2Settings]
	if len(v) != 1 {
		return nil, false
	}
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(v[0], "="))
	if err != nil || len(b)%6 != 0 {
		return nil, false
	}
	return b, true
}

// bufferedConn reads what the HTTP/1.1 server had already buffered (the
// client may send its preface right behind the upgrade request) before
// reading the connection itself.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
