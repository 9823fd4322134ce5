package headers

import (
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"
)

// fwdPair is one parameter of a Forwarded element, its value unquoted.
type fwdPair struct{ name, value string }

// parseForwarded is a strict RFC 7239 section 4 parser:
//
//	Forwarded         = 1#forwarded-element
//	forwarded-element = [ forwarded-pair ] *( ";" [ forwarded-pair ] )
//	forwarded-pair    = token "=" value
//	value             = token / quoted-string
//
// Elements are separated by "," with optional whitespace around it; pairs by
// ";" with none. It refuses empty elements and pairs (which the grammar
// allows but queue never writes), a parameter given twice in one element
// (section 4), and anything else outside the grammar.
func parseForwarded(s string) ([][]fwdPair, error) {
	var elems [][]fwdPair
	i := 0
	for {
		var elem []fwdPair
		for {
			j := i
			for j < len(s) && httpguts.IsTokenRune(rune(s[j])) {
				j++
			}
			if j == i {
				return nil, errors.New("want a token at " + s[i:])
			}
			name := strings.ToLower(s[i:j])
			for _, p := range elem {
				if p.name == name {
					return nil, errors.New("parameter " + name + " twice")
				}
			}
			if j == len(s) || s[j] != '=' {
				return nil, errors.New("want '=' at " + s[j:])
			}
			i = j + 1
			var value string
			if i < len(s) && s[i] == '"' {
				var b strings.Builder
				i++
				for {
					if i == len(s) {
						return nil, errors.New("unterminated quoted-string")
					}
					c := s[i]
					i++
					if c == '"' {
						break
					}
					if c == '\\' {
						if i == len(s) {
							return nil, errors.New("unterminated quoted-pair")
						}
						c = s[i]
						i++
						if !(c == '\t' || c == ' ' || (0x21 <= c && c <= 0x7e) || c >= 0x80) {
							return nil, errors.New("bad quoted-pair")
						}
					} else if !(c == '\t' || c == ' ' || c == 0x21 || (0x23 <= c && c <= 0x5b) || (0x5d <= c && c <= 0x7e) || c >= 0x80) {
						return nil, errors.New("bad qdtext")
					}
					b.WriteByte(c)
				}
				value = b.String()
			} else {
				j := i
				for j < len(s) && httpguts.IsTokenRune(rune(s[j])) {
					j++
				}
				if j == i {
					return nil, errors.New("want a value at " + s[i:])
				}
				value, i = s[i:j], j
			}
			elem = append(elem, fwdPair{name, value})
			if i < len(s) && s[i] == ';' {
				i++
				continue
			}
			break
		}
		elems = append(elems, elem)
		for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
			i++
		}
		if i == len(s) {
			return elems, nil
		}
		if s[i] != ',' {
			return nil, errors.New("want ',' at " + s[i:])
		}
		i++
		for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
			i++
		}
	}
}

func param(elem []fwdPair, name string) (string, bool) {
	for _, p := range elem {
		if p.name == name {
			return p.value, true
		}
	}
	return "", false
}

// fieldValues splits s on "\n" into the values of a header field, as net/http
// would deliver them (trimmed), or reports false when one holds a byte no
// field value can hold.
func fieldValues(s string) ([]string, bool) {
	vs := strings.Split(s, "\n")
	for i, v := range vs {
		if !httpguts.ValidHeaderFieldValue(v) {
			return nil, false
		}
		vs[i] = strings.Trim(v, " \t")
	}
	return vs, true
}

// xffNodes returns the non-empty, trimmed nodes of X-Forwarded-For values.
func xffNodes(vs []string) []string {
	var nodes []string
	for _, v := range vs {
		for n := range strings.SplitSeq(v, ",") {
			if n = strings.TrimSpace(n); n != "" {
				nodes = append(nodes, n)
			}
		}
	}
	return nodes
}

func normAddr(a netip.Addr) netip.Addr { return a.Unmap().WithZone("") }

// sameNode reports whether the Forwarded node got (unquoted) stands for the
// X-Forwarded-For node want: the same address (and port) when want is one,
// else the same string.
func sameNode(got, want string) bool {
	if ap, err := netip.ParseAddrPort(want); err == nil {
		gp, err := netip.ParseAddrPort(got)
		return err == nil && normAddr(gp.Addr()) == normAddr(ap.Addr()) && gp.Port() == ap.Port()
	}
	a, err := netip.ParseAddr(want)
	if err != nil && len(want) > 2 && want[0] == '[' && want[len(want)-1] == ']' {
		a, err = netip.ParseAddr(want[1 : len(want)-1])
	}
	if err == nil {
		if a.Is6() && !a.Is4In6() {
			// RFC 7239 section 6: an IPv6 node is bracketed.
			if len(got) < 2 || got[0] != '[' || got[len(got)-1] != ']' {
				return false
			}
			got = got[1 : len(got)-1]
		}
		ga, err := netip.ParseAddr(got)
		return err == nil && normAddr(ga) == normAddr(a)
	}
	return got == want
}

