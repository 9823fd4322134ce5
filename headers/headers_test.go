package headers

import (
	"errors"
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

var (
	peer4   = netip.MustParseAddr("10.0.0.9")
	peer6   = netip.MustParseAddr("2001:db8::1")
	peer4in = netip.MustParseAddr("::ffff:192.0.2.1")
)

// forwarding returns the four forwarding headers of an outbound request for
// merging into an expected header.
func forwarding(xff, proto, host, fwd string) http.Header {
	return http.Header{
		XForwardedFor:   {xff},
		XForwardedProto: {proto},
		XForwardedHost:  {host},
		Forwarded:       {fwd},
	}
}

func with(h http.Header, extra http.Header) http.Header {
	out := maps.Clone(extra)
	maps.Copy(out, h)
	return out
}

// TestOutbound is the table of the outbound request's header: hop-by-hop
// fields (and those Connection names) removed, the forwarding fields
// (X-Forwarded-For/-Proto/-Host, Forwarded) written from the hop, and
// extended from those of a trusted hop only, look-alikes with underscores
// dropped, K-Original-Host taken for the host; every other field exactly
// as it came.
func TestOutbound(t *testing.T) {
	t.Parallel()
	trustedHop := Hop{Peer: peer4, Trusted: true}
	// A full set of forwarding headers from a previous proxy, with look-alikes.
	inbound := func() http.Header {
		return http.Header{
			"Accept":            {"*/*"},
			XForwardedFor:       {"198.51.100.1, 10.0.0.2"},
			XForwardedProto:     {"https"},
			XForwardedHost:      {"public.example"},
			Forwarded:           {`for=198.51.100.1;proto=https;host=public.example`},
			"X_forwarded_for":   {"6.6.6.6"},
			"X-Forwarded_proto": {"gopher"},
			"x_forwarded_host":  {"evil.example"},
			"X_Forwarded_Port":  {"1"},
			"X_real_ip":         {"6.6.6.6"},
			"X_forwarded":       {"kept: not a look-alike"},
		}
	}
	tests := []struct {
		name     string
		in       http.Header
		host     string
		hop      Hop
		want     http.Header
		wantHost string
	}{
		{
			name: "plain",
			in:   http.Header{"Accept": {"*/*"}, "User-Agent": {"test"}},
			host: "example.com",
			hop:  Hop{Peer: peer4},
			want: with(http.Header{"Accept": {"*/*"}, "User-Agent": {"test"}},
				forwarding("10.0.0.9", "http", "example.com", "for=10.0.0.9;host=example.com;proto=http")),
			wantHost: "example.com",
		},
		{
			name:     "tls",
			in:       http.Header{},
			host:     "example.com",
			hop:      Hop{Peer: peer4, TLS: true},
			want:     forwarding("10.0.0.9", "https", "example.com", "for=10.0.0.9;host=example.com;proto=https"),
			wantHost: "example.com",
		},
		{
			name:     "k-original-host becomes host",
			in:       http.Header{KOriginalHost: {"orig.example"}},
			host:     "svc.ns.svc.cluster.local",
			hop:      Hop{Peer: peer4},
			want:     forwarding("10.0.0.9", "http", "orig.example", "for=10.0.0.9;host=orig.example;proto=http"),
			wantHost: "orig.example",
		},
		{
			name:     "empty k-original-host ignored and removed",
			in:       http.Header{KOriginalHost: {""}},
			host:     "example.com",
			hop:      Hop{Peer: peer4},
			want:     forwarding("10.0.0.9", "http", "example.com", "for=10.0.0.9;host=example.com;proto=http"),
			wantHost: "example.com",
		},
		{
			name: "hop-by-hop removed",
			in: http.Header{
				Connection:       {"keep-alive, X-Hop", "x-other-hop"},
				"X-Hop":          {"1"},
				"X-Other-Hop":    {"2"},
				KeepAlive:        {"timeout=5"},
				ProxyConnection:  {"keep-alive"},
				TE:               {"gzip"},
				TransferEncoding: {"chunked"},
				Upgrade:          {"foo/2"},
				HTTP2Settings:    {"AAMAAABkAAQAAP__"},
				ContentLength:    {"3"},
				Expect:           {"100-continue"},
				"X-End-To-End":   {"3"},
			},
			host:     "example.com",
			hop:      Hop{Peer: peer4},
			want:     with(http.Header{"X-End-To-End": {"3"}}, forwarding("10.0.0.9", "http", "example.com", "for=10.0.0.9;host=example.com;proto=http")),
			wantHost: "example.com",
		},
		{
			name:     "te trailers kept",
			in:       http.Header{TE: {"deflate, trailers"}, Connection: {"TE"}},
			host:     "example.com",
			hop:      Hop{Peer: peer4},
			want:     with(http.Header{TE: {"trailers"}}, forwarding("10.0.0.9", "http", "example.com", "for=10.0.0.9;host=example.com;proto=http")),
			wantHost: "example.com",
		},
		{
			name:     "te without trailers removed",
			in:       http.Header{TE: {"gzip, deflate"}},
			host:     "example.com",
			hop:      Hop{Peer: peer4},
			want:     forwarding("10.0.0.9", "http", "example.com", "for=10.0.0.9;host=example.com;proto=http"),
			wantHost: "example.com",
		},
		{
			name: "websocket upgrade kept",
			in: http.Header{
				Connection:              {"keep-alive, Upgrade"},
				Upgrade:                 {"WebSocket"},
				"Sec-Websocket-Key":     {"dGhlIHNhbXBsZSBub25jZQ=="},
				"Sec-Websocket-Version": {"13"},
			},
			host: "example.com",
			hop:  Hop{Peer: peer4},
			want: with(http.Header{
				Connection:              {"Upgrade"},
				Upgrade:                 {"websocket"},
				"Sec-Websocket-Key":     {"dGhlIHNhbXBsZSBub25jZQ=="},
				"Sec-Websocket-Version": {"13"},
			}, forwarding("10.0.0.9", "http", "example.com", "for=10.0.0.9;host=example.com;proto=http")),
			wantHost: "example.com",
		},
		{
			name:     "websocket without connection upgrade removed",
			in:       http.Header{Upgrade: {"websocket"}},
			host:     "example.com",
			hop:      Hop{Peer: peer4},
			want:     forwarding("10.0.0.9", "http", "example.com", "for=10.0.0.9;host=example.com;proto=http"),
			wantHost: "example.com",
		},
		{
			name:     "h2c upgrade never forwarded",
			in:       http.Header{Connection: {"Upgrade, HTTP2-Settings"}, Upgrade: {"h2c"}, HTTP2Settings: {"AAMAAABkAAQAAP__"}},
			host:     "example.com",
			hop:      Hop{Peer: peer4},
			want:     forwarding("10.0.0.9", "http", "example.com", "for=10.0.0.9;host=example.com;proto=http"),
			wantHost: "example.com",
		},
		{
			name:     "h2c dropped from an upgrade list with websocket",
			in:       http.Header{Connection: {"Upgrade"}, Upgrade: {"h2c, websocket"}},
			host:     "example.com",
			hop:      Hop{Peer: peer4},
			want:     with(http.Header{Connection: {"Upgrade"}, Upgrade: {"websocket"}}, forwarding("10.0.0.9", "http", "example.com", "for=10.0.0.9;host=example.com;proto=http")),
			wantHost: "example.com",
		},
		{
			name:     "knative headers removed",
			in:       http.Header{KnativeServingRevision: {"rev-1"}, KnativeServingNamespace: {"ns"}, "Knative-Other": {"x"}},
			host:     "example.com",
			hop:      Hop{Peer: peer4},
			want:     with(http.Header{"Knative-Other": {"x"}}, forwarding("10.0.0.9", "http", "example.com", "for=10.0.0.9;host=example.com;proto=http")),
			wantHost: "example.com",
		},
		{
			name: "trusted peer keeps forwarding headers",
			in:   inbound(),
			host: "example.com",
			hop:  trustedHop,
			want: with(http.Header{"Accept": {"*/*"}, "X_forwarded": {"kept: not a look-alike"}},
				forwarding("198.51.100.1, 10.0.0.2, 10.0.0.9", "https", "public.example",
					"for=198.51.100.1;proto=https;host=public.example, for=10.0.0.9;host=example.com;proto=http")),
			wantHost: "example.com",
		},
		{
			name: "untrusted peer drops forwarding headers and look-alikes",
			in:   inbound(),
			host: "example.com",
			hop:  Hop{Peer: peer4},
			want: with(http.Header{"Accept": {"*/*"}, "X_forwarded": {"kept: not a look-alike"}},
				forwarding("10.0.0.9", "http", "example.com", "for=10.0.0.9;host=example.com;proto=http")),
			wantHost: "example.com",
		},
		{
			name:     "untrusted tls peer",
			in:       inbound(),
			host:     "example.com",
			hop:      Hop{Peer: peer4, TLS: true},
			want:     with(http.Header{"Accept": {"*/*"}, "X_forwarded": {"kept: not a look-alike"}}, forwarding("10.0.0.9", "https", "example.com", "for=10.0.0.9;host=example.com;proto=https")),
			wantHost: "example.com",
		},
		{
			name:     "several xff lines joined",
			in:       http.Header{XForwardedFor: {" 198.51.100.1 ", "", "198.51.100.2,198.51.100.3"}, Forwarded: {"for=x"}},
			host:     "example.com",
			hop:      trustedHop,
			want:     forwarding("198.51.100.1, 198.51.100.2,198.51.100.3, 10.0.0.9", "http", "example.com", "for=x, for=10.0.0.9;host=example.com;proto=http"),
			wantHost: "example.com",
		},
		{
			name:     "several forwarded lines joined",
			in:       http.Header{Forwarded: {"for=a", " ", "for=b;proto=https, for=c"}},
			host:     "example.com",
			hop:      trustedHop,
			want:     forwarding("10.0.0.9", "http", "example.com", "for=a, for=b;proto=https, for=c, for=10.0.0.9;host=example.com;proto=http"),
			wantHost: "example.com",
		},
		{
			name: "forwarded built from x-forwarded",
			in: http.Header{
				XForwardedFor:   {"198.51.100.1, 2001:db8::7", "unknown"},
				XForwardedProto: {"https"},
				XForwardedHost:  {"public.example"},
			},
			host: "example.com",
			hop:  trustedHop,
			want: forwarding("198.51.100.1, 2001:db8::7, unknown, 10.0.0.9", "https", "public.example",
				`for=198.51.100.1;host=public.example;proto=https, for="[2001:db8::7]", for=unknown, for=10.0.0.9;host=example.com;proto=http`),
			wantHost: "example.com",
		},
		{
			name: "forwarded built from x-forwarded when forwarded is blank",
			in:   http.Header{XForwardedFor: {"198.51.100.1"}, Forwarded: {"  "}},
			host: "example.com",
			hop:  trustedHop,
			want: forwarding("198.51.100.1, 10.0.0.9", "http", "example.com",
				`for=198.51.100.1, for=10.0.0.9;host=example.com;proto=http`),
			wantHost: "example.com",
		},
		{
			name: "forwarded from xff nodes with ports, mapped and bracketed",
			in:   http.Header{XForwardedFor: {"198.51.100.1:4711, [2001:db8::7]:80, ::ffff:198.51.100.2, [2001:db8::8], [::ffff:198.51.100.3]:8080"}},
			host: "example.com",
			hop:  trustedHop,
			want: forwarding("198.51.100.1:4711, [2001:db8::7]:80, ::ffff:198.51.100.2, [2001:db8::8], [::ffff:198.51.100.3]:8080, 10.0.0.9", "http", "example.com",
				`for="198.51.100.1:4711", for="[2001:db8::7]:80", for=198.51.100.2, for="[2001:db8::8]", for="198.51.100.3:8080", for=10.0.0.9;host=example.com;proto=http`),
			wantHost: "example.com",
		},
		{
			name: "forwarded from xff nodes that are no addresses",
			in:   http.Header{XForwardedFor: {`_hidden, foo bar, a"b, ,`}},
			host: "example.com",
			hop:  trustedHop,
			want: forwarding(`_hidden, foo bar, a"b, ,, 10.0.0.9`, "http", "example.com",
				`for=_hidden, for="foo bar", for="a\"b", for=10.0.0.9;host=example.com;proto=http`),
			wantHost: "example.com",
		},
		{
			name: "forwarded from x-forwarded-host and -proto alone",
			in:   http.Header{XForwardedProto: {"https"}, XForwardedHost: {"public.example:8443"}},
			host: "example.com",
			hop:  trustedHop,
			want: forwarding("10.0.0.9", "https", "public.example:8443",
				`host="public.example:8443";proto=https, for=10.0.0.9;host=example.com;proto=http`),
			wantHost: "example.com",
		},
		{
			name: "forwarded from x-forwarded-proto alone",
			in:   http.Header{XForwardedProto: {"https"}},
			host: "example.com",
			hop:  trustedHop,
			want: forwarding("10.0.0.9", "https", "example.com",
				`proto=https, for=10.0.0.9;host=example.com;proto=http`),
			wantHost: "example.com",
		},
		{
			name:     "ipv6 peer",
			in:       http.Header{},
			host:     "example.com",
			hop:      Hop{Peer: peer6},
			want:     forwarding("2001:db8::1", "http", "example.com", `for="[2001:db8::1]";host=example.com;proto=http`),
			wantHost: "example.com",
		},
		{
			name:     "ipv6 peer with zone",
			in:       http.Header{},
			host:     "example.com",
			hop:      Hop{Peer: netip.MustParseAddr("fe80::1%eth0")},
			want:     forwarding("fe80::1", "http", "example.com", `for="[fe80::1]";host=example.com;proto=http`),
			wantHost: "example.com",
		},
		{
			name:     "ipv4-mapped peer shown as ipv4",
			in:       http.Header{},
			host:     "example.com",
			hop:      Hop{Peer: peer4in},
			want:     forwarding("192.0.2.1", "http", "example.com", `for=192.0.2.1;host=example.com;proto=http`),
			wantHost: "example.com",
		},
		{
			name:     "unknown peer",
			in:       http.Header{},
			host:     "example.com",
			hop:      Hop{},
			want:     forwarding("unknown", "http", "example.com", `for=unknown;host=example.com;proto=http`),
			wantHost: "example.com",
		},
		{
			name:     "host with port quoted",
			in:       http.Header{},
			host:     "example.com:8080",
			hop:      Hop{Peer: peer4},
			want:     forwarding("10.0.0.9", "http", "example.com:8080", `for=10.0.0.9;host="example.com:8080";proto=http`),
			wantHost: "example.com:8080",
		},
		{
			name:     "ipv6 host quoted",
			in:       http.Header{},
			host:     "[2001:db8::2]:8080",
			hop:      Hop{Peer: peer4},
			want:     forwarding("10.0.0.9", "http", "[2001:db8::2]:8080", `for=10.0.0.9;host="[2001:db8::2]:8080";proto=http`),
			wantHost: "[2001:db8::2]:8080",
		},
		{
			name:     "quote and backslash escaped",
			in:       http.Header{XForwardedHost: {`a"b\c`}},
			host:     "example.com",
			hop:      trustedHop,
			want:     forwarding("10.0.0.9", "http", `a"b\c`, `host="a\"b\\c", for=10.0.0.9;host=example.com;proto=http`),
			wantHost: "example.com",
		},
		{
			name:     "empty host quoted",
			in:       http.Header{},
			host:     "",
			hop:      Hop{Peer: peer4},
			want:     forwarding("10.0.0.9", "http", "", `for=10.0.0.9;host="";proto=http`),
			wantHost: "",
		},
		{
			name: "trace context untouched",
			in: http.Header{
				"Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
				"Tracestate":  {"rojo=00f067aa0ba902b7", "congo=t61rcWkgMzE"},
				"Baggage":     {"userId=alice,serverNode=DF%2028"},
			},
			host: "example.com",
			hop:  Hop{Peer: peer4},
			want: with(http.Header{
				"Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
				"Tracestate":  {"rojo=00f067aa0ba902b7", "congo=t61rcWkgMzE"},
				"Baggage":     {"userId=alice,serverNode=DF%2028"},
			}, forwarding("10.0.0.9", "http", "example.com", "for=10.0.0.9;host=example.com;proto=http")),
			wantHost: "example.com",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := tt.in.Clone()
			o := NewOutbound(h, tt.host, tt.hop)
			o.Apply(h)
			if got, want := o.Host, tt.wantHost; got != want {
				t.Errorf("Host = %q, want %q", got, want)
			}
			for k, want := range tt.want {
				if got := h[k]; !slices.Equal(got, want) {
					t.Errorf("header %s = %q, want %q", k, got, want)
				}
			}
			for k, got := range h {
				if _, ok := tt.want[k]; !ok {
					t.Errorf("header %s = %q, want none", k, got)
				}
			}
		})
	}
}

