package h1

import (
	"encoding/binary"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"unsafe"

	"github.com/queue-dev/queue/internal/httpsem"
)

// Limits bound what a peer may send in one message head. The zero value of
// each field means the default named on it.
type Limits struct {
	// MaxHeadBytes bounds a request head: request line, fields and the empty
	// line. Over it: 431. 0 means 64 KiB.
	MaxHeadBytes int
	// MaxTargetBytes bounds the request target. Over it: 414. 0 means 8 KiB,
	// nginx's default for a request line.
	MaxTargetBytes int
	// MaxFields bounds the number of header fields. Over it: 431. 0 means 100
	// (Envoy's max_headers_count; HAProxy's tune.http.maxhdr is 101).
	MaxFields int
}

// maxMethod bounds a request method: the longest registered ones (IANA's
// HTTP Method Registry) are 17 bytes ("UPDATEREDIRECTREF"), so a longer
// method than this is no method a server knows, only bytes of a request
// line spent on nothing. It is answered 400, like any malformed request
// line, not 501 (RFC 9110 section 9.1: a method the server does not
// implement): queue passes methods it does not know to the upstream, and
// one this long is not a method refused but a request line refused.
// nginx has no bound of its own (its method is bounded by the request
// line's buffer, 414 past it, and a method byte other than A-Z, "_" or
// "-" is 400), nor HAProxy, whose method is any token that fits its
// buffer.
const maxMethod = 32

func (l Limits) head() int   { return orDefault(l.MaxHeadBytes, 64<<10) }
func (l Limits) target() int { return orDefault(l.MaxTargetBytes, 8<<10) }
func (l Limits) fields() int { return orDefault(l.MaxFields, 100) }

func orDefault(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

// Error is a request that cannot be served: the status it gets and why.
// The reason is for logs only; a client sees http.StatusText(Status).
type Error struct {
	Status int
	Reason string
}

func (e *Error) Error() string { return "bad request head: " + e.Reason }

// HTTPStatus returns the status the client gets.
func (e *Error) HTTPStatus() int { return e.Status }

func badRequest(reason string) *Error { return &Error{Status: http.StatusBadRequest, Reason: reason} }

// Errors that parsing returns; each is one *Error value, so that returning
// one allocates nothing.
var (
	errBareLF         = badRequest("bare LF")
	errBareCR         = badRequest("CR not followed by LF")
	errRequestLine    = badRequest("malformed request line")
	errMethod         = badRequest("invalid method")
	errMethodTooLong  = badRequest("method over the limit")
	errTarget         = badRequest("invalid request target")
	errVersion        = badRequest("malformed HTTP version")
	errFieldName      = badRequest("invalid field name")
	errSpaceColon     = badRequest("whitespace before colon")
	errObsFold        = badRequest("obs-fold")
	errFieldValue     = badRequest("invalid field value")
	errNoHost         = badRequest("missing Host")
	errTwoHosts       = badRequest("repeated Host")
	errBadHost        = badRequest("invalid Host")
	errEmptyHost      = badRequest("empty Host with no authority in the target")
	errAsterisk       = badRequest("asterisk-form target of a method other than OPTIONS")
	errContentLength  = badRequest("malformed or differing Content-Length")
	errCLandTE        = badRequest("Content-Length with Transfer-Encoding")
	errTENotChunked   = badRequest("Transfer-Encoding does not end in chunked")
	errTEHTTP10       = badRequest("Transfer-Encoding in HTTP/1.0")
	errChunkedTwice   = badRequest("chunked applied twice")
	errHeadTooLarge   = &Error{Status: http.StatusRequestHeaderFieldsTooLarge, Reason: "head over the limit"}
	errTooManyFields  = &Error{Status: http.StatusRequestHeaderFieldsTooLarge, Reason: "too many fields"}
	errTargetTooLong  = &Error{Status: http.StatusRequestURITooLong, Reason: "target over the limit"}
	errVersionUnknown = &Error{Status: http.StatusHTTPVersionNotSupported, Reason: "unsupported HTTP version"}
	// errNotHTTP is a request line whose version is not HTTP's: the client
	// speaks something else (an HTTP/2 client with a broken preface, a
	// scanner), which an HTTP/1.1 400 would mean nothing to. The
	// connection is closed without an answer, as h2spec 3.5/2 wants of a
	// port that also serves h2c.
	errNotHTTP = &Error{Status: 0, Reason: "not an HTTP request line"}
	errCoding  = &Error{Status: http.StatusNotImplemented, Reason: "unsupported transfer coding"}
	errExpect  = &Error{Status: http.StatusExpectationFailed, Reason: "unsupported expectation"}
)

// Framing says how a request body is delimited.
type Framing uint8

// Framings of a request body (RFC 9112 section 6.3).
const (
	NoBody  Framing = iota // no body
	Length                 // Content-Length bytes
	Chunked                // chunked transfer coding
)

// Head is what the connection needs to know of a parsed request beyond the
// http.Request fields: framing and connection management.
type Head struct {
	Framing       Framing
	ContentLength int64 // with Length
	Close         bool  // the connection closes after this exchange
	KeepAlive10   bool  // an HTTP/1.0 request asked for keep-alive
	Expect100     bool  // Expect: 100-continue
	Upgrade       bool  // an Upgrade field was sent
}

// headEnd returns the length of the head at the start of b, including the
// CRLF CRLF that ends it, or -1 when b holds no complete head. A bare LF is
// found by the parser; here any LF counts as a line end so that a head
// with one is still delimited, and refused with 400, not waited on.
func headEnd(b []byte) int {
	i := 0
	// Empty lines before the request line are skipped, as parse skips them:
	// they do not end a head that has not begun.
	for i+1 < len(b) && b[i] == '\r' && b[i+1] == '\n' {
		i += 2
	}
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
		case i+1 == len(b) && b[i] == '\r':
			return -1
		}
	}
}

