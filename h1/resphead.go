package h1

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/queue-dev/queue/internal/engine"
)

// ResponseHead is what a client needs to know of a response head beyond
// its fields.
type ResponseHead struct {
	Status        int
	ContentLength int64         // -1: none given
	Chunked       bool          // Transfer-Encoding ends in chunked
	Close         bool          // the connection cannot carry another request
	Upgrade       string        // the Upgrade value (for a 101)
	KeepAlive     time.Duration // Keep-Alive: timeout=N, or 0
	Date          bool          // a Date field is among the fields
}

// Errors of a response head. Each is one value: returning it allocates
// nothing.
var (
	ErrStatusLine       = errors.New("malformed status line")
	ErrResponseField    = errors.New("malformed response field")
	ErrResponseFraming  = errors.New("malformed or differing Content-Length")
	errResponseLineEnds = errors.New("bare LF in a response head")
)

// ParseResponse parses the complete response head b (status line, fields,
// empty line) and adds its fields to h, by the same rules as a request
// head: CRLF line ends, no obs-fold, token names, no control characters in
// values. Field names are canonicalized in place and keys and values point
// into b, which must stay unchanged for as long as h is used. vals is
// scratch space for the one-value slices, reused across calls.
//
// Fields for which skip reports true are left out of h, after the ones
// this function reads itself: Transfer-Encoding, Connection (and the fields
// it names), Keep-Alive and Upgrade never reach h; Content-Length does,
// once, unless Transfer-Encoding overrides it.
func ParseResponse(b []byte, h http.Header, vals *[]string, skip func(key string) bool) (ResponseHead, error) {
	rh, _, err := parseResponse(b, h, vals, nil, skip)
	return rh, err
}

// ParseResponseFields is ParseResponse for a head that is passed on as it
// came (engine.ResponseHead): instead of adding the fields to a map it
// appends them to *fields, their strings pointing into b. Content-Length
// is left out of the fields (it is in rh), as are the fields ParseResponse
// leaves out of its map. ok is false for a head that needs the map form:
// one with a Trailer field (the response writer must know its trailers) or
// with a Connection option that names a field to drop; the caller then
// parses b again with ParseResponse, which the names canonicalized in
// place do not change.
func ParseResponseFields(b []byte, fields *[]engine.Field, skip func(key string) bool) (rh ResponseHead, ok bool, err error) {
	rh, ok, err = parseResponse(b, nil, nil, fields, skip)
	return rh, ok, err
}