// TestOutboundFields: the protocol and host the outbound request is
// forwarded for come from the hop (TLS, the request's host) or, from a
// trusted hop, from the first non-empty X-Forwarded-Proto and -Host; a
// WebSocket upgrade and "TE: trailers" are recognised.
func TestOutboundFields(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                string
		in                  http.Header
		hop                 Hop
		wantProto, wantHost string
		wantWebSocket       bool
		wantTETrailers      bool
	}{
		{name: "defaults", in: http.Header{}, hop: Hop{Peer: peer4}, wantProto: "http", wantHost: "example.com"},
		{name: "tls", in: http.Header{}, hop: Hop{Peer: peer4, TLS: true}, wantProto: "https", wantHost: "example.com"},
		{
			name:      "kept",
			in:        http.Header{XForwardedProto: {"https", "http"}, XForwardedHost: {"a.example", "b.example"}},
			hop:       Hop{Peer: peer4, Trusted: true},
			wantProto: "https", wantHost: "a.example",
		},
		{
			name:      "empty kept values fall back",
			in:        http.Header{XForwardedProto: {""}, XForwardedHost: {""}},
			hop:       Hop{Peer: peer4, TLS: true, Trusted: true},
			wantProto: "https", wantHost: "example.com",
		},
		{
			name:      "untrusted",
			in:        http.Header{XForwardedProto: {"https"}, XForwardedHost: {"a.example"}},
			hop:       Hop{Peer: peer4},
			wantProto: "http", wantHost: "example.com",
		},
		{
			name:      "websocket",
			in:        http.Header{Connection: {"upgrade"}, Upgrade: {"websocket"}},
			hop:       Hop{Peer: peer4},
			wantProto: "http", wantHost: "example.com", wantWebSocket: true,
		},
		{
			name:      "te trailers",
			in:        http.Header{TE: {"trailers"}},
			hop:       Hop{Peer: peer4},
			wantProto: "http", wantHost: "example.com", wantTETrailers: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := NewOutbound(tt.in, "example.com", tt.hop)
			if got, want := o.Proto, tt.wantProto; got != want {
				t.Errorf("Proto = %q, want %q", got, want)
			}
			if got, want := o.ForwardedHost, tt.wantHost; got != want {
				t.Errorf("ForwardedHost = %q, want %q", got, want)
			}
			if got, want := o.WebSocket, tt.wantWebSocket; got != want {
				t.Errorf("WebSocket = %v, want %v", got, want)
			}
			if got, want := o.TETrailers, tt.wantTETrailers; got != want {
				t.Errorf("TETrailers = %v, want %v", got, want)
			}
		})
	}
}

