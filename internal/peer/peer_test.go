package peer

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
)

// otherKey is a context key of another package's.
type otherKey struct{}

// TestWithFrom: the address With puts in a context is what From reports,
// exactly (IPv4, IPv6, IPv4-mapped IPv6 and zoned addresses alike), for a
// request whose context is that one or derives from it (canceled,
// carrying other values, replaced by WithContext or Clone with a derived
// one).
func TestWithFrom(t *testing.T) {
	for _, s := range []string{"192.0.2.1:1234", "[2001:db8::1]:443", "[::ffff:192.0.2.1]:80", "[fe80::1%eth0]:8080", "127.0.0.1:0"} {
		ap := netip.MustParseAddrPort(s)
		ctx := With(context.Background(), ap)
		r := httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx)
		canceled, cancel := context.WithCancel(ctx)
		cancel()
		for _, tt := range []struct {
			how string
			r   *http.Request
		}{
			{"the request's context", r},
			{"a canceled context derived from it", r.WithContext(canceled)},
			{"a context with another value", r.WithContext(context.WithValue(ctx, otherKey{}, netip.MustParseAddrPort("198.51.100.1:1")))},
			{"a clone", r.Clone(context.WithoutCancel(ctx))},
		} {
			got, ok := From(tt.r)
			if !ok || got != ap {
				t.Errorf("%s, %s: From = %v, %v, want %v, true", s, tt.how, got, ok, ap)
			}
		}
	}
}

// TestFromOthers: From reports no address (ok false, the zero AddrPort)
// for a request whose context carries none, whatever else it carries, nor
// for a request net/http parsed, whose RemoteAddr alone is not read.
func TestFromOthers(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "192.0.2.1:1234"
	ctx := context.WithValue(context.Background(), otherKey{}, netip.MustParseAddrPort("192.0.2.1:1234"))
	for _, tt := range []struct {
		how string
		r   *http.Request
	}{
		{"a request with RemoteAddr alone", r},
		{"a context with an AddrPort under another key", r.WithContext(ctx)},
	} {
		if got, ok := From(tt.r); ok || got != (netip.AddrPort{}) {
			t.Errorf("%s: From = %v, %v, want the zero AddrPort, false", tt.how, got, ok)
		}
	}
}

// TestWithInnermost: a context that got With twice reports the address of
// the later call, as a connection's address replaces what a context it
// derives from carried.
func TestWithInnermost(t *testing.T) {
	outer := netip.MustParseAddrPort("192.0.2.1:1")
	inner := netip.MustParseAddrPort("[2001:db8::2]:2")
	ctx := With(With(context.Background(), outer), inner)
	r := httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx)
	if got, ok := From(r); !ok || got != inner {
		t.Errorf("From = %v, %v, want %v, true", got, ok, inner)
	}
}
