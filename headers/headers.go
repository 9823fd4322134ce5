package headers

import (
	"net/http"
	"net/netip"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// Canonical names of the headers queue reads or writes. Direct map access
// (h[XForwardedFor]) is used only with these constants.
const (
	Connection              = "Connection"
	ContentLength           = "Content-Length"
	RetryAfter              = "Retry-After"
	Expect                  = "Expect"
	Forwarded               = "Forwarded"
	HTTP2Settings           = "Http2-Settings"
	IdempotencyKey          = "Idempotency-Key"
	KeepAlive               = "Keep-Alive"
	KnativeServingNamespace = "Knative-Serving-Namespace"
	KnativeServingRevision  = "Knative-Serving-Revision"
	KOriginalHost           = "K-Original-Host"
	ProxyConnection         = "Proxy-Connection"
	TE                      = "Te"
	Trailer                 = "Trailer"
	TransferEncoding        = "Transfer-Encoding"
	Upgrade                 = "Upgrade"
	XForwardedFor           = "X-Forwarded-For"
	XForwardedHost          = "X-Forwarded-Host"
	XForwardedProto         = "X-Forwarded-Proto"
	XIdempotencyKey         = "X-Idempotency-Key"
)

// Trust is the set of peers whose forwarding headers (Forwarded and
// X-Forwarded-*) are kept. The zero Trust trusts nobody.
type Trust struct {
	prefixes []netip.Prefix
}

// DefaultTrust is the --trusted-proxies default: loopback and the private,
// shared (CGNAT) and unique-local ranges a cluster network uses.
const DefaultTrust = "127.0.0.0/8,::1/128,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,100.64.0.0/10,fc00::/7"

// ParseTrust parses a comma-separated list of CIDR prefixes or single
// addresses. An empty string, or "none", trusts nobody.
func ParseTrust(s string) (Trust, error) {
	var t Trust
	s = strings.TrimSpace(s)
	if s == "" || s == "none" {
		return t, nil
	}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if strings.IndexByte(f, '%') >= 0 && strings.IndexByte(f, '/') >= 0 {
			return Trust{}, &TrustError{Entry: f} // netip would read "eth0/10" as a zone
		}
		if p, err := netip.ParsePrefix(f); err == nil {
			if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
				// Peers are compared unmapped, so ::ffff:10.0.0.0/104 means 10.0.0.0/8.
				p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
			}
			t.prefixes = append(t.prefixes, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return Trust{}, &TrustError{Entry: f}
		}
		a = a.Unmap().WithZone("") // peers are compared without their zone
		t.prefixes = append(t.prefixes, netip.PrefixFrom(a, a.BitLen()))
	}
	return t, nil
}

// TrustError reports an entry of a trusted-proxies list that is neither a
// CIDR prefix nor an address.
type TrustError struct{ Entry string }

func (e *TrustError) Error() string {
	return "bad trusted proxy " + quote(e.Entry) + ": want a CIDR such as 10.0.0.0/8 or an address"
}

func quote(s string) string { return `"` + s + `"` }

