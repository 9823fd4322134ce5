package h1

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
)

// The pieces of the HTTP/1.1 engine that queue's HTTP/2 engine (package
// h2) shares with it, so that both read a target, check a field name's
// characters, format a Date and carry the client's address the same way.

// Refuser is implemented by the response writers of queue's engines, this
// package's and package h2's. A handler that answers a request with a 4xx
// of queue's own making, which the upstream never sees, calls Refuse
// before it writes the response: the connection counts the request against
// its glitch budget (MaxGlitches here, h2.MaxGlitches on HTTP/2), so that a
// client whose requests queue refuses again and again loses its
// connection. A handler finds it through the wrappers of the layers in
// front of it (Unwrap).
type Refuser interface{ Refuse() }

// WithPeer returns ctx carrying ap as the client address that Peer reports
// for requests whose context derives from it.
func WithPeer(ctx context.Context, ap netip.AddrPort) context.Context {
	return context.WithValue(ctx, peerKey{}, ap)
}

// SetTarget fills u from an origin-form target ("/path?query") as the
// engine does for a request line: without allocating unless the path has
// percent-escapes. It reports false for a target that is not origin-form
// or does not unescape.
func SetTarget(u *url.URL, target string) bool {
	if target == "" || target[0] != '/' {
		return false
	}
	*u = url.URL{}
	return setOrigin(u, target) == nil
}

// ParseDigits reads a Content-Length of 1 to 18 decimal digits and
// nothing else.
func ParseDigits(v string) (int64, bool) { return parseDigits(v) }

// AppendTrailerKeys appends the fields a response's Trailer field
// declares, as canonical keys: the fields the engines send as trailers
// from the header map, besides those set under http.TrailerPrefix.
func AppendTrailerKeys(dst []string, h http.Header) []string {
	for _, t := range h["Trailer"] {
		for t != "" {
			var k string
			k, t, _ = strings.Cut(t, ",")
			if k = strings.TrimSpace(k); k != "" {
				dst = append(dst, http.CanonicalHeaderKey(k))
			}
		}
	}
	return dst
}

// IsTchar reports a token character (RFC 9110 section 5.6.2), as the
// engine checks field names.
func IsTchar(c byte) bool { return isTchar(c) }

// AppendDate appends the current Date field value (RFC 9110 section
// 6.6.1), formatted once a second.
func AppendDate(b []byte) []byte { return appendDate(b) }

// NetConn returns the connection a replayed connection reads after its
// replayed bytes: a *tls.Conn for a TLS connection.
func (c *replayConn) NetConn() net.Conn { return c.Conn }

// Pending reports the replayed bytes not read yet.
func (c *replayConn) Pending() int { return len(c.buf) }
