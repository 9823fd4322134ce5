package proxy

import (
	"fmt"
	"net/http"
	"net/textproto"
	"strings"

	"github.com/queue-dev/queue/headers"
	"golang.org/x/net/http/httpguts"
)

// respHead is what the HTTP/1.1 client needs to know of an upstream response
// head beyond the header fields themselves.
type respHead struct {
	code          int
	contentLength int64  // -1: none given
	chunked       bool   // Transfer-Encoding ends in chunked
	close         bool   // the connection cannot carry another request
	upgrade       string // Upgrade value (101 only)
}

// headEnd returns the length of the response head at the start of b,
// including the empty line that ends it, or -1 when b holds no complete
// head. A bare LF ends a line as well as CRLF (RFC 9112 section 2.2).
func headEnd(b []byte) int {
	i := 0
	for {
		j := indexByte(b[i:], '\n')
		if j < 0 {
			return -1
		}
		i += j + 1
		switch {
		case i < len(b) && b[i] == '\n':
			return i + 1
		case i+1 < len(b) && b[i] == '\r' && b[i+1] == '\n':
			return i + 2
		}
	}
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

func cutLine(s string) (line, rest string) {
	i := strings.IndexByte(s, '\n')
	if i < 0 {
		line, rest = s, ""
	} else {
		line, rest = s[:i], s[i+1:]
	}
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, rest
}

// parseHead parses a complete response head s (status line, fields, empty
// line) and adds its end-to-end fields to h. Hop-by-hop fields (RFC 9110
// section 7.6.1) and Transfer-Encoding are left out; Content-Length stays.
//
// It allocates once for the values, and once more per key that is neither
// canonical already nor a common header name. Keys and values are
// substrings of s.
func parseHead(s string, h http.Header) (respHead, error) {
	rh := respHead{contentLength: -1}
	line, rest := cutLine(s)
	// HTTP-version SP 3DIGIT SP [reason-phrase]; a missing reason with no
	// space is accepted as net/http does.
	if len(line) < 12 || line[:7] != "HTTP/1." || line[8] != ' ' || (len(line) > 12 && line[12] != ' ') {
		return rh, fmt.Errorf("%w: status line %q", errBadResponse, truncate(line))
	}
	http10 := line[7] == '0'
	switch line[7] {
	case '0', '1':
	default:
		return rh, fmt.Errorf("%w: version %q", errBadResponse, truncate(line))
	}
	for _, c := range line[9:12] {
		if c < '0' || c > '9' {
			return rh, fmt.Errorf("%w: status %q", errBadResponse, truncate(line))
		}
		rh.code = rh.code*10 + int(c-'0')
	}
	if rh.code < 100 {
		return rh, fmt.Errorf("%w: status %d", errBadResponse, rh.code)
	}
	var (
		vals       = make([]string, 0, strings.Count(rest, "\n"))
		connection string
		te         bool
	)
	for rest != "" {
		line, rest = cutLine(rest)
		if line == "" {
			break
		}
		if line[0] == ' ' || line[0] == '\t' {
			// obs-fold: a proxy must reject or rewrite it (RFC 9112 section 5.2).
			return rh, fmt.Errorf("%w: folded header line", errBadResponse)
		}
		colon := strings.IndexByte(line, ':')
		if colon <= 0 || !httpguts.ValidHeaderFieldName(line[:colon]) {
			return rh, fmt.Errorf("%w: header line %q", errBadResponse, truncate(line))
		}
		value := trimOWS(line[colon+1:])
		if !httpguts.ValidHeaderFieldValue(value) {
			return rh, fmt.Errorf("%w: header value of %q", errBadResponse, line[:colon])
		}
		key := textproto.CanonicalMIMEHeaderKey(line[:colon])
		switch key {
		case headers.ContentLength:
			n, ok := parseContentLength(value)
			if !ok || (rh.contentLength >= 0 && n != rh.contentLength) {
				return rh, fmt.Errorf("%w: content-length %q", errBadResponse, truncate(value))
			}
			if rh.contentLength >= 0 {
				continue // a repeated, equal value is sent once
			}
			rh.contentLength = n
		case headers.TransferEncoding:
			te = true
			rh.chunked = lastToken(value) == "chunked"
			continue
		case headers.Connection:
			if connection == "" {
				connection = value
			} else {
				connection += "," + value
			}
			continue
		case headers.KeepAlive, headers.ProxyConnection, headers.TE, headers.HTTP2Settings:
			continue
		case headers.Upgrade:
			rh.upgrade = value
			continue
		}
		vals = append(vals, value)
		if old, ok := h[key]; ok {
			h[key] = append(old, value)
		} else {
			h[key] = vals[len(vals)-1 : len(vals) : len(vals)]
		}
	}
	if te {
		// Transfer-Encoding overrides Content-Length (RFC 9112 section 6.3);
		// a response with both is suspect, so the connection is not reused.
		if rh.contentLength >= 0 {
			delete(h, headers.ContentLength)
			rh.contentLength = -1
			rh.close = true
		}
		if !rh.chunked {
			rh.close = true // read until close
		}
	}
	keepAlive := false
	for connection != "" {
		var tok string
		tok, connection, _ = strings.Cut(connection, ",")
		switch tok = strings.TrimSpace(tok); {
		case strings.EqualFold(tok, "close"):
			rh.close = true
		case strings.EqualFold(tok, "keep-alive"):
			keepAlive = true
		case strings.EqualFold(tok, "upgrade"), tok == "":
		default:
			if httpguts.ValidHeaderFieldName(tok) {
				delete(h, textproto.CanonicalMIMEHeaderKey(tok))
			}
		}
	}
	if http10 && (!keepAlive || te) {
		// HTTP/1.0 closes unless it says keep-alive; Transfer-Encoding in
		// an HTTP/1.0 message is faulty framing (RFC 9112 section 6.1).
		rh.close = true
	}
	return rh, nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

func trimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

func lastToken(v string) string {
	if i := strings.LastIndexByte(v, ','); i >= 0 {
		v = v[i+1:]
	}
	return strings.ToLower(trimOWS(v))
}

// parseContentLength accepts 1*DIGIT, or a list of equal such values (RFC
// 9110 section 8.6), up to 2^62.
func parseContentLength(v string) (int64, bool) {
	n := int64(-1)
	for v != "" {
		var f string
		f, v, _ = strings.Cut(v, ",")
		f = trimOWS(f)
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
		if n >= 0 && m != n {
			return 0, false
		}
		n = m
	}
	return n, n >= 0
}

// parseChunkSize parses a chunk-size line (RFC 9112 section 7.1) without its
// line ending; extensions are ignored.
func parseChunkSize(line []byte) (int64, bool) {
	if i := indexByte(line, ';'); i >= 0 {
		line = line[:i]
	}
	for len(line) > 0 && (line[len(line)-1] == ' ' || line[len(line)-1] == '\t') {
		line = line[:len(line)-1]
	}
	if len(line) == 0 || len(line) > 15 {
		return 0, false
	}
	var n int64
	for _, c := range line {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		n = n<<4 | int64(c)
	}
	return n, true
}

// forbiddenTrailer reports trailer fields that must not be forwarded: framing,
// routing and hop-by-hop fields (RFC 9110 section 6.5.1).
func forbiddenTrailer(key string) bool {
	switch key {
	case headers.ContentLength, headers.TransferEncoding, "Host", "Content-Type", "Content-Encoding",
		"Content-Range", headers.Trailer, headers.Connection, headers.KeepAlive,
		headers.ProxyConnection, headers.TE, headers.Upgrade:
		return true
	}
	return false
}