func indexByte(b []byte, c byte) int {
	// The standard library's IndexByte is vectorized.
	return strings.IndexByte(unsafe.String(unsafe.SliceData(b), len(b)), c)
}

// str returns b as a string without copying. The string is valid only as
// long as b is not written: the connection keeps a request's head bytes
// unchanged until the handler has returned (doc.go).
func str(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// request is the parser's output: the connection's reused http.Request and
// the storage behind its fields.
type request struct {
	r    *http.Request
	url  *url.URL
	vals []string // backing store for one-value header slices
	head Head
}

// parse parses the complete head b (request line, fields, empty line) into
// q. Field names are canonicalized in place, so b must be writable and
// owned by the request. Strings in q.r point into b.
func (q *request) parse(b []byte, lim Limits) *Error {
	r := q.r
	// RFC 9112 section 2.2: a server SHOULD ignore at least one empty line
	// before the request line.
	for len(b) >= 2 && b[0] == '\r' && b[1] == '\n' {
		b = b[2:]
	}
	line, rest, err := cutLine(b)
	if err != nil {
		return err
	}
	sp1 := indexByte(line, ' ')
	if sp1 <= 0 {
		return errRequestLine
	}
	method := line[:sp1]
	for _, c := range method {
		if !httpsem.IsTchar(c) {
			return errMethod
		}
	}
	if len(method) > maxMethod {
		return errMethodTooLong
	}
	line = line[sp1+1:]
	sp2 := indexByte(line, ' ')
	if sp2 < 0 {
		return errRequestLine
	}
	target, version := line[:sp2], line[sp2+1:]
	if len(target) == 0 {
		return errTarget
	}
	if len(target) > lim.target() {
		return errTargetTooLong
	}
	for _, c := range target {
		if c <= ' ' || c >= 0x7f {
			return errTarget
		}
	}
	switch str(version) {
	case "HTTP/1.1":
		r.Proto, r.ProtoMajor, r.ProtoMinor = "HTTP/1.1", 1, 1
	case "HTTP/1.0":
		r.Proto, r.ProtoMajor, r.ProtoMinor = "HTTP/1.0", 1, 0
	default:
		if len(version) < 5 || !mayBeHTTPVersion(version) {
			return errNotHTTP
		}
		if len(version) == 8 && str(version[:5]) == "HTTP/" && isDigit(version[5]) && version[6] == '.' && isDigit(version[7]) {
			return errVersionUnknown
		}
		return errVersion
	}
	r.Method = internMethod(method)
	r.RequestURI = str(target)
	if e := q.setURL(r.RequestURI); e != nil {
		return e
	}

	h := r.Header
	q.vals = q.vals[:0]
	q.head = Head{}
	var (
		hosts, fields int
		cl            = int64(-1)
		te            []byte
		teSeen        bool
		connection    []byte
	)
	for {
		line, rest, err = cutLine(rest)
		if err != nil {
			return err
		}
		if len(line) == 0 {
			break
		}
		if fields++; fields > lim.fields() {
			return errTooManyFields
		}
		if line[0] == ' ' || line[0] == '\t' {
			return errObsFold // RFC 9112 section 5.2: reject, as a server may
		}
		colon := indexByte(line, ':')
		if colon <= 0 {
			return errFieldName
		}
		name := line[:colon]
		if i := canonicalToken(name); i >= 0 {
			if c := name[i]; (c == ' ' || c == '\t') && i > 0 {
				return errSpaceColon // RFC 9112 section 5.1: MUST reject
			}
			return errFieldName
		}
		value := trimOWS(line[colon+1:])
		if !validValue(value) {
			return errFieldValue
		}
		key, v := str(name), str(value)
		switch key {
		case "Host":
			if hosts++; hosts > 1 {
				return errTwoHosts
			}
			if !validHost(value) {
				return errBadHost
			}
			if len(value) == 0 && r.URL.Host == "" {
				// RFC 9112 section 3.2: Host may be empty only when the
				// target has no authority to give, and an origin-form or
				// asterisk-form target takes its authority from Host; an
				// http URI with an empty host is invalid (RFC 9110
				// section 4.2.1), and a server MUST answer an invalid
				// Host with 400.
				return errEmptyHost
			}
			r.Host = v
			continue // net/http's convention: Host lives in r.Host only
		case "Content-Length":
			n, ok := parseContentLength(v)
			if !ok || (cl >= 0 && n != cl) {
				return errContentLength
			}
			if cl >= 0 {
				continue // a repeated, equal value is kept once
			}
			cl = n
		case "Transfer-Encoding":
			if teSeen {
				// Rare: a second field line. A fresh slice: te points into
				// the head, which append must not overwrite.
				te = append(append(append([]byte(nil), te...), ','), value...)
			} else {
				te, teSeen = value, true
			}
			continue
		case "Connection":
			if connection == nil {
				connection = value
			} else {
				connection = nil // two lines: judged from the map below
			}
		case "Expect":
			if !strings.EqualFold(v, "100-continue") {
				return errExpect
			}
			// RFC 9110 section 10.1.1: an HTTP/1.0 client gets no 100.
			q.head.Expect100 = r.ProtoMinor == 1
		case "Upgrade":
			q.head.Upgrade = true
		}
		q.vals = append(q.vals, v)
		n := len(q.vals)
		if old, ok := h[key]; ok {
			h[key] = append(old, v)
		} else {
			h[key] = q.vals[n-1 : n : n]
		}
	}
	if len(rest) != 0 {
		return errRequestLine // the caller passes exactly one head
	}
	if r.ProtoMinor == 1 && hosts == 0 {
		return errNoHost // RFC 9112 section 3.2
	}
	if r.URL.Host != "" {
		r.Host = r.URL.Host // RFC 9112 section 3.2.2: the target's authority wins over Host
	}

	// Framing, RFC 9112 section 6.
	switch {
	case teSeen:
		if cl >= 0 {
			return errCLandTE // section 6.3 item 3: a server ought to reject it
		}
		if r.ProtoMinor == 0 {
			return errTEHTTP10 // section 6.1: faulty framing
		}
		if e := parseTE(te); e != nil {
			return e
		}
		q.head.Framing = Chunked
		r.ContentLength = -1
		r.TransferEncoding = chunkedTE
	case cl > 0:
		q.head.Framing, q.head.ContentLength = Length, cl
		r.ContentLength = cl
		r.TransferEncoding = nil
	default:
		r.ContentLength = 0
		r.TransferEncoding = nil
	}

	// Connection management, RFC 9112 section 9.3.
	closeTok, keepAliveTok := false, false
	if connection != nil {
		closeTok, keepAliveTok = connectionTokens(str(connection))
	} else if vv := h["Connection"]; len(vv) > 1 {
		for _, v := range vv {
			c, k := connectionTokens(v)
			closeTok, keepAliveTok = closeTok || c, keepAliveTok || k
		}
	}
	if r.ProtoMinor == 0 {
		q.head.KeepAlive10 = keepAliveTok && !closeTok
		q.head.Close = !q.head.KeepAlive10
	} else {
		q.head.Close = closeTok
	}
	r.Close = q.head.Close
	return nil
}

var chunkedTE = []string{"chunked"}

// parseTE checks a Transfer-Encoding list: it must end in chunked, and
// chunked must appear once (RFC 9112 section 6.1). Other codings are not
// supported (501): the upstream is sent the body de-chunked and re-framed,
// so a coding queue does not decode would be lost on the way.
func parseTE(v []byte) *Error {
	s := str(v)
	var n, chunked int
	last := ""
	for s != "" {
		var tok string
		tok, s, _ = strings.Cut(s, ",")
		if tok = strings.Trim(tok, " \t"); tok == "" {
			continue
		}
		n++
		last = tok
		if strings.EqualFold(tok, "chunked") {
			chunked++
		}
	}
	switch {
	case !strings.EqualFold(last, "chunked"):
		return errTENotChunked
	case chunked > 1:
		return errChunkedTwice
	case n != chunked:
		return errCoding
	}
	return nil
}

// connectionTokens reports whether a Connection value holds close and
// keep-alive.
func connectionTokens(v string) (closeTok, keepAlive bool) {
	for v != "" {
		var tok string
		tok, v, _ = strings.Cut(v, ",")
		tok = strings.Trim(tok, " \t")
		switch {
		case strings.EqualFold(tok, "close"):
			closeTok = true
		case strings.EqualFold(tok, "keep-alive"):
			keepAlive = true
		}
	}
	return closeTok, keepAlive
}

// setURL fills q.url from an origin-form target (the only form an origin
// sidecar serves; the asterisk form is kept as a path of "*"). Other forms
// are parsed by net/url, which allocates; the proxy refuses them later.
func (q *request) setURL(target string) *Error {
	u := q.url
	*u = url.URL{}
	q.r.URL = u
	if target[0] != '/' {
		authority := q.r.Method == http.MethodConnect
		if target == "*" && !authority {
			// RFC 9112 section 3.2.4: the asterisk-form is only for a
			// server-wide OPTIONS.
			if q.r.Method != http.MethodOptions {
				return errAsterisk
			}
			u.Path = "*"
			return nil
		}
		if authority {
			// The authority form (RFC 9112 section 3.2.3) parsed as net/http
			// does: as the authority of a URL without a scheme.
			target = "http://" + target
		}
		pu, err := url.ParseRequestURI(target)
		if err != nil {
			return errTarget
		}
		if authority {
			pu.Scheme = ""
		}
		q.r.URL = pu
		return nil
	}
	if !httpsem.SetOrigin(u, target) {
		return errTarget
	}
	return nil
}

// cutLine splits b at the first CRLF. A bare LF, or a CR not followed by
// LF, is an error (RFC 9112 section 2.2: a server may accept a bare LF;
// queue, like HAProxy, does not, so that no two parsers on the way can
// disagree on where a line ends).
func cutLine(b []byte) (line, rest []byte, err *Error) {
	if line, rest, err = cutLineEnd(b); err == nil && indexByte(line, '\r') >= 0 {
		return nil, nil, errBareCR
	}
	return line, rest, err
}

// cutLineEnd is cutLine without the look for a CR inside the line, for a
// parser that refuses one by the bytes each part of a line may hold (the
// response head's status line and fields): a scan those checks make anyway.
func cutLineEnd(b []byte) (line, rest []byte, err *Error) {
	i := indexByte(b, '\n')
	if i < 0 {
		return b, nil, errRequestLine
	}
	if i == 0 || b[i-1] != '\r' {
		return nil, nil, errBareLF
	}
	return b[:i-1], b[i+1:], nil
}

func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// asciiTable is a lookup table of the ASCII letters and digits and extra.
func asciiTable(extra string) (t [128]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range extra {
		t[c] = true
	}
	return t
}

// canonicalToken checks that the field name b is a token and rewrites it in
// place into the canonical form net/http uses for map keys ("content-type"
// -> "Content-Type"), in one pass. It returns the index of the first byte
// that is not a token character, or -1; b is then partly rewritten.
func canonicalToken(b []byte) int {
	upper := true
	for i, c := range b {
		if !httpsem.IsTchar(c) {
			return i
		}
		if upper {
			if 'a' <= c && c <= 'z' {
				b[i] = c - ('a' - 'A')
			}
		} else if 'A' <= c && c <= 'Z' {
			b[i] = c + ('a' - 'A')
		}
		upper = c == '-'
	}
	return -1
}

// validValue reports whether a field value (or a reason phrase, or a chunk
// extension) holds no control character but HTAB: RFC 9110 section 5.5
// allows visible ASCII, SP, HTAB and obs-text (0x80 to 0xff). It looks at
// eight bytes at a time: a word with no byte below 0x20 and none equal to
// 0x7f passes whole, and only a word that has one, which may be a tab, is
// looked at byte by byte.
func validValue(v []byte) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(v); i += 8 {
		x := binary.LittleEndian.Uint64(v[i:])
		y := x ^ (ones * 0x7f)
		// A byte below 0x20 borrows into its high bit, as does a zero
		// byte of y (a 0x7f of x); bytes of 0x80 and above have theirs
		// set in x and are masked out.
		if ((x-ones*0x20)&^x|(y-ones)&^y)&highs != 0 && !validBytes(v[i:i+8]) {
			return false
		}
	}
	return validBytes(v[i:])
}