// TestForward: Forward keeps end-to-end fields and refuses the hop-by-hop
// ones (RFC 9110 section 7.6.1), those the Connection field names, the
// framing, routing and forwarding fields queue writes itself, and the
// underscore look-alikes of the forwarding fields.
func TestForward(t *testing.T) {
	t.Parallel()
	h := http.Header{Connection: {"keep-alive, X-Named", "x-also-named"}}
	o := NewOutbound(h, "example.com", Hop{Peer: peer4, Trusted: true})
	tests := []struct {
		name string
		key  string
		want bool
	}{
		{name: "end-to-end", key: "Accept", want: true},
		{name: "cookie", key: "Cookie", want: true},
		{name: "traceparent", key: "Traceparent", want: true},
		{name: "connection", key: Connection, want: false},
		{name: "keep-alive", key: KeepAlive, want: false},
		{name: "proxy-connection", key: ProxyConnection, want: false},
		{name: "te", key: TE, want: false},
		{name: "transfer-encoding", key: TransferEncoding, want: false},
		{name: "upgrade", key: Upgrade, want: false},
		{name: "http2-settings", key: HTTP2Settings, want: false},
		{name: "content-length", key: ContentLength, want: false},
		{name: "expect", key: Expect, want: false},
		{name: "host", key: "Host", want: false},
		{name: "forwarded", key: Forwarded, want: false},
		{name: "xff", key: XForwardedFor, want: false},
		{name: "xfp", key: XForwardedProto, want: false},
		{name: "xfh", key: XForwardedHost, want: false},
		{name: "k-original-host", key: KOriginalHost, want: false},
		{name: "revision", key: KnativeServingRevision, want: false},
		{name: "namespace", key: KnativeServingNamespace, want: false},
		{name: "named by connection", key: "X-Named", want: false},
		{name: "named by second connection line", key: "X-Also-Named", want: false},
		{name: "prefix of a named header", key: "X-Name", want: true},
		{name: "look-alike xff", key: "X_Forwarded_For", want: false},
		{name: "look-alike xff mixed", key: "X-Forwarded_For", want: false},
		{name: "look-alike xfp lower", key: "x_forwarded_proto", want: false},
		{name: "look-alike xfh", key: "X_Forwarded_Host", want: false},
		{name: "look-alike port", key: "X_Forwarded_Port", want: false},
		{name: "look-alike real ip", key: "X_Real_Ip", want: false},
		{name: "underscore not a look-alike", key: "X_Forwarded_Fo", want: true},
		{name: "underscore other", key: "My_Header", want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got, want := o.Forward(tt.key), tt.want; got != want {
				t.Errorf("Forward(%q) = %v, want %v", tt.key, got, want)
			}
		})
	}
}

