package httpsem

import (
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// TestValidFieldName: a regular field name of HTTP/2 and HTTP/3 is a token
// (RFC 9110 section 5.1: 1*tchar) with no uppercase letter (RFC 9113
// section 8.2.1, RFC 9114 section 4.2); each row names the rule it checks,
// and every byte value is checked alone and inside a name against the
// grammar.
func TestValidFieldName(t *testing.T) {
	for _, tt := range []struct {
		rule string
		name string
		want bool
	}{
		{"token, lowercase", "content-type", true},
		{"token: every tchar that is no letter or digit", "!#$%&'*+-.^_`|~", true},
		{"token: digits", "x-b3-1", true},
		{"token: one tchar", "a", true},
		{"token = 1*tchar: empty", "", false},
		{"RFC 9113 8.2.1: uppercase", "Content-Type", false},
		{"RFC 9113 8.2.1: one uppercase letter", "x-requeSt-id", false},
		{"RFC 9113 8.2.1: a pseudo-field's colon", ":path", false},
		{"RFC 9113 8.2.1: colon inside", "a:b", false},
		{"RFC 9113 8.2.1: SP", "a b", false},
		{"RFC 9113 8.2.1: trailing SP", "a ", false},
		{"RFC 9113 8.2.1: HTAB", "a\tb", false},
		{"RFC 9113 8.2.1: NUL", "a\x00", false},
		{"RFC 9113 8.2.1: CR LF", "a\r\nb", false},
		{"RFC 9113 8.2.1: DEL", "a\x7f", false},
		{"RFC 9113 8.2.1: obs-text", "caf\xc3\xa9", false},
		{"token: DQUOTE is a delimiter", `a"b`, false},
		{"token: ( is a delimiter", "a(b", false},
		{"token: , is a delimiter", "a,b", false},
		{"token: / is a delimiter", "a/b", false},
		{"token: ; is a delimiter", "a;b", false},
		{"token: = is a delimiter", "a=b", false},
		{"token: @ is a delimiter", "a@b", false},
		{"token: { is a delimiter", "a{b", false},
	} {
		if got := ValidFieldName(tt.name); got != tt.want {
			t.Errorf("%s: ValidFieldName(%q) = %v, want %v", tt.rule, tt.name, got, tt.want)
		}
	}
	for c := range 256 {
		b := string([]byte{byte(c)})
		for _, name := range []string{b, "a" + b + "a"} {
			if got, want := ValidFieldName(name), h2FieldName(name); got != want {
				t.Errorf("ValidFieldName(%q) = %v, want %v (RFC 9110 token, RFC 9113 lowercase)", name, got, want)
			}
		}
	}
}

// TestValidFieldValue: a field value is valid when it matches RFC 9110's
// field-value (section 5.5): no CTL but HTAB (RFC 9113 section 8.2.1
// forbids NUL, CR and LF outright), no DEL, obs-text allowed, and no
// leading or trailing SP or HTAB; each row names the rule it checks, and
// every string of up to three bytes over an alphabet of each class is
// checked against the grammar.
func TestValidFieldValue(t *testing.T) {
	for _, tt := range []struct {
		rule  string
		value string
		want  bool
	}{
		{"field-value = *field-content: empty", "", true},
		{"field-vchar: VCHAR", "text/html", true},
		{"field-vchar: one", "a", true},
		{"field-vchar: delimiters are VCHAR", `"a", (b); c=d`, true},
		{"field-content: SP inside", "a b", true},
		{"field-content: HTAB inside", "a\tb", true},
		{"field-content: a run of SP and HTAB inside", "a \t  b", true},
		{"field-vchar: obs-text", "\x80\xff", true},
		{"field-vchar: UTF-8 as obs-text", "caf\xc3\xa9", true},
		{"RFC 9113 8.2.1: leading SP", " a", false},
		{"RFC 9113 8.2.1: trailing SP", "a ", false},
		{"RFC 9113 8.2.1: leading HTAB", "\ta", false},
		{"RFC 9113 8.2.1: trailing HTAB", "a\t", false},
		{"RFC 9113 8.2.1: SP alone", " ", false},
		{"RFC 9113 8.2.1: NUL", "a\x00b", false},
		{"RFC 9113 8.2.1: CR", "a\rb", false},
		{"RFC 9113 8.2.1: LF", "a\nb", false},
		{"RFC 9112 5.2: obs-fold", "a\r\n b", false},
		{"field-vchar: CTL SOH", "a\x01b", false},
		{"field-vchar: CTL ESC", "a\x1bb", false},
		{"field-vchar: CTL US", "a\x1fb", false},
		{"field-vchar: DEL", "a\x7fb", false},
		{"field-vchar: DEL at the end", "a\x7f", false},
	} {
		if got := ValidFieldValue(tt.value); got != tt.want {
			t.Errorf("%s: ValidFieldValue(%q) = %v, want %v", tt.rule, tt.value, got, tt.want)
		}
	}
	alphabet := []byte{0x00, 0x01, '\t', '\n', '\r', 0x1f, ' ', '!', 'a', '~', 0x7f, 0x80, 0xff}
	var check func(prefix []byte)
	check = func(prefix []byte) {
		v := string(prefix)
		if got, want := ValidFieldValue(v), rfcFieldValue(v); got != want {
			t.Errorf("ValidFieldValue(%q) = %v, want %v (RFC 9110 field-value)", v, got, want)
		}
		if len(prefix) == 3 {
			return
		}
		for _, c := range alphabet {
			check(append(prefix, c))
		}
	}
	check(make([]byte, 0, 3))
}

// TestConnectionSpecific: the connection-specific fields of RFC 9113
// section 8.2.2 (and RFC 9114 section 4.2) are reported; TE, which HTTP/2
// carries with the value "trailers", and end-to-end fields are not.
func TestConnectionSpecific(t *testing.T) {
	for _, tt := range []struct {
		name string
		want bool
	}{
		{"connection", true},
		{"keep-alive", true},
		{"proxy-connection", true},
		{"transfer-encoding", true},
		{"upgrade", true},
		{"te", false},
		{"content-length", false},
		{"host", false},
		{"trailer", false},
		{"upgrade-insecure-requests", false},
		{"x-connection", false},
	} {
		if got := ConnectionSpecific(tt.name); got != tt.want {
			t.Errorf("RFC 9113 8.2.2: ConnectionSpecific(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestCommonKeys: every common name CommonKey knows is a lowercase field
// name whose key is the http.Header key net/textproto gives it; names it
// does not know are reported as such, with no key.
func TestCommonKeys(t *testing.T) {
	if len(commonKeys) == 0 {
		t.Fatal("no common keys")
	}
	for name := range commonKeys {
		key, ok := CommonKey(name)
		if !ok {
			t.Errorf("CommonKey(%q): not found", name)
			continue
		}
		if want := textproto.CanonicalMIMEHeaderKey(name); key != want {
			t.Errorf("CommonKey(%q) = %q, want %q", name, key, want)
		}
		if !ValidFieldName(name) {
			t.Errorf("common name %q is not a valid lowercase field name", name)
		}
	}
	for _, name := range []string{"x-not-common", "Content-Type", ""} {
		if key, ok := CommonKey(name); ok || key != "" {
			t.Errorf("CommonKey(%q) = %q, %v, want not found", name, key, ok)
		}
	}
}

// TestCanonicalizer: the zero Canonicalizer gives every lowercase name its
// http.Header key, common or not, and keeps giving the right keys past
// MaxCanonical uncommon names, while its cache holds no more than that.
func TestCanonicalizer(t *testing.T) {
	var c Canonicalizer
	for _, name := range []string{"content-type", "x-custom-field", "x-custom-field", "te", "x-b3-traceid", "a", "www-authenticate"} {
		if got, want := c.Key(name), textproto.CanonicalMIMEHeaderKey(name); got != want {
			t.Errorf("Key(%q) = %q, want %q", name, got, want)
		}
	}
	for i := range 3 * MaxCanonical {
		name := "x-field-" + strings.Repeat("a", i%7) + "-" + string(rune('a'+i%26)) + strings.Repeat("b", i/26)
		if got, want := c.Key(name), textproto.CanonicalMIMEHeaderKey(name); got != want {
			t.Errorf("Key(%q) = %q, want %q", name, got, want)
		}
	}
	if n := len(c.cache); n > MaxCanonical {
		t.Errorf("cache holds %d names, want at most MaxCanonical (%d)", n, MaxCanonical)
	}
}

// field is one decoded field as a Section receives it.
type field struct{ name, value string }

// section feeds fields to a new Section, as a request's header section or,
// with trailers, as a trailer section. Its Vals has room to spare, as when
// a connection reuses it from request to request.
func section(trailers bool, fields ...field) (*Section, http.Header) {
	h := http.Header{}
	vals := make([]string, 0, 32)
	var c Canonicalizer
	var s Section
	s.Reset(h, &vals, &c, trailers)
	for _, f := range fields {
		s.Add(f.name, f.value)
	}
	return &s, h
}

// get is the request pseudo-fields of a GET.
var get = []field{{":method", "GET"}, {":scheme", "https"}, {":path", "/"}, {":authority", "example.com"}}

func with(base []field, more ...field) []field {
	return append(slices.Clone(base), more...)
}

// TestSectionRules: a request's field section is malformed (Bad, and so
// not Valid) when it breaks a rule of RFC 9113 section 8 (RFC 9114 section
// 4 has the same); a well-formed one is Valid when it has the
// pseudo-fields its method needs. Each row names the rule it checks.
func TestSectionRules(t *testing.T) {
	connect := []field{{":method", "CONNECT"}, {":authority", "example.com:443"}}
	for _, tt := range []struct {
		rule   string
		fields []field
		bad    bool // malformed
		valid  bool
	}{
		{"8.3.1: :method, :scheme, :path", get, false, true},
		{"8.3.1: :authority is optional", get[:3], false, true},
		{"8.3.1: Host instead of :authority", with(get[:3], field{"host", "example.com"}), false, true},
		{"8.3.1: no :method", get[1:], false, false},
		{"8.3.1: no :scheme", []field{get[0], get[2], get[3]}, false, false},
		{"8.3.1: no :path", []field{get[0], get[1], get[3]}, false, false},
		{"8.3.1: :path empty", []field{get[0], get[1], {":path", ""}}, true, false},
		{"9110 9.1: :method empty", []field{{":method", ""}, get[1], get[2]}, true, false},
		{"8.3: pseudo-field twice", with(get, field{":path", "/again"}), true, false},
		{"8.3: pseudo-field twice, same value", with(get, field{":method", "GET"}), true, false},
		{"8.3: pseudo-field after a regular field", []field{get[0], get[1], {"accept", "*/*"}, get[2]}, true, false},
		{"8.3: undefined pseudo-field", with(get, field{":foo", "bar"}), true, false},
		{"8.3: response pseudo-field in a request", with(get, field{":status", "200"}), true, false},
		{"8.3: :protocol without SETTINGS_ENABLE_CONNECT_PROTOCOL (RFC 8441)", with(connect, field{":protocol", "websocket"}), true, false},
		{"8.2: regular fields", with(get, field{"accept", "*/*"}, field{"user-agent", "t"}), false, true},
		{"8.2.1: uppercase name", with(get, field{"Accept", "*/*"}), true, false},
		{"8.2.1: empty name", with(get, field{"", "x"}), true, false},
		{"8.2.1: name with SP", with(get, field{"a b", "x"}), true, false},
		{"8.2.1: value with NUL", with(get, field{"x", "a\x00b"}), true, false},
		{"8.2.1: value with CR", with(get, field{"x", "a\rb"}), true, false},
		{"8.2.1: value with LF", with(get, field{"x", "a\nb"}), true, false},
		{"8.2.1: value with leading SP", with(get, field{"x", " a"}), true, false},
		{"8.2.1: value with trailing HTAB", with(get, field{"x", "a\t"}), true, false},
		{"8.2.1: empty value", with(get, field{"x", ""}), false, true},
		{"8.2.2: connection", with(get, field{"connection", "close"}), true, false},
		{"8.2.2: keep-alive", with(get, field{"keep-alive", "timeout=5"}), true, false},
		{"8.2.2: proxy-connection", with(get, field{"proxy-connection", "keep-alive"}), true, false},
		{"8.2.2: transfer-encoding", with(get, field{"transfer-encoding", "chunked"}), true, false},
		{"8.2.2: upgrade", with(get, field{"upgrade", "websocket"}), true, false},
		{"8.2.2: te: trailers", with(get, field{"te", "trailers"}), false, true},
		{"8.2.2: te other than trailers", with(get, field{"te", "gzip"}), true, false},
		{"9110 8.6: content-length twice, same value", with(get, field{"content-length", "5"}, field{"content-length", "5"}), false, true},
		{"9110 8.6: content-length twice, different values", with(get, field{"content-length", "5"}, field{"content-length", "6"}), true, false},
		{"9110 7.2: host twice", with(get[:3], field{"host", "a"}, field{"host", "b"}), true, false},
		{"malformed stays malformed", with(get, field{"Bad", "x"}, field{"accept", "*/*"}), true, false},
		{"8.5: CONNECT with :authority alone", connect, false, true},
		{"8.5: CONNECT without :authority", connect[:1], false, false},
		{"8.5: CONNECT with :scheme", with(connect, field{":scheme", "https"}), false, false},
		{"8.5: CONNECT with :path", with(connect, field{":path", "/"}), false, false},
	} {
		s, _ := section(false, tt.fields...)
		if s.Bad != tt.bad {
			t.Errorf("%s: Bad = %v, want %v", tt.rule, s.Bad, tt.bad)
		}
		if got := s.Valid(); got != tt.valid {
			t.Errorf("%s: Valid() = %v, want %v", tt.rule, got, tt.valid)
		}
	}
}

// TestSectionTrailers: a trailer section carries no pseudo-field (RFC
// 9113 section 8.1): any makes it malformed; its regular fields follow the
// same rules as a header section's.
func TestSectionTrailers(t *testing.T) {
	for _, tt := range []struct {
		rule   string
		fields []field
		bad    bool
	}{
		{"8.1: regular fields", []field{{"grpc-status", "0"}, {"grpc-message", "ok"}}, false},
		{"8.1: no field", nil, false},
		{"8.1: a pseudo-field", []field{{":path", "/"}}, true},
		{"8.1: a pseudo-field after regular ones", []field{{"grpc-status", "0"}, {":status", "200"}}, true},
		{"8.2.1: uppercase name", []field{{"Grpc-Status", "0"}}, true},
		{"8.2.1: value with LF", []field{{"x", "a\nb"}}, true},
		{"8.2.2: connection-specific", []field{{"transfer-encoding", "chunked"}}, true},
	} {
		s, _ := section(true, tt.fields...)
		if s.Bad != tt.bad {
			t.Errorf("%s: Bad = %v, want %v", tt.rule, s.Bad, tt.bad)
		}
	}
}

// TestSectionFields: a request section puts its pseudo-fields, Host and
// Content-Length aside and its other fields into Header under their
// canonical keys, the values of a name in order, each name's slice its own
// (adding to one never changes another's), and split cookie crumbs joined
// into one Cookie with "; " (RFC 9113 section 8.2.3); :authority wins over
// Host (RFC 9113 section 8.3.1). A trailer section puts every field into
// Header, Host and Content-Length included, and does not join cookies.
func TestSectionFields(t *testing.T) {
	s, h := section(false, with(get,
		field{"accept", "a"}, field{"x-b", "1"}, field{"x-c", "2"}, field{"accept", "b"}, field{"x-b", "3"},
		field{"cookie", "a=1"}, field{"cookie", "b=2"}, field{"cookie", "c=3"},
		field{"content-length", "3"}, field{"host", "other.example"})...)
	if s.Bad || !s.Valid() {
		t.Fatalf("Bad = %v, Valid() = %v, want a valid section", s.Bad, s.Valid())
	}
	want := http.Header{
		"Accept": {"a", "b"},
		"X-B":    {"1", "3"},
		"X-C":    {"2"},
		"Cookie": {"a=1; b=2; c=3"},
	}
	if !headerEqual(h, want) {
		t.Errorf("Header = %q, want %q", h, want)
	}
	if s.Method != "GET" || s.Scheme != "https" || s.Path != "/" || s.Authority != "example.com" {
		t.Errorf("pseudo-fields %q %q %q %q, want GET https / example.com", s.Method, s.Scheme, s.Path, s.Authority)
	}
	if got, want := s.ContentLength, "3"; got != want {
		t.Errorf("ContentLength = %q, want %q", got, want)
	}
	if got, want := s.Host, "other.example"; got != want {
		t.Errorf("Host = %q, want %q", got, want)
	}
	if got, want := s.RequestHost(), "example.com"; got != want {
		t.Errorf("RequestHost() = %q, want :authority %q", got, want)
	}

	s, _ = section(false, with(get[:3], field{"host", "h.example"})...)
	if got, want := s.RequestHost(), "h.example"; got != want {
		t.Errorf("without :authority: RequestHost() = %q, want Host %q", got, want)
	}

	s, h = section(true, field{"cookie", "a=1"}, field{"cookie", "b=2"}, field{"host", "h"}, field{"content-length", "1"}, field{"grpc-status", "0"})
	if s.Bad {
		t.Fatal("trailers: Bad, want a well-formed trailer section")
	}
	want = http.Header{"Cookie": {"a=1", "b=2"}, "Host": {"h"}, "Content-Length": {"1"}, "Grpc-Status": {"0"}}
	if !headerEqual(h, want) {
		t.Errorf("trailers: Header = %q, want %q", h, want)
	}
}

func headerEqual(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// TestSectionReset: Reset empties a Section that was used, malformed
// included, for a new section into another header map.
func TestSectionReset(t *testing.T) {
	s, _ := section(false, with(get, field{"Bad", "x"})...)
	if !s.Bad {
		t.Fatal("first section: Bad = false, want a malformed section")
	}
	h := http.Header{}
	var vals []string
	var c Canonicalizer
	s.Reset(h, &vals, &c, false)
	for _, f := range with(get[:3], field{"accept", "x"}) {
		s.Add(f.name, f.value)
	}
	if s.Bad || !s.Valid() || s.Authority != "" {
		t.Errorf("after Reset: Bad %v, Valid() %v, Authority %q, want a valid section without :authority", s.Bad, s.Valid(), s.Authority)
	}
	if got := h["Accept"]; !slices.Equal(got, []string{"x"}) {
		t.Errorf("after Reset: Header[Accept] = %q, want [x]", got)
	}
}

// TestSetTarget: a request's target is origin-form (RFC 9113 section
// 8.3.1), asterisk-form for OPTIONS alone (RFC 9112 section 3.2.4), or
// authority-form for CONNECT (RFC 9113 section 8.5); SetTarget replaces
// all of u with it, and refuses other forms and paths that do not
// unescape.
func TestSetTarget(t *testing.T) {
	for _, tt := range []struct {
		rule   string
		method string
		path   string
		auth   string
		ok     bool
		want   url.URL
	}{
		{"origin-form", "GET", "/a/b?c=d", "", true, url.URL{Path: "/a/b", RawQuery: "c=d"}},
		{"origin-form with escapes", "GET", "/a%2Fb", "", true, url.URL{Path: "/a/b", RawPath: "/a%2Fb"}},
		{"origin-form: the target alone, as net/http's r.URL", "GET", "/", "example.com", true, url.URL{Path: "/"}},
		{"asterisk-form for OPTIONS", "OPTIONS", "*", "", true, url.URL{Path: "*"}},
		{"asterisk-form only for OPTIONS", "GET", "*", "", false, url.URL{}},
		{"authority-form for CONNECT", "CONNECT", "", "example.com:443", true, url.URL{Host: "example.com:443"}},
		{"absolute-form is not a :path", "GET", "http://example.com/", "", false, url.URL{}},
		{"relative path", "GET", "a/b", "", false, url.URL{}},
		{"empty path", "GET", "", "", false, url.URL{}},
		{"malformed percent-escape", "GET", "/a%zz", "", false, url.URL{}},
	} {
		s := Section{Method: tt.method, Path: tt.path, Authority: tt.auth}
		u := url.URL{Scheme: "stale", Host: "stale", Path: "/stale", RawQuery: "stale", Fragment: "stale"}
		ok := s.SetTarget(&u)
		if ok != tt.ok {
			t.Errorf("%s: SetTarget(%s %q) = %v, want %v", tt.rule, tt.method, tt.path, ok, tt.ok)
			continue
		}
		if ok && u != tt.want {
			t.Errorf("%s: SetTarget(%s %q): URL %#v, want %#v", tt.rule, tt.method, tt.path, u, tt.want)
		}
	}
}

// TestLower: Lower lowercases ASCII letters and leaves every other byte,
// obs-text included, as it is; the string it returns lies in *buf.
func TestLower(t *testing.T) {
	var buf []byte
	for _, tt := range []struct{ in, want string }{
		{"Content-Type", "content-type"},
		{"X-B3-TraceId", "x-b3-traceid"},
		{"already-lower", "already-lower"},
		{"AZ@[`{", "az@[`{"},
		{"Caf\xc3\x89", "caf\xc3\x89"},
		{"", ""},
	} {
		got := Lower(&buf, tt.in)
		if got != tt.want {
			t.Errorf("Lower(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if string(buf) != tt.want {
			t.Errorf("Lower(%q): buf holds %q, want %q", tt.in, buf, tt.want)
		}
	}
}

// TestDeclaredLength: a response's declared length is its one
// Content-Length value when that parses as 1*DIGIT (RFC 9110 section 8.6),
// -1 when it does not; the upstream's length when the header map has no
// single Content-Length value.
func TestDeclaredLength(t *testing.T) {
	for _, tt := range []struct {
		rule     string
		values   []string // nil: no Content-Length
		upstream int64
		want     int64
	}{
		{"no Content-Length: the upstream's", nil, 42, 42},
		{"no Content-Length, none upstream", nil, -1, -1},
		{"one value wins over the upstream's", []string{"7"}, 42, 7},
		{"zero", []string{"0"}, -1, 0},
		{"a value that does not parse", []string{"abc"}, 42, -1},
		{"a negative value", []string{"-1"}, 42, -1},
		{"a list is not 1*DIGIT", []string{"7, 7"}, 42, -1},
		{"an empty value", []string{""}, 42, -1},
		{"two values: no single value", []string{"7", "7"}, 42, 42},
	} {
		h := http.Header{}
		if tt.values != nil {
			h["Content-Length"] = tt.values
		}
		if got := DeclaredLength(h, tt.upstream); got != tt.want {
			t.Errorf("%s: DeclaredLength(%q, %d) = %d, want %d", tt.rule, tt.values, tt.upstream, got, tt.want)
		}
	}
}

// TestHasTrailers: a response has trailers when its header map declares
// some (Trailer, RFC 9110 section 6.6.2) or holds some under
// http.TrailerPrefix, and not otherwise.
func TestHasTrailers(t *testing.T) {
	for _, tt := range []struct {
		rule string
		h    http.Header
		want bool
	}{
		{"declared", http.Header{"Trailer": {"Grpc-Status"}}, true},
		{"declared, empty", http.Header{"Trailer": nil}, true},
		{"set under TrailerPrefix", http.Header{http.TrailerPrefix + "Grpc-Status": {"0"}}, true},
		{"none", http.Header{"Content-Type": {"text/plain"}}, false},
		{"empty map", http.Header{}, false},
		{"a name that only contains Trailer", http.Header{"X-Trailer": {"a"}, "Trailers": {"b"}}, false},
	} {
		if got := HasTrailers(tt.h); got != tt.want {
			t.Errorf("%s: HasTrailers(%q) = %v, want %v", tt.rule, tt.h, got, tt.want)
		}
	}
}