// Contains reports whether a is a trusted peer. An invalid address is never
// trusted.
func (t Trust) Contains(a netip.Addr) bool {
	if !a.IsValid() {
		return false
	}
	a = a.Unmap().WithZone("")
	for _, p := range t.prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// String returns the list in the form ParseTrust accepts.
func (t Trust) String() string {
	var b strings.Builder
	for i, p := range t.prefixes {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(p.String())
	}
	return b.String()
}

// Hop is what the proxy knows about the hop a request came in on.
type Hop struct {
	// Peer is the client's address. The zero Addr means unknown: it is then
	// written as "unknown" (RFC 7239 section 6.3) and never trusted.
	Peer netip.Addr
	// TLS reports whether the request arrived on the TLS port.
	TLS bool
	// Trusted reports whether Peer's forwarding headers are kept; see
	// [Trust.Contains].
	Trusted bool
}

// Outbound is the rewrite of one request's header for the upstream. Build it
// with [NewOutbound]; it reads the inbound header but keeps no copy of it, so
// the inbound header must not change while the Outbound is in use.
type Outbound struct {
	// Host is the Host the upstream receives: K-Original-Host when present,
	// else the request's own.
	Host string
	// Proto is the X-Forwarded-Proto value: the kept one, else http or https.
	Proto string
	// ForwardedHost is the X-Forwarded-Host value: the kept one, else Host.
	ForwardedHost string
	// WebSocket reports a websocket upgrade request, whose Upgrade and
	// "Connection: Upgrade" pass through (RFC 6455 section 4.1).
	WebSocket bool
	// TETrailers reports "TE: trailers", the one TE value that passes.
	TETrailers bool

	peer       netip.Addr
	peerBuf    [45]byte // peerText's: an IPv6 address's longest text
	peerLen    uint8
	proto      string   // this hop's scheme
	connection []string // inbound Connection values: the headers they name are hop-by-hop
	xff        []string // kept X-Forwarded-For values
	forwarded  []string // kept Forwarded values
	keptProto  string   // kept X-Forwarded-Proto, for the elements built from X-Forwarded-For
	keptHost   string   // kept X-Forwarded-Host, likewise
}

// NewOutbound computes the rewrite for a request with header h and host
// (r.Host) that arrived on hop. It does not allocate.
func NewOutbound(h http.Header, host string, hop Hop) Outbound {
	o := Outbound{Host: host, peer: hop.Peer, proto: "http", connection: h[Connection]}
	if hop.TLS {
		o.proto = "https"
	}
	if v := h[KOriginalHost]; len(v) > 0 && v[0] != "" {
		o.Host = v[0]
	}
	if hop.Trusted {
		o.xff = h[XForwardedFor]
		o.forwarded = h[Forwarded]
		if v := h[XForwardedProto]; len(v) > 0 {
			o.keptProto = v[0]
		}
		if v := h[XForwardedHost]; len(v) > 0 {
			o.keptHost = v[0]
		}
	}
	o.Proto, o.ForwardedHost = o.proto, o.Host
	if o.keptProto != "" {
		o.Proto = o.keptProto
	}
	if o.keptHost != "" {
		o.ForwardedHost = o.keptHost
	}
	if v := h[Upgrade]; len(v) > 0 && httpguts.HeaderValuesContainsToken(v, "websocket") &&
		httpguts.HeaderValuesContainsToken(o.connection, "upgrade") {
		o.WebSocket = true
	}
	if v := h[TE]; len(v) > 0 && httpguts.HeaderValuesContainsToken(v, "trailers") {
		o.TETrailers = true
	}
	return o
}

// Forward reports whether the inbound header with canonical name passes to
// the upstream unchanged. It refuses the hop-by-hop fields (RFC 9110 section
// 7.6.1) and those the request's Connection header names; the fields queue
// writes itself (framing that the upstream client writes, Host, queue's own
// forwarding headers written by the Append methods) or that only the
// platform may set; and look-alikes of the forwarding headers that some
// servers merge with the real ones (X_Forwarded_For). The fixed names come
// from the package's one table of fields, which [IsHopByHop] and
// [ForbiddenInTrailer] read too.
//
// TE and a websocket Upgrade are refused here too: the writer adds
// "TE: trailers" and "Connection: Upgrade" / "Upgrade: websocket" itself when
// [Outbound.TETrailers] and [Outbound.WebSocket] say so.
func (o *Outbound) Forward(name string) bool {
	if lookup(name)&(hopByHop|rewritten) != 0 {
		return false
	}
	if strings.IndexByte(name, '_') >= 0 && isLookalike(name) {
		return false
	}
	if len(o.connection) > 0 && httpguts.HeaderValuesContainsToken(o.connection, name) {
		return false
	}
	return true
}

// isLookalike reports whether name equals one of the forwarding headers when
// '_' is read as '-' and case is ignored.
func isLookalike(name string) bool {
	for _, want := range [...]string{"x-forwarded-for", "x-forwarded-proto", "x-forwarded-host", "x-forwarded-port", "x-real-ip", "forwarded"} {
		if len(name) != len(want) {
			continue
		}
		same := true
		for i := 0; i < len(name) && same; i++ {
			c := name[i]
			if c == '_' {
				c = '-'
			} else if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			same = c == want[i]
		}
		if same {
			return true
		}
	}
	return false
}

// AppendXFF appends the X-Forwarded-For value: the kept list, then this
// peer.
func (o *Outbound) AppendXFF(dst []byte) []byte {
	for _, v := range o.xff {
		if v = strings.TrimSpace(v); v != "" {
			dst = append(dst, v...)
			dst = append(dst, ", "...)
		}
	}
	if !o.peer.IsValid() {
		return append(dst, "unknown"...)
	}
	return append(dst, o.peerText()...)
}

// KeepsFields reports whether the request carries forwarding fields that
// the rewrite keeps (from a trusted peer). Without them the fields the
// writer adds depend only on the hop and Host: on one connection, only on
// Host.
func (o *Outbound) KeepsFields() bool {
	return len(o.xff) > 0 || len(o.forwarded) > 0 || o.keptProto != "" || o.keptHost != ""
}

// peerText is the peer's address as text, unmapped and without a zone,
// formatted once for both X-Forwarded-For and Forwarded.
func (o *Outbound) peerText() []byte {
	if o.peerLen == 0 {
		o.peerLen = uint8(len(o.peer.Unmap().WithZone("").AppendTo(o.peerBuf[:0])))
	}
	return o.peerBuf[:o.peerLen]
}

// AppendForwarded appends the Forwarded value (RFC 7239): the kept list; or,
// when no Forwarded came but X-Forwarded-* did, elements built from those;
// then this hop's element, for=<peer>;host=<host>;proto=<scheme>.
func (o *Outbound) AppendForwarded(dst []byte) []byte {
	n := 0
	for _, v := range o.forwarded {
		if v = strings.TrimSpace(v); v != "" {
			dst = append(dst, v...)
			dst = append(dst, ", "...)
			n++
		}
	}
	if n == 0 {
		dst = o.appendFromXFF(dst)
	}
	dst = append(dst, "for="...)
	if o.peer.IsValid() {
		if o.peer.Unmap().Is4() {
			dst = append(dst, o.peerText()...)
		} else {
			dst = append(dst, `"[`...)
			dst = append(dst, o.peerText()...)
			dst = append(dst, `]"`...)
		}
	} else {
		dst = append(dst, "unknown"...)
	}
	dst = append(dst, ";host="...)
	dst = appendValue(dst, o.Host)
	dst = append(dst, ";proto="...)
	return append(dst, o.proto...)
}

// appendFromXFF turns kept X-Forwarded-For nodes into Forwarded elements, the
// first carrying the kept X-Forwarded-Host and -Proto. With no node but a
// kept host or proto, it writes one element with those alone.
func (o *Outbound) appendFromXFF(dst []byte) []byte {
	first := true
	for _, v := range o.xff {
		for v != "" {
			var node string
			node, v, _ = strings.Cut(v, ",")
			if node = strings.TrimSpace(node); node == "" {
				continue
			}
			dst = append(dst, "for="...)
			dst = appendXFFNode(dst, node)
			if first {
				dst = o.appendKept(dst, ";")
				first = false
			}
			dst = append(dst, ", "...)
		}
	}
	if first && (o.keptHost != "" || o.keptProto != "") {
		dst = o.appendKept(dst, "")
		dst = append(dst, ", "...)
	}
	return dst
}

func (o *Outbound) appendKept(dst []byte, sep string) []byte {
	if o.keptHost != "" {
		dst = append(dst, sep...)
		dst = append(dst, "host="...)
		dst = appendValue(dst, o.keptHost)
		sep = ";"
	}
	if o.keptProto != "" {
		dst = append(dst, sep...)
		dst = append(dst, "proto="...)
		dst = appendValue(dst, o.keptProto)
	}
	return dst
}

// appendXFFNode writes one X-Forwarded-For node as a Forwarded node: an
// address in its RFC 7239 form (IPv6 bracketed and quoted, a port kept), any
// other token as it is, anything else as a quoted-string.
func appendXFFNode(dst []byte, node string) []byte {
	if !maybeAddr(node) {
		// "unknown", an obfuscated name: no parse, whose failure would
		// allocate its error (TestOutboundAllocs).
		return appendValue(dst, node)
	}
	if strings.Count(node, ":") == 1 || node[0] == '[' && strings.Contains(node, "]:") {
		ap, err := netip.ParseAddrPort(node)
		if err != nil {
			return appendValue(dst, node)
		}
		a := ap.Addr().Unmap()
		dst = append(dst, '"')
		if a.Is4() {
			dst = netip.AddrPortFrom(a, ap.Port()).AppendTo(dst) // ':' is no token character
			return append(dst, '"')
		}
		dst = append(dst, '[')
		dst = a.WithZone("").AppendTo(dst)
		dst = append(dst, "]:"...)
		dst = appendUint(dst, ap.Port())
		return append(dst, '"')
	}
	bare := node
	if len(node) > 2 && node[0] == '[' && node[len(node)-1] == ']' {
		bare = node[1 : len(node)-1]
	}
	if a, err := netip.ParseAddr(bare); err == nil {
		return appendNode(dst, a.Unmap().WithZone(""))
	}
	return appendValue(dst, node)
}

// maybeAddr reports whether node is made of the characters an IP address,
// bracketed or with a port or zone, is made of.
func maybeAddr(node string) bool {
	if node == "" {
		return false
	}
	for i := 0; i < len(node); i++ {
		switch c := node[i]; {
		case '0' <= c && c <= '9', 'a' <= c && c <= 'f', 'A' <= c && c <= 'F',
			c == '.', c == ':', c == '[', c == ']':
		case c == '%':
			return true // a zone: anything may follow
		default:
			return false
		}
	}
	return true
}

func appendUint(dst []byte, v uint16) []byte {
	var b [5]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		if v /= 10; v == 0 {
			break
		}
	}
	return append(dst, b[i:]...)
}