// FuzzForwarded: whatever the incoming X-Forwarded-* fields and host, the
// Forwarded field written parses by RFC 7239's grammar; from a trusted hop
// it has one element per incoming X-Forwarded-For node (with the incoming
// proto and host on the first), and always a last element for the hop
// itself with its address, the host and the protocol.
func FuzzForwarded(f *testing.F) {
	f.Add("198.51.100.1, 10.0.0.2", "example.com", "https", "public.example", true)
	f.Add("[2001:db8::7]:80,198.51.100.1:4711\n::ffff:192.0.2.9", "example.com:8080", "", "", true)
	f.Add("", "[::1]:80", "https", `a"b\c`, true)
	f.Add(`unknown, _hidden, foo bar, a"b;c=d`, "example.com", "http", "", true)
	f.Add("198.51.100.1", "example.com", "https", "public.example", false)
	f.Add(", ,", "", "", "", true)
	f.Fuzz(func(t *testing.T, xff, host, xfp, xfh string, trusted bool) {
		xffs, ok := fieldValues(xff)
		if !ok || !httpguts.ValidHeaderFieldValue(host) || !httpguts.ValidHeaderFieldValue(xfp) || !httpguts.ValidHeaderFieldValue(xfh) {
			t.Skip()
		}
		host, xfp, xfh = strings.Trim(host, " \t"), strings.Trim(xfp, " \t"), strings.Trim(xfh, " \t")
		h := http.Header{XForwardedFor: xffs}
		if xfp != "" {
			h[XForwardedProto] = []string{xfp}
		}
		if xfh != "" {
			h[XForwardedHost] = []string{xfh}
		}
		hop := Hop{Peer: peer6, Trusted: trusted}
		if trusted {
			hop.Peer = peer4in
		}
		o := NewOutbound(h, host, hop)
		fwd := string(o.AppendForwarded(nil))
		elems, err := parseForwarded(fwd)
		if err != nil {
			t.Fatalf("Forwarded %q does not parse: %v", fwd, err)
		}

		var nodes []string
		extra := 0
		if trusted {
			nodes = xffNodes(xffs)
			if len(nodes) == 0 && (xfp != "" || xfh != "") {
				extra = 1
			}
		}
		if got, want := len(elems), len(nodes)+extra+1; got != want {
			t.Fatalf("Forwarded %q has %d elements, want %d", fwd, got, want)
		}
		for i, node := range nodes {
			got, ok := param(elems[i], "for")
			if !ok {
				t.Fatalf("Forwarded %q: element %d has no for", fwd, i)
			}
			if !sameNode(got, node) {
				t.Errorf("Forwarded %q: element %d for = %q, want %q", fwd, i, got, node)
			}
			if i > 0 && len(elems[i]) != 1 {
				t.Errorf("Forwarded %q: element %d = %q, want for alone", fwd, i, elems[i])
			}
		}
		if trusted && len(nodes)+extra > 0 {
			first := elems[0]
			if got, ok := param(first, "host"); ok != (xfh != "") || got != xfh {
				t.Errorf("Forwarded %q: first host = %q (%v), want %q", fwd, got, ok, xfh)
			}
			if got, ok := param(first, "proto"); ok != (xfp != "") || got != xfp {
				t.Errorf("Forwarded %q: first proto = %q (%v), want %q", fwd, got, ok, xfp)
			}
			if _, ok := param(first, "for"); ok == (extra == 1) {
				t.Errorf("Forwarded %q: first element has for = %v, want %v", fwd, ok, extra == 0)
			}
		}
		last := elems[len(elems)-1]
		if got, want := len(last), 3; got != want {
			t.Errorf("Forwarded %q: last element has %d pairs, want %d", fwd, got, want)
		}
		if got, _ := param(last, "for"); !sameNode(got, normAddr(hop.Peer).String()) {
			t.Errorf("Forwarded %q: last for = %q, want %s", fwd, got, hop.Peer)
		}
		if got, want := last[1], (fwdPair{"host", host}); got != want {
			t.Errorf("Forwarded %q: last host = %q, want %q", fwd, got, want)
		}
		if got, want := last[2], (fwdPair{"proto", "http"}); got != want {
			t.Errorf("Forwarded %q: last proto = %q, want %q", fwd, got, want)
		}
	})
}

// FuzzXFF: whatever the incoming X-Forwarded-For lines, the one written is
// a valid field value listing, from a trusted hop, every incoming node in
// order, then the hop's address ("unknown" without one).
func FuzzXFF(f *testing.F) {
	f.Add("198.51.100.1, 10.0.0.2", "10.0.0.9", true)
	f.Add(" 198.51.100.1 \n\n2001:db8::1,,x", "::ffff:192.0.2.1", true)
	f.Add("198.51.100.1", "2001:db8::1", false)
	f.Add("", "", true)
	f.Add("a,", "fe80::1%eth0", true)
	f.Fuzz(func(t *testing.T, xff, peer string, trusted bool) {
		vs, ok := fieldValues(xff)
		if !ok {
			t.Skip()
		}
		var hop Hop
		hop.Trusted = trusted
		if a, err := netip.ParseAddr(peer); err == nil {
			hop.Peer = a
		}
		o := NewOutbound(http.Header{XForwardedFor: vs}, "example.com", hop)
		out := string(o.AppendXFF(nil))
		if !httpguts.ValidHeaderFieldValue(out) {
			t.Fatalf("X-Forwarded-For %q is no valid field value", out)
		}

		var want []string
		if trusted {
			for _, v := range vs {
				if v = strings.TrimSpace(v); v != "" {
					for n := range strings.SplitSeq(v, ",") {
						want = append(want, strings.TrimSpace(n))
					}
				}
			}
		}
		if hop.Peer.IsValid() {
			want = append(want, normAddr(hop.Peer).String())
		} else {
			want = append(want, "unknown")
		}
		var got []string
		for n := range strings.SplitSeq(out, ",") {
			got = append(got, strings.TrimSpace(n))
		}
		if len(got) != len(want) {
			t.Fatalf("X-Forwarded-For %q = nodes %q, want %q", out, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("X-Forwarded-For %q = nodes %q, want %q", out, got, want)
			}
		}
	})
}