// TestIsHopByHop: the fixed hop-by-hop fields and those the Connection
// lines name (in any case) are hop-by-hop; no other field is.
func TestIsHopByHop(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		key        string
		connection []string
		want       bool
	}{
		{name: "connection", key: Connection, want: true},
		{name: "keep-alive", key: KeepAlive, want: true},
		{name: "proxy-connection", key: ProxyConnection, want: true},
		{name: "te", key: TE, want: true},
		{name: "transfer-encoding", key: TransferEncoding, want: true},
		{name: "upgrade", key: Upgrade, want: true},
		{name: "http2-settings", key: HTTP2Settings, want: true},
		{name: "end-to-end", key: "Content-Type", want: false},
		{name: "set-cookie", key: "Set-Cookie", connection: []string{"close"}, want: false},
		{name: "content-length", key: ContentLength, want: false},
		{name: "named", key: "X-Named", connection: []string{"close, x-named"}, want: true},
		{name: "named on second line", key: "X-Named", connection: []string{"close", "X-NAMED"}, want: true},
		{name: "not named", key: "X-Named", connection: []string{"close, x-named-too"}, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got, want := IsHopByHop(tt.key, tt.connection), tt.want; got != want {
				t.Errorf("IsHopByHop(%q, %q) = %v, want %v", tt.key, tt.connection, got, want)
			}
		})
	}
}