// appendNode writes an address as an RFC 7239 node: IPv4 as a token, IPv6
// as a quoted, bracketed string (section 6).
func appendNode(dst []byte, a netip.Addr) []byte {
	if a.Is4() {
		return a.AppendTo(dst)
	}
	dst = append(dst, `"[`...)
	dst = a.AppendTo(dst)
	return append(dst, `]"`...)
}

// appendValue writes v as a token when it is one (RFC 9110 section 5.6.2),
// else as a quoted-string with '"' and '\' escaped (section 5.6.4).
func appendValue(dst []byte, v string) []byte {
	token, plain := v != "", true
	for i := 0; i < len(v); i++ {
		if c := v[i]; !httpguts.IsTokenRune(rune(c)) {
			token = false
			if c == '"' || c == '\\' {
				plain = false
				break
			}
		}
	}
	switch {
	case token:
		return append(dst, v...)
	case plain: // a quoted-string with nothing to escape, the usual host:port
		dst = append(dst, '"')
		dst = append(dst, v...)
		return append(dst, '"')
	}
	dst = append(dst, '"')
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c == '"' || c == '\\' {
			dst = append(dst, '\\')
		}
		dst = append(dst, c)
	}
	return append(dst, '"')
}

// Apply rewrites h in place into the header the upstream receives: headers
// that [Outbound.Forward] refuses are deleted and the forwarding headers set.
// Host is not part of h; send [Outbound.Host] as the request's Host.
func (o *Outbound) Apply(h http.Header) {
	for k := range h {
		if !o.Forward(k) {
			delete(h, k)
		}
	}
	if o.TETrailers {
		h[TE] = []string{"trailers"}
	}
	if o.WebSocket {
		h[Connection] = []string{"Upgrade"}
		h[Upgrade] = []string{"websocket"}
	}
	h[XForwardedFor] = []string{string(o.AppendXFF(nil))}
	h[XForwardedProto] = []string{o.Proto}
	h[XForwardedHost] = []string{o.ForwardedHost}
	h[Forwarded] = []string{string(o.AppendForwarded(nil))}
}

