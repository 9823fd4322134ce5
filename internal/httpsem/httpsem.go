// Package httpsem holds the pieces of HTTP semantics (RFC 9110) that
// queue's two engines (h1, h2) share, so that both read a target, check a
// field name's characters, read a Content-Length, find the declared
// trailers and format a Date the same way. It is protocol-neutral: nothing
// of HTTP/1.1's or HTTP/2's wire is here.
package httpsem

import (
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
)

// IsTchar reports a token character (RFC 9110 section 5.6.2), as the
// engines check field names.
func IsTchar(c byte) bool { return c < 0x80 && tchar[c] }

var tchar = func() (t [128]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// ParseDigits reads a Content-Length of 1 to 18 decimal digits and
// nothing else (RFC 9110 section 8.6).
func ParseDigits(f string) (int64, bool) {
	if f == "" || len(f) > 18 {
		return 0, false
	}
	var m int64
	for i := 0; i < len(f); i++ {
		if f[i] < '0' || f[i] > '9' {
			return 0, false
		}
		m = m*10 + int64(f[i]-'0')
	}
	return m, true
}

// SetOrigin fills u from an origin-form target ("/path?query", RFC 9112
// section 3.2.1; an HTTP/2 request's :path, RFC 9113 section 8.3.1), as
// both engines read a request's target: without allocating unless the
// path has percent-escapes. It reports false for a path that does not
// unescape; the caller checks that the target is origin-form.
func SetOrigin(u *url.URL, target string) bool {
	path := target
	if i := strings.IndexByte(target, '?'); i >= 0 {
		path, u.RawQuery = target[:i], target[i+1:]
		u.ForceQuery = u.RawQuery == "" // as net/url: "/a?" stays "/a?" upstream
	}
	if strings.IndexByte(path, '%') < 0 {
		u.Path = path
		if !plainPath(path) {
			// As net/url does: without RawPath, EscapedPath (and so what
			// is sent upstream) would escape what the client sent as is
			// ("/!" as "/%21").
			u.RawPath = path
		}
		return true
	}
	p, err := url.PathUnescape(path)
	if err != nil {
		return false
	}
	u.Path, u.RawPath = p, path
	return true
}

// plainPath reports whether net/url escapes none of path's bytes: ALPHA,
// DIGIT, "-._~" and "$&+,/:;=@".
func plainPath(path string) bool {
	for i := 0; i < len(path); i++ {
		c := path[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("-._~$&+,/:;=@", c) >= 0:
		default:
			return false
		}
	}
	return true
}

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

// The Date field (RFC 9110 section 6.6.1) is formatted once a second.
type dateCache struct {
	sec int64
	b   []byte
}

var date atomic.Pointer[dateCache]

// AppendDate appends the current Date field value (RFC 9110 section
// 6.6.1), formatted once a second.
func AppendDate(b []byte) []byte {
	now := time.Now()
	sec := now.Unix()
	d := date.Load()
	if d == nil || d.sec != sec {
		d = &dateCache{sec: sec, b: now.UTC().AppendFormat(nil, http.TimeFormat)}
		date.Store(d)
	}
	return append(b, d.b...)
}