// TestForbiddenInTrailer: trailers drop the hop-by-hop fields and, from the
// same table, framing, routing and content-describing fields too.
func TestForbiddenInTrailer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		key  string
		want bool
	}{
		{name: "connection", key: Connection, want: true},
		{name: "keep-alive", key: KeepAlive, want: true},
		{name: "proxy-connection", key: ProxyConnection, want: true},
		{name: "te", key: TE, want: true},
		{name: "transfer-encoding", key: TransferEncoding, want: true},
		{name: "upgrade", key: Upgrade, want: true},
		{name: "http2-settings", key: HTTP2Settings, want: true},
		{name: "content-length", key: ContentLength, want: true},
		{name: "host", key: "Host", want: true},
		{name: "trailer", key: Trailer, want: true},
		{name: "content-type", key: "Content-Type", want: true},
		{name: "content-encoding", key: "Content-Encoding", want: true},
		{name: "content-range", key: "Content-Range", want: true},
		{name: "grpc-status", key: "Grpc-Status", want: false},
		{name: "server-timing", key: "Server-Timing", want: false},
		{name: "forwarded passes in a trailer", key: Forwarded, want: false},
		{name: "expect passes in a trailer", key: Expect, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got, want := ForbiddenInTrailer(tt.key), tt.want; got != want {
				t.Errorf("ForbiddenInTrailer(%q) = %v, want %v", tt.key, got, want)
			}
		})
	}
}

