package httpsem

import (
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
	"unsafe"
)

// The field rules HTTP/2 and HTTP/3 share (RFC 9113 section 8.2, RFC 9114
// section 4.2): names are lowercase on the wire, values carry no control
// byte, and the connection-specific fields of HTTP/1.1 are not carried.

// ValidFieldName reports whether name is a lowercase token: uppercase is
// malformed in HTTP/2 and HTTP/3.
func ValidFieldName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !IsTchar(c) || 'A' <= c && c <= 'Z' {
			return false
		}
	}
	return true
}

// ValidFieldValue reports whether value has no control byte but HTAB, and
// no leading or trailing whitespace.
func ValidFieldValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	if n := len(v); n > 0 && (v[0] == ' ' || v[0] == '\t' || v[n-1] == ' ' || v[n-1] == '\t') {
		return false
	}
	return true
}

// ConnectionSpecific reports the fields, by lowercase name, that HTTP/2
// and HTTP/3 do not carry: a request with one is malformed, and a
// response's are not sent.
func ConnectionSpecific(name string) bool {
	switch name {
	case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
		return true
	}
	return false
}

// CommonKey returns the http.Header key of a common lowercase field name,
// without an allocation; ok is false for others (Canonicalizer).
func CommonKey(name string) (key string, ok bool) {
	key, ok = commonKeys[name]
	return key, ok
}

// Canonicalizer gives the http.Header keys of lowercase field names: the
// common ones from a shared table, others from a cache of up to
// MaxCanonical names that belongs to one connection. The zero value is
// ready; it is not safe for concurrent use.
type Canonicalizer struct {
	cache map[string]string
}

// MaxCanonical bounds a connection's cache of uncommon names.
const MaxCanonical = 64

// Key returns the http.Header key of a lowercase field name.
func (c *Canonicalizer) Key(name string) string {
	if k, ok := commonKeys[name]; ok {
		return k
	}
	if k, ok := c.cache[name]; ok {
		return k
	}
	k := textproto.CanonicalMIMEHeaderKey(name)
	if c.cache == nil {
		c.cache = make(map[string]string)
	}
	if len(c.cache) < MaxCanonical {
		c.cache[name] = k
	}
	return k
}

var commonKeys = func() map[string]string {
	m := make(map[string]string)
	for _, k := range []string{
		"Accept", "Accept-Charset", "Accept-Encoding", "Accept-Language", "Accept-Ranges",
		"Access-Control-Request-Headers", "Access-Control-Request-Method", "Authorization",
		"Baggage", "Cache-Control", "Content-Encoding", "Content-Language", "Content-Length",
		"Content-Type", "Cookie", "Date", "Dnt", "Expect", "Forwarded", "From", "Grpc-Accept-Encoding",
		"Grpc-Encoding", "Grpc-Timeout", "If-Match", "If-Modified-Since", "If-None-Match", "If-Range",
		"If-Unmodified-Since", "K-Kubelet-Probe", "Knative-Serving-Namespace", "Knative-Serving-Revision",
		"Max-Forwards", "Origin", "Pragma", "Priority", "Range", "Referer", "Sec-Fetch-Dest", "Sec-Fetch-Mode",
		"Sec-Fetch-Site", "Sec-Fetch-User", "Te", "Traceparent", "Tracestate", "Upgrade-Insecure-Requests",
		"User-Agent", "Via", "X-B3-Flags", "X-B3-Parentspanid", "X-B3-Sampled", "X-B3-Spanid", "X-B3-Traceid",
		"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Real-Ip", "X-Request-Id",
		"X-Requested-With", "B3",
	} {
		m[strings.ToLower(k)] = k
	}
	return m
}()

// Section collects a request's decoded field section as HTTP/2 and HTTP/3
// carry it: the pseudo-fields, Content-Length and Host kept aside, the
// regular fields into Header, and whether the section is malformed (RFC
// 9113 section 8.1.1, RFC 9114 section 4.1.2).
type Section struct {
	Method, Scheme, Path, Authority, Host string
	ContentLength                         string // content-length, if any
	// Trailers marks a trailer section: no pseudo-fields, and every field
	// goes to Header.
	Trailers bool
	// Bad reports a malformed section: a stream error.
	Bad     bool
	regular bool

	// Header receives the regular fields; Vals backs one-value slices, and
	// Canon gives the keys.
	Header http.Header
	Vals   *[]string
	Canon  *Canonicalizer
}