// parseResponse is ParseResponse into h, or ParseResponseFields into
// fields when h is nil.
func parseResponse(b []byte, h http.Header, vals *[]string, fields *[]engine.Field, skip func(key string) bool) (ResponseHead, bool, error) {
	rh := ResponseHead{ContentLength: -1}
	line, rest, e := cutLineEnd(b)
	if e != nil {
		return rh, false, errResponseLineEnds
	}
	// HTTP-version SP 3DIGIT SP [reason-phrase]; a missing reason with no
	// space is accepted as net/http does.
	if len(line) < 12 || str(line[:7]) != "HTTP/1." || line[8] != ' ' || (len(line) > 12 && line[12] != ' ') {
		return rh, false, ErrStatusLine
	}
	http10 := line[7] == '0'
	if line[7] != '0' && line[7] != '1' {
		return rh, false, ErrStatusLine
	}
	for _, c := range line[9:12] {
		if !isDigit(c) {
			return rh, false, ErrStatusLine
		}
		rh.Status = rh.Status*10 + int(c-'0')
	}
	if rh.Status < 100 {
		return rh, false, ErrStatusLine
	}
	if !validValue(line[min(len(line), 13):]) {
		return rh, false, ErrStatusLine
	}
	if h != nil {
		*vals = (*vals)[:0]
	}
	var (
		connection []byte
		conns      int
		te         bool
	)
	for {
		line, rest, e = cutLineEnd(rest)
		if e != nil {
			return rh, false, errResponseLineEnds
		}
		if len(line) == 0 {
			break
		}
		if line[0] == ' ' || line[0] == '\t' {
			return rh, false, ErrResponseField // obs-fold (RFC 9112 section 5.2)
		}
		colon := indexByte(line, ':')
		if colon <= 0 {
			return rh, false, ErrResponseField
		}
		name := line[:colon]
		if canonicalToken(name) >= 0 {
			return rh, false, ErrResponseField
		}
		value := trimOWS(line[colon+1:])
		if !validValue(value) {
			return rh, false, ErrResponseField
		}
		key, v := str(name), str(value)
		switch key {
		case "Content-Length":
			n, ok := parseContentLength(v)
			if !ok || (rh.ContentLength >= 0 && n != rh.ContentLength) {
				return rh, false, ErrResponseFraming
			}
			if rh.ContentLength >= 0 || h == nil {
				rh.ContentLength = n
				continue // a repeated, equal value is sent once; lines leave it to rh
			}
			rh.ContentLength = n
		case "Transfer-Encoding":
			te = true
			rh.Chunked = strings.EqualFold(lastToken(v), "chunked")
			continue
		case "Connection":
			if conns++; conns == 1 {
				connection = value
			} else {
				// Rare: a second line. A fresh slice, as connection points
				// into b, which append must not overwrite.
				connection = append(append(append([]byte(nil), connection...), ','), value...)
			}
			continue
		case "Keep-Alive":
			// Hop-by-hop, so never forwarded; its timeout tells a pool
			// when the server will close the connection once idle.
			if d := keepAliveTimeout(v); d > 0 && (rh.KeepAlive == 0 || d < rh.KeepAlive) {
				rh.KeepAlive = d
			}
			continue
		case "Upgrade":
			rh.Upgrade = v
			continue
		case "Date":
			rh.Date = true
		case "Trailer":
			if h == nil {
				return rh, false, nil
			}
		}
		if skip != nil && skip(key) {
			continue
		}
		if h == nil {
			*fields = append(*fields, engine.Field{Name: key, Value: v})
			continue
		}
		*vals = append(*vals, v)
		n := len(*vals)
		if old, ok := h[key]; ok {
			h[key] = append(old, v)
		} else {
			h[key] = (*vals)[n-1 : n : n]
		}
	}
	if len(rest) != 0 {
		return rh, false, ErrResponseField
	}
	if te {
		// Transfer-Encoding overrides Content-Length (RFC 9112 section
		// 6.3); a response with both is suspect, so the connection is not
		// reused.
		if rh.ContentLength >= 0 {
			delete(h, "Content-Length")
			rh.ContentLength = -1
			rh.Close = true
		}
		if !rh.Chunked {
			rh.Close = true // read until close
		}
	}
	keepAlive := false
	s := str(connection)
	for s != "" {
		var tok string
		tok, s, _ = strings.Cut(s, ",")
		switch tok = strings.Trim(tok, " \t"); {
		case strings.EqualFold(tok, "close"):
			rh.Close = true
		case strings.EqualFold(tok, "keep-alive"):
			keepAlive = true
		case strings.EqualFold(tok, "upgrade"), tok == "":
		default:
			// A field the connection option names is hop-by-hop (RFC 9110
			// section 7.6.1).
			if h == nil {
				return rh, false, nil
			}
			delete(h, http.CanonicalHeaderKey(tok))
		}
	}
	if http10 && (!keepAlive || te) {
		// HTTP/1.0 closes unless it says keep-alive; Transfer-Encoding in
		// an HTTP/1.0 message is faulty framing (RFC 9112 section 6.1).
		rh.Close = true
	}
	return rh, true, nil
}

func lastToken(v string) string {
	if i := strings.LastIndexByte(v, ','); i >= 0 {
		v = v[i+1:]
	}
	return strings.Trim(v, " \t")
}

// keepAliveTimeout returns the timeout parameter of a Keep-Alive value such
// as "timeout=5, max=1000" (RFC 2068 section 19.7.1.1, which servers such as
// Node.js and Apache still send), or 0 when it has none: whole seconds, 1 to
// 999999999, quoted or not.
func keepAliveTimeout(v string) time.Duration {
	for v != "" {
		var param string
		param, v, _ = strings.Cut(v, ",")
		name, val, ok := strings.Cut(param, "=")
		if !ok || !strings.EqualFold(strings.Trim(name, " \t"), "timeout") {
			continue
		}
		val = strings.Trim(val, " \t")
		if len(val) >= 2 && val[0] == '"' && val[len(val)-1] == '"' {
			val = val[1 : len(val)-1]
		}
		if val == "" || len(val) > 9 {
			return 0
		}
		var n int64
		for i := 0; i < len(val); i++ {
			if !isDigit(val[i]) {
				return 0
			}
			n = n*10 + int64(val[i]-'0')
		}
		return time.Duration(n) * time.Second
	}
	return 0
}

// HeadEnd returns the length of the message head at the start of b,
// including the empty line that ends it, or -1 when b holds no complete
// head. Any LF counts as a line end here, so that a head with a bare LF is
// delimited and then refused by the parser, not waited on.
func HeadEnd(b []byte) int { return headEnd(b) }

// ParseContentLength parses a Content-Length value: 1*DIGIT, or a list of
// equal such values (RFC 9110 section 8.6), up to 18 digits.
func ParseContentLength(v string) (int64, bool) { return parseContentLength(v) }