// TestOneTable: every field that is hop-by-hop in responses is refused in
// requests and dropped from trailers, so the three directions cannot drift.
func TestOneTable(t *testing.T) {
	t.Parallel()
	o := NewOutbound(http.Header{}, "example.com", Hop{Peer: peer4})
	for _, name := range []string{Connection, KeepAlive, ProxyConnection, TE, TransferEncoding, Upgrade, HTTP2Settings} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if !IsHopByHop(name, nil) {
				t.Errorf("IsHopByHop(%q) = false, want true", name)
			}
			if o.Forward(name) {
				t.Errorf("Forward(%q) = true, want false", name)
			}
			if !ForbiddenInTrailer(name) {
				t.Errorf("ForbiddenInTrailer(%q) = false, want true", name)
			}
		})
	}
}

// TestParseTrust: a trust list of prefixes and addresses (IPv4-mapped ones
// unmapped, zones dropped) is parsed to what Contains accepts, "none" and
// an empty list trust nothing, and String gives back a list ParseTrust
// reads to the same.
func TestParseTrust(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		in         string
		want       string   // String of the result
		trusted    []string // peers Contains must accept
		notTrusted []string // peers Contains must refuse
	}{
		{
			name:       "default",
			in:         DefaultTrust,
			want:       DefaultTrust,
			trusted:    []string{"127.0.0.1", "::1", "10.1.2.3", "172.31.255.255", "192.168.0.1", "100.64.0.1", "fd00::1", "::ffff:10.1.2.3"},
			notTrusted: []string{"8.8.8.8", "172.32.0.1", "2001:db8::1", "::ffff:8.8.8.8", "::2"},
		},
		{
			name:       "prefixes masked and spaces trimmed",
			in:         " 10.1.2.3/8 , 2001:db8::1/32,, ",
			want:       "10.0.0.0/8,2001:db8::/32",
			trusted:    []string{"10.200.0.1", "2001:db8:ffff::1"},
			notTrusted: []string{"11.0.0.1", "2001:db9::1"},
		},
		{
			name:       "single addresses",
			in:         "192.0.2.1,2001:db8::1",
			want:       "192.0.2.1/32,2001:db8::1/128",
			trusted:    []string{"192.0.2.1", "::ffff:192.0.2.1", "2001:db8::1"},
			notTrusted: []string{"192.0.2.2", "2001:db8::2"},
		},
		{
			name:       "mapped address unmapped",
			in:         "::ffff:192.0.2.1",
			want:       "192.0.2.1/32",
			trusted:    []string{"192.0.2.1", "::ffff:192.0.2.1"},
			notTrusted: []string{"192.0.2.2"},
		},
		// An IPv4-mapped prefix is the IPv4 prefix it maps: Contains
		// unmaps the peer before it looks, so a prefix kept mapped would
		// match nothing.
		{
			name:       "mapped prefix",
			in:         "::ffff:10.0.0.0/104",
			want:       "10.0.0.0/8",
			trusted:    []string{"10.1.2.3", "::ffff:10.1.2.3"},
			notTrusted: []string{"11.0.0.1"},
		},
		{
			name:       "zoned address",
			in:         "fe80::1%eth0",
			want:       "fe80::1/128",
			trusted:    []string{"fe80::1", "fe80::1%eth1"},
			notTrusted: []string{"fe80::2"},
		},
		{
			name:       "zoned peer in prefix",
			in:         "fe80::/10",
			want:       "fe80::/10",
			trusted:    []string{"fe80::1%eth0"},
			notTrusted: []string{"fec0::1"},
		},
		{
			name:       "everything",
			in:         "0.0.0.0/0,::/0",
			want:       "0.0.0.0/0,::/0",
			trusted:    []string{"8.8.8.8", "2001:db8::1", "::ffff:8.8.8.8"},
			notTrusted: []string{""},
		},
		{name: "empty", in: "", want: "", notTrusted: []string{"127.0.0.1", "::1", ""}},
		{name: "blank", in: "  ", want: "", notTrusted: []string{"127.0.0.1"}},
		{name: "none", in: "none", want: "", notTrusted: []string{"127.0.0.1", "10.0.0.1"}},
		{name: "none with spaces", in: " none ", want: "", notTrusted: []string{"127.0.0.1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr, err := ParseTrust(tt.in)
			if err != nil {
				t.Fatalf("ParseTrust(%q) error = %v", tt.in, err)
			}
			if got, want := tr.String(), tt.want; got != want {
				t.Errorf("ParseTrust(%q).String() = %q, want %q", tt.in, got, want)
			}
			for _, p := range tt.trusted {
				if !tr.Contains(netip.MustParseAddr(p)) {
					t.Errorf("Contains(%s) = false, want true", p)
				}
			}
			for _, p := range tt.notTrusted {
				var a netip.Addr // "" stands for the zero Addr
				if p != "" {
					a = netip.MustParseAddr(p)
				}
				if tr.Contains(a) {
					t.Errorf("Contains(%q) = true, want false", p)
				}
			}
			// String is in the form ParseTrust accepts.
			again, err := ParseTrust(tr.String())
			if err != nil {
				t.Fatalf("ParseTrust(%q) error = %v", tr.String(), err)
			}
			if got, want := again.String(), tr.String(); got != want {
				t.Errorf("round trip = %q, want %q", got, want)
			}
		})
	}
}