func validBytes(v []byte) bool {
	for _, c := range v {
		if c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// parseContentLength accepts 1*DIGIT, or a list of equal such values (RFC
// 9110 section 8.6), up to 18 digits.
func parseContentLength(s string) (int64, bool) {
	// Nearly every value is plain digits: read them with no list
	// splitting or trimming.
	if n, ok := httpsem.ParseDigits(s); ok {
		return n, true
	}
	n := int64(-1)
	for {
		var f string
		var more bool // a comma follows: so must another value ("5," is refused)
		f, s, more = strings.Cut(s, ",")
		m, ok := httpsem.ParseDigits(strings.Trim(f, " \t"))
		if !ok || n >= 0 && m != n {
			return 0, false
		}
		n = m
		if !more {
			return n, true
		}
	}
}

// validHost checks a Host value: uri-host [ ":" port ] (RFC 9110 section
// 7.2), by the characters it may hold; an empty value is allowed.
func validHost(v []byte) bool {
	for _, c := range v {
		if !hostChar(c) {
			return false
		}
	}
	return true
}

func hostChar(c byte) bool { return c < 0x80 && hostChars[c] }

// hostChars are the bytes of uri-host [ ":" port ]: unreserved,
// sub-delims, ":" and "[]" of an IP literal, and "%" of a pct-encoding or
// zone (RFC 3986 section 3.2.2).
var hostChars = asciiTable("-._~!$&'()*+,;=:[]%")

// internMethod returns a static string for the common methods, so that the
// method outlives the head's buffer; other methods point into it.
func internMethod(m []byte) string {
	switch str(m) {
	case "GET":
		return http.MethodGet
	case "HEAD":
		return http.MethodHead
	case "POST":
		return http.MethodPost
	case "PUT":
		return http.MethodPut
	case "DELETE":
		return http.MethodDelete
	case "OPTIONS":
		return http.MethodOptions
	case "PATCH":
		return http.MethodPatch
	case "CONNECT":
		return http.MethodConnect
	case "TRACE":
		return http.MethodTrace
	}
	return str(m)
}

// isPrefaceStart reports whether b, the first bytes of a connection, may
// still be the start of the HTTP/2 client preface (RFC 9113 section 3.4).
func isPrefaceStart(b []byte) bool {
	n := min(len(b), len(preface))
	return str(b[:n]) == preface[:n]
}

const preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// errChunk is a malformed chunked body.
var errChunk = errors.New("malformed chunked body")