// field is what queue knows about a header field name: a set of the
// properties below. The zero field is an end-to-end field that passes in
// both directions and in trailers.
type field uint8

const (
	// hopByHop fields describe one connection (RFC 9110 section 7.6.1, and
	// HTTP2-Settings, RFC 7540 section 3.2.1): they never pass in either
	// direction, whichever protocol either side speaks. HTTP/2 forbids them
	// outright (RFC 9113 section 8.2.2). Every hopByHop field is also
	// notTrailer.
	hopByHop field = 1 << iota
	// notTrailer fields must not be forwarded in a trailer section:
	// framing, routing and the fields that describe the content as a whole
	// (RFC 9110 section 6.5.1), besides the hop-by-hop ones.
	notTrailer
	// rewritten request fields do not pass to the upstream as they came:
	// queue writes them itself (framing, Host, the forwarding headers) or
	// only the platform may set them (Knative's routing headers).
	rewritten
)

// lookup returns the properties of the header field with canonical name. It
// is the one table of the fields that do not pass as they came: requests
// (Outbound.Forward), responses (IsHopByHop) and trailers
// (ForbiddenInTrailer) all read it, over HTTP/1.1 and HTTP/2 alike. A field
// named by a message's Connection header is hop-by-hop as well; that is per
// message and not in the table.
func lookup(name string) field {
	switch name {
	case Connection, KeepAlive, ProxyConnection, TE, TransferEncoding, Upgrade, HTTP2Settings:
		return hopByHop | notTrailer
	case ContentLength, "Host":
		return notTrailer | rewritten
	case Trailer, "Content-Type", "Content-Encoding", "Content-Range":
		return notTrailer
	case Expect, Forwarded, XForwardedFor, XForwardedProto, XForwardedHost,
		KOriginalHost, KnativeServingRevision, KnativeServingNamespace:
		return rewritten
	}
	return 0
}

// IsHopByHop reports whether a response header with canonical name must not
// pass back to the client: a hop-by-hop field of the package's one table, or
// a name listed in the response's Connection values.
func IsHopByHop(name string, connection []string) bool {
	if lookup(name)&hopByHop != 0 {
		return true
	}
	return len(connection) > 0 && httpguts.HeaderValuesContainsToken(connection, name)
}

// ForbiddenInTrailer reports whether a trailer field with canonical name
// must be dropped rather than forwarded, in either direction: a hop-by-hop
// field, or one that trailers must not carry (framing, routing, content
// description; RFC 9110 section 6.5.1). It reads the package's one table.
func ForbiddenInTrailer(name string) bool { return lookup(name)&notTrailer != 0 }