// TestParseTrustError: an entry that is neither a prefix nor an address
// is refused with a *TrustError naming it, and nothing is trusted.
func TestParseTrustError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		in        string
		wantEntry string
	}{
		{name: "word", in: "localhost", wantEntry: "localhost"},
		{name: "bad prefix length", in: "10.0.0.0/33", wantEntry: "10.0.0.0/33"},
		{name: "bad v6 prefix length", in: "::/129", wantEntry: "::/129"},
		{name: "bad entry after good", in: "10.0.0.0/8, 256.0.0.1", wantEntry: "256.0.0.1"},
		{name: "none is case sensitive", in: "NONE", wantEntry: "NONE"},
		{name: "none inside a list", in: "10.0.0.0/8,none", wantEntry: "none"},
		{name: "bracketed", in: "[::1]", wantEntry: "[::1]"},
		{name: "with port", in: "127.0.0.1:80", wantEntry: "127.0.0.1:80"},
		// A prefix has no zone: the entry is refused, not read (as
		// netip.ParseAddr would) as the address fe80:: in zone "eth0/10".
		{name: "zoned prefix", in: "fe80::%eth0/10", wantEntry: "fe80::%eth0/10"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr, err := ParseTrust(tt.in)
			var te *TrustError
			if !errors.As(err, &te) {
				t.Fatalf("ParseTrust(%q) error = %v, want *TrustError", tt.in, err)
			}
			if got, want := te.Entry, tt.wantEntry; got != want {
				t.Errorf("TrustError.Entry = %q, want %q", got, want)
			}
			if got, want := tr.String(), ""; got != want {
				t.Errorf("ParseTrust(%q) on error = %q, want the zero Trust", tt.in, got)
			}
			if msg := err.Error(); !strings.Contains(msg, tt.wantEntry) {
				t.Errorf("Error() = %q, want it to name %q", msg, tt.wantEntry)
			}
		})
	}
}

