// Package peer carries a client connection's address, parsed once for the
// connection's life, in the context of every request on it: queue's
// engines (h1, h2) put it there and the proxy reads it for the forwarding
// fields, without parsing r.RemoteAddr for every request.
package peer

import (
	"context"
	"net/http"
	"net/netip"
)

// key is the context key of a connection's parsed remote address.
type key struct{}

// With returns ctx carrying ap as the client address that From reports
// for requests whose context derives from it.
func With(ctx context.Context, ap netip.AddrPort) context.Context {
	return context.WithValue(ctx, key{}, ap)
}

// From returns the client address of a request served by one of queue's
// engines. ok is false for other requests.
func From(r *http.Request) (ap netip.AddrPort, ok bool) {
	ap, ok = r.Context().Value(key{}).(netip.AddrPort)
	return ap, ok
}