// Reset empties b for a new section into h.
func (b *Section) Reset(h http.Header, vals *[]string, canon *Canonicalizer, trailers bool) {
	*b = Section{Header: h, Vals: vals, Canon: canon, Trailers: trailers}
}

// Add takes one decoded field, name in lowercase as it came.
func (b *Section) Add(name, value string) {
	if b.Bad {
		return
	}
	if len(name) > 0 && name[0] == ':' {
		if b.regular || b.Trailers {
			b.Bad = true
			return
		}
		var p *string
		switch name {
		case ":method":
			p = &b.Method
		case ":scheme":
			p = &b.Scheme
		case ":path":
			p = &b.Path
		case ":authority":
			p = &b.Authority
		default:
			b.Bad = true // :protocol included: extended CONNECT is not offered
			return
		}
		if *p != "" || value == "" {
			b.Bad = true
			return
		}
		*p = value
		return
	}
	b.regular = true
	if !ValidFieldName(name) || !ValidFieldValue(value) || ConnectionSpecific(name) {
		b.Bad = true
		return
	}
	switch name {
	case "te":
		if value != "trailers" {
			b.Bad = true
			return
		}
	case "content-length":
		if b.ContentLength != "" && b.ContentLength != value {
			b.Bad = true
			return
		}
		b.ContentLength = value
		if !b.Trailers {
			return // the request's ContentLength carries it
		}
	case "host":
		if b.Host != "" {
			b.Bad = true
			return
		}
		b.Host = value
		if !b.Trailers {
			return // the request's Host carries it
		}
	}
	key := b.Canon.Key(name)
	h := b.Header
	if vv, ok := h[key]; ok {
		if key == "Cookie" && !b.Trailers {
			// Split crumbs are joined for HTTP/1.1 (RFC 9113 section
			// 8.2.3, RFC 9114 section 4.2.1).
			h[key] = []string{vv[0] + "; " + value}
			return
		}
		h[key] = append(vv, value)
		return
	}
	vals := append(*b.Vals, value)
	*b.Vals = vals
	n := len(vals)
	h[key] = vals[n-1 : n : n]
}

// Valid reports whether a request section has what its method needs: a
// method, and a scheme and a path, or for CONNECT an authority and
// neither.
func (b *Section) Valid() bool {
	if b.Bad || b.Method == "" {
		return false
	}
	if b.Method == http.MethodConnect {
		return b.Scheme == "" && b.Path == "" && b.Authority != ""
	}
	return b.Scheme != "" && b.Path != ""
}

// RequestHost is the request's Host: :authority, or the Host field.
func (b *Section) RequestHost() string {
	if b.Authority != "" {
		return b.Authority
	}
	return b.Host
}

// SetTarget sets u to the request's target. It reports false for a
// target queue cannot serve (not origin-form).
func (b *Section) SetTarget(u *url.URL) bool {
	switch {
	case b.Method == http.MethodConnect:
		*u = url.URL{Host: b.Authority}
		return true
	case b.Path == "*" && b.Method == http.MethodOptions:
		*u = url.URL{Path: "*"}
		return true
	case b.Path == "" || b.Path[0] != '/':
		return false
	}
	*u = url.URL{}
	return SetOrigin(u, b.Path)
}

// Lower returns name in lowercase, as HTTP/2 and HTTP/3 write field names,
// in *buf's storage: valid until the next call with buf.
func Lower(buf *[]byte, name string) string {
	l := append((*buf)[:0], name...)
	for i, c := range l {
		if 'A' <= c && c <= 'Z' {
			l[i] = c + 'a' - 'A'
		}
	}
	*buf = l
	return unsafe.String(unsafe.SliceData(l), len(l))
}

// DeclaredLength is a response's declared length: its Content-Length in h
// when it has one valid value, else upstream (the length the upstream's
// head gave, or -1), or -1 for a value that does not parse.
func DeclaredLength(h http.Header, upstream int64) int64 {
	if v, ok := h["Content-Length"]; ok && len(v) == 1 {
		if n, ok := ParseDigits(v[0]); ok {
			return n
		}
		return -1
	}
	return upstream
}

// HasTrailers reports whether a response's header map declares trailers
// (Trailer) or holds some (http.TrailerPrefix).
func HasTrailers(h http.Header) bool {
	if _, ok := h["Trailer"]; ok {
		return true
	}
	for k := range h {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			return true
		}
	}
	return false
}