// TestZeroTrust: the zero Trust trusts no peer.
func TestZeroTrust(t *testing.T) {
	t.Parallel()
	var tr Trust
	for _, p := range []string{"127.0.0.1", "::1", "10.0.0.1"} {
		if tr.Contains(netip.MustParseAddr(p)) {
			t.Errorf("zero Trust Contains(%s) = true, want false", p)
		}
	}
}

// TestOutboundAllocs guards the 0 allocs/op budget of the header rewrite
// (docs/architecture.md) on the path the HTTP/1.1 client takes. It does not
// call t.Parallel: AllocsPerRun counts every allocation of the process.
func TestOutboundAllocs(t *testing.T) {
	tests := []struct {
		name string
		h    http.Header
		hop  Hop
	}{
		{
			name: "untrusted",
			h: http.Header{
				"Accept": {"*/*"}, Connection: {"keep-alive, X-Hop"}, "X-Hop": {"1"},
				XForwardedFor: {"198.51.100.1"}, "X_Forwarded_For": {"6.6.6.6"},
				"Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
			},
			hop: Hop{Peer: peer6, TLS: true},
		},
		{
			name: "trusted with forwarded",
			h: http.Header{
				"Accept": {"*/*"}, Forwarded: {"for=198.51.100.1;proto=https"},
				XForwardedFor: {"198.51.100.1"}, TE: {"trailers"},
			},
			hop: Hop{Peer: peer4, Trusted: true},
		},
		{
			name: "trusted from x-forwarded ip:port nodes",
			h: http.Header{
				"Accept": {"*/*"}, Connection: {"Upgrade"}, Upgrade: {"websocket"},
				XForwardedFor:   {"198.51.100.1:4711, [2001:db8::7]:80", "[::ffff:198.51.100.2]:1"},
				XForwardedProto: {"https"}, XForwardedHost: {"public.example:8443"},
				KOriginalHost: {"orig.example"},
			},
			hop: Hop{Peer: peer4in, Trusted: true},
		},
		// A node without a port (the usual X-Forwarded-For form), an
		// address or a token, costs no allocation either: no failed
		// parse's error is made for it.
		{
			name: "trusted from x-forwarded bare address",
			h:    http.Header{"Accept": {"*/*"}, XForwardedFor: {"198.51.100.1"}},
			hop:  Hop{Peer: peer4, Trusted: true},
		},
		{
			name: "trusted from x-forwarded token",
			h:    http.Header{"Accept": {"*/*"}, XForwardedFor: {"unknown"}},
			hop:  Hop{Peer: peer4, Trusted: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			buf := make([]byte, 0, 1024)
			n := 0
			allocs := testing.AllocsPerRun(100, func() {
				o := NewOutbound(tt.h, "example.com:8080", tt.hop)
				for k := range tt.h {
					if o.Forward(k) {
						n++
					}
				}
				buf = o.AppendXFF(buf[:0])
				buf = o.AppendForwarded(buf[:0])
			})
			if got, want := allocs, 0.0; got != want {
				t.Errorf("allocs/op = %v, want %v", got, want)
			}
			if n == 0 {
				t.Errorf("no header forwarded")
			}
		})
	}
}
