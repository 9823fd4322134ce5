//lint:file-ignore SA1019 net/http serves h2c only with prior knowledge; "Upgrade: h2c" (docs/contract.md section 1.2) still needs x/net's ServeConn with UpgradeRequest.

package proxy

import (
	"bufio"
	"context"
	"encoding/base64"
	"net"
	"net/http"
	"strings"
	"sync"

	"github.com/queue-dev/queue/headers"
	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
)

// H2CUpgrade serves HTTP/2 over cleartext reached by "Upgrade: h2c" (RFC
// 7540 section 3.2) on an HTTP/1.1 connection, on any method. net/http's
// server speaks h2c only with prior knowledge; this handler takes the
// connection over, answers 101 and hands it to golang.org/x/net/http2, which
// serves the upgrading request as stream 1 and the rest of the connection
// through Next.
//
// A request with a body is served over HTTP/1.1 instead: upgrading it would
// mean holding the whole body in memory first, and RFC 7540 lets a server
// ignore the upgrade. Upgrade and HTTP2-Settings never reach the upstream
// either way (see headers.Outbound.Forward).
type H2CUpgrade struct {
	// Next serves every request, upgraded or not. Required.
	Next http.Handler
	// H2 serves the upgraded connections. Required.
	H2 *http2.Server
	// Base is the HTTP/1.1 server the connections came from; its timeouts,
	// limits and ErrorLog apply to the upgraded connections. Required.
	Base *http.Server

	active sync.WaitGroup
}

// Wait blocks until every upgraded connection has ended or ctx is done.
// net/http's Shutdown does not wait for them: they were hijacked.
func (u *H2CUpgrade) Wait(ctx context.Context) error { return wait(ctx, &u.active) }

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
	u.active.Add(1)
	defer u.active.Done()
	u.H2.ServeConn(conn, &http2.ServeConnOpts{
		Context:        r.Context(),
		BaseConfig:     u.Base,
		Handler:        u.Next,
		UpgradeRequest: r,
		Settings:       settings,
	})
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
