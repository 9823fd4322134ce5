package h1

import (
	"bytes"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// parseHead parses the head at the start of in as a connection does: the
// head found by headEnd, copied (parse canonicalizes names in place), into
// a fresh request. It returns a nil *Error on success; incomplete is true
// when in holds no complete head.
func parseHead(in []byte, lim Limits) (q *request, err *Error, incomplete bool) {
	q = &request{r: &http.Request{Header: http.Header{}}, url: &url.URL{}}
	n := headEnd(in)
	if n < 0 {
		return q, nil, true
	}
	head := append([]byte(nil), in[:n]...)
	return q, q.parse(head, lim), false
}

// TestParse is the head parser's table: each head parses to the method,
// target, host, framing, length, close and fields given, or is refused
// with the status given (RFC 9112 sections 2 to 6, RFC 9110 section 7.2).
func TestParse(t *testing.T) {
	t.Parallel()
	const get = "GET / HTTP/1.1\r\nHost: a\r\n"
	const post = "POST / HTTP/1.1\r\nHost: a\r\n"
	lim := Limits{MaxTargetBytes: 64, MaxFields: 4}
	cases := []struct {
		name   string
		in     string
		status int // 0: parsed
		// What a parsed request holds.
		method, target, host string
		framing              Framing
		length               int64
		close                bool
		header               http.Header // nil: not checked
	}{
		{name: "GET", in: get + "\r\n", method: "GET", target: "/", host: "a", header: http.Header{}},
		{name: "names canonicalized, values trimmed", in: get + "x-a-b:  1 \t\r\nX-A-B: 2\r\ncontent-TYPE:t\r\n\r\n", method: "GET", target: "/", host: "a",
			header: http.Header{"X-A-B": {"1", "2"}, "Content-Type": {"t"}}},
		{name: "custom method kept", in: "PURGE /x?y HTTP/1.1\r\nHost: a\r\n\r\n", method: "PURGE", target: "/x?y", host: "a", header: http.Header{}},
		{name: "leading empty lines", in: "\r\n\r\n" + get + "\r\n", method: "GET", target: "/", host: "a"},
		{name: "HTTP/1.0 without Host", in: "GET / HTTP/1.0\r\n\r\n", method: "GET", target: "/", close: true},
		{name: "HTTP/1.0 keep-alive", in: "GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", method: "GET", target: "/"},
		{name: "HTTP/1.1 close among tokens", in: get + "Connection: foo, close\r\n\r\n", method: "GET", target: "/", host: "a", close: true},
		{name: "close in a second Connection line", in: get + "Connection: foo\r\nConnection: close\r\n\r\n", method: "GET", target: "/", host: "a", close: true},
		{name: "Content-Length", in: post + "Content-Length: 12\r\n\r\n", method: "POST", target: "/", host: "a", framing: Length, length: 12},
		{name: "Content-Length 0 is no body", in: post + "Content-Length: 0\r\n\r\n", method: "POST", target: "/", host: "a", framing: NoBody},
		{name: "equal Content-Length list", in: post + "Content-Length: 5, 5\r\n\r\n", method: "POST", target: "/", host: "a", framing: Length, length: 5},
		{name: "repeated equal Content-Length kept once", in: post + "Content-Length: 5\r\nContent-Length: 5\r\n\r\n", method: "POST", target: "/", host: "a", framing: Length, length: 5,
			header: http.Header{"Content-Length": {"5"}}},
		{name: "chunked", in: post + "Transfer-Encoding: chunked\r\n\r\n", method: "POST", target: "/", host: "a", framing: Chunked, length: -1, header: http.Header{}},
		{name: "chunked over two lines", in: post + "Transfer-Encoding: \r\nTransfer-Encoding: chunked\r\n\r\n", method: "POST", target: "/", host: "a", framing: Chunked, length: -1},
		{name: "absolute form: the authority is the host", in: "GET http://b:8080/x HTTP/1.1\r\nHost: a\r\n\r\n", method: "GET", target: "http://b:8080/x", host: "b:8080"},
		{name: "authority form", in: "CONNECT b:443 HTTP/1.1\r\nHost: a\r\n\r\n", method: "CONNECT", target: "b:443", host: "b:443"},
		{name: "asterisk form", in: "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", method: "OPTIONS", target: "*", host: "a"},
		{name: "empty Host, absolute form", in: "GET http://b/x HTTP/1.1\r\nHost:\r\n\r\n", method: "GET", target: "http://b/x", host: "b"},
		{name: "method at the limit", in: strings.Repeat("M", maxMethod) + " / HTTP/1.1\r\nHost: a\r\n\r\n", method: strings.Repeat("M", maxMethod), target: "/", host: "a"},
		{name: "target at the limit", in: "GET /" + strings.Repeat("a", 63) + " HTTP/1.1\r\nHost: a\r\n\r\n", method: "GET", target: "/" + strings.Repeat("a", 63), host: "a"},

		{name: "target over the limit", in: "GET /" + strings.Repeat("a", 64) + " HTTP/1.1\r\nHost: a\r\n\r\n", status: 414},
		{name: "too many fields", in: get + "A: 1\r\nB: 1\r\nC: 1\r\nD: 1\r\n\r\n", status: 431},
		{name: "bare LF", in: "GET / HTTP/1.1\nHost: a\r\n\r\n", status: 400},
		{name: "bare CR", in: get + "X: a\rb\r\n\r\n", status: 400},
		{name: "no version", in: "GET /\r\nHost: a\r\n\r\n", status: 400},
		{name: "HTTP/1.2", in: "GET / HTTP/1.2\r\nHost: a\r\n\r\n", status: 505},
		{name: "HTTP/2.0", in: "GET / HTTP/2.0\r\nHost: a\r\n\r\n", status: 505},
		{name: "lower-case version", in: "GET / http/1.1\r\nHost: a\r\n\r\n", status: 400},
		{name: "two spaces", in: "GET  / HTTP/1.1\r\nHost: a\r\n\r\n", status: 400},
		{name: "invalid method", in: "G(T / HTTP/1.1\r\nHost: a\r\n\r\n", status: 400},
		{name: "method over the limit", in: strings.Repeat("M", maxMethod+1) + " / HTTP/1.1\r\nHost: a\r\n\r\n", status: 400},
		{name: "asterisk form of GET", in: "GET * HTTP/1.1\r\nHost: a\r\n\r\n", status: 400},
		{name: "asterisk form of POST", in: "POST * HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n", status: 400},
		{name: "empty Host", in: "GET / HTTP/1.1\r\nHost:\r\n\r\n", status: 400},
		{name: "Host of spaces", in: "GET / HTTP/1.1\r\nHost:  \t\r\n\r\n", status: 400},
		{name: "empty Host on HTTP/1.0", in: "GET / HTTP/1.0\r\nHost:\r\n\r\n", status: 400},
		{name: "empty Host, asterisk form", in: "OPTIONS * HTTP/1.1\r\nHost:\r\n\r\n", status: 400},
		{name: "bad escape in the path", in: "GET /%zz HTTP/1.1\r\nHost: a\r\n\r\n", status: 400},
		{name: "obs-text in the target", in: "GET /\xe9 HTTP/1.1\r\nHost: a\r\n\r\n", status: 400},
		{name: "relative target", in: "GET a/b HTTP/1.1\r\nHost: a\r\n\r\n", status: 400},
		{name: "missing Host", in: "GET / HTTP/1.1\r\n\r\n", status: 400},
		{name: "two Hosts", in: get + "Host: a\r\n\r\n", status: 400},
		{name: "Host with a slash", in: "GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", status: 400},
		{name: "obs-fold", in: get + "X: 1\r\n\t2\r\n\r\n", status: 400},
		{name: "space before colon", in: get + "X : 1\r\n\r\n", status: 400},
		{name: "empty name", in: get + ": 1\r\n\r\n", status: 400},
		{name: "no colon", in: get + "X 1\r\n\r\n", status: 400},
		{name: "NUL in a value", in: get + "X: a\x00\r\n\r\n", status: 400},
		{name: "CL and TE", in: post + "Content-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", status: 400},
		{name: "CL list differing", in: post + "Content-Length: 5, 6\r\n\r\n", status: 400},
		{name: "CL empty", in: post + "Content-Length: \r\n\r\n", status: 400},
		{name: "CL 19 digits", in: post + "Content-Length: 1000000000000000000\r\n\r\n", status: 400},
		{name: "TE chunked, gzip", in: post + "Transfer-Encoding: chunked, gzip\r\n\r\n", status: 400},
		{name: "TE gzip, chunked", in: post + "Transfer-Encoding: gzip, chunked\r\n\r\n", status: 501},
		{name: "TE chunked twice over two lines", in: post + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", status: 400},
		{name: "TE in HTTP/1.0", in: "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", status: 400},
		{name: "Expect other than 100-continue", in: get + "Expect: 200-ok\r\n\r\n", status: 417},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			q, err, incomplete := parseHead([]byte(tt.in), lim)
			if incomplete {
				t.Fatalf("headEnd found no head in %q", tt.in)
			}
			if tt.status != 0 {
				if err == nil {
					t.Fatalf("parse(%q) succeeded, want status %d", tt.in, tt.status)
				}
				if got, want := err.HTTPStatus(), tt.status; got != want {
					t.Errorf("parse(%q) status = %d (%s), want %d", tt.in, got, err.Reason, want)
				}
				return
			}
			if err != nil {
				t.Fatalf("parse(%q): %v", tt.in, err)
			}
			r := q.r
			if got, want := r.Method, tt.method; got != want {
				t.Errorf("Method = %q, want %q", got, want)
			}
			if got, want := r.RequestURI, tt.target; got != want {
				t.Errorf("RequestURI = %q, want %q", got, want)
			}
			if got, want := r.Host, tt.host; got != want {
				t.Errorf("Host = %q, want %q", got, want)
			}
			if got, want := q.head.Framing, tt.framing; got != want {
				t.Errorf("Framing = %d, want %d", got, want)
			}
			if tt.framing != NoBody {
				if got, want := r.ContentLength, tt.length; got != want {
					t.Errorf("ContentLength = %d, want %d", got, want)
				}
			}
			if got, want := r.Close, tt.close; got != want {
				t.Errorf("Close = %v, want %v", got, want)
			}
			if tt.header != nil {
				if got, want := r.Header, tt.header; !equalHeader(got, want) {
					t.Errorf("Header = %q, want %q", got, want)
				}
			}
		})
	}
}

// equalHeader reports whether a and b hold the same fields.
func equalHeader(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, av := range a {
		bv, ok := b[k]
		if !ok || len(av) != len(bv) {
			return false
		}
		for i := range av {
			if av[i] != bv[i] {
				return false
			}
		}
	}
	return true
}

// TestParseReuse: a request parsed into the value a previous one was
// parsed into keeps nothing of the previous one.
func TestParseReuse(t *testing.T) {
	t.Parallel()
	// A connection parses every request into the same request value: no
	// field of one may show in the next.
	q := &request{r: &http.Request{Header: http.Header{}}, url: &url.URL{}}
	parse := func(in string) {
		t.Helper()
		clear(q.r.Header)
		q.r.Host = ""
		if err := q.parse([]byte(in), Limits{}); err != nil {
			t.Fatalf("parse(%q): %v", in, err)
		}
	}
	parse("POST /a?x=1 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nConnection: close\r\nX-A: 1\r\n\r\n")
	parse("GET /b HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
	r := q.r
	if got, want := r.URL.RawQuery, ""; got != want {
		t.Errorf("RawQuery = %q, want %q", got, want)
	}
	if got, want := r.URL.Path, "/b"; got != want {
		t.Errorf("Path = %q, want %q", got, want)
	}
	if got, want := q.head.Framing, NoBody; got != want {
		t.Errorf("Framing = %d, want %d", got, want)
	}
	if r.TransferEncoding != nil {
		t.Errorf("TransferEncoding = %q, want nil", r.TransferEncoding)
	}
	if got, want := r.Close, false; got != want {
		t.Errorf("Close = %v, want %v", got, want)
	}
	if got, want := q.head.KeepAlive10, true; got != want {
		t.Errorf("KeepAlive10 = %v, want %v", got, want)
	}
	if _, ok := r.Header["X-A"]; ok {
		t.Errorf("X-A of the previous request is still in the header")
	}
}

// TestHeadEnd: headEnd finds the end of the first head (after any empty
// lines before it), a bare LF counted as a line end for the parser to
// refuse, and -1 while the head is not complete.
func TestHeadEnd(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		in   string
		want int
	}{
		{name: "empty", in: "", want: -1},
		{name: "request line only", in: "GET / HTTP/1.1\r\n", want: -1},
		{name: "head", in: "GET / HTTP/1.1\r\n\r\n", want: 18},
		{name: "head and more", in: "GET / HTTP/1.1\r\n\r\nGET", want: 18},
		{name: "CR pending", in: "GET / HTTP/1.1\r\n\r", want: -1},
		{name: "bare LF ends the head, to be refused", in: "GET / HTTP/1.1\n\n", want: 16},
		{name: "LF then CRLF", in: "GET / HTTP/1.1\n\r\n", want: 17},
		{name: "leading empty lines alone", in: "\r\n\r\n", want: -1},
		{name: "leading empty lines then a head", in: "\r\n\r\nGET / HTTP/1.1\r\n\r\n", want: 22},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got, want := headEnd([]byte(tt.in)), tt.want; got != want {
				t.Errorf("headEnd(%q) = %d, want %d", tt.in, got, want)
			}
		})
	}
}

// TestStartsRequest: startsRequest holds true for every prefix of a
// request head that may still become one, and false as soon as a byte
// rules that out.
func TestStartsRequest(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want bool
	}{
		{"", true},
		{"\r", true},
		{"\r\n\r", true},
		{"G", true},
		{"GET", true},
		{"GET ", true},
		{"GET /a?b", true},
		{"GET / ", true},
		{"GET / HTTP/1.", true},
		{"GET / HTTP/1.1\r", true},
		{"GET / HTTP/1.1\r\nHost: a", true},
		{"GET / HTTP/2.0\r\n", true}, // 505 once complete
		{"\r\nGET / H", true},
		{"\x16\x03\x01", false},
		{" GET", false},
		{"\rG", false},
		{"G\x00", false},
		{"GET\t/", false},
		{"GET  /", false},
		{"GET /\x7f", false},
		{"GET / X", false},
		{"GET / HTTP/x", false},
		{"GET / HTTP/1.1 ", false},
		{"GET / HTTP/1.1\n", false},
		{strings.Repeat("M", maxMethod), true},
		{strings.Repeat("M", maxMethod) + " /", true},
		{strings.Repeat("M", maxMethod+1), false},
	}
	for _, tt := range cases {
		if got, want := startsRequest([]byte(tt.in)), tt.want; got != want {
			t.Errorf("startsRequest(%q) = %v, want %v", tt.in, got, want)
		}
	}
}

// TestParseContentLength: a Content-Length is decimal digits, or a list of
// equal such values (RFC 9110 section 8.6), of at most 18 digits; nothing
// else is one.
func TestParseContentLength(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true},
		{"42", 42, true},
		{"007", 7, true},
		{"5, 5", 5, true},
		{"5,5 ,\t5", 5, true},
		{"999999999999999999", 999999999999999999, true},
		{"1000000000000000000", 0, false}, // 19 digits
		{"", 0, false},
		{"5,", 0, false},
		{"5, 6", 0, false},
		{"+5", 0, false},
		{"-1", 0, false},
		{"0x5", 0, false},
		{"5 5", 0, false},
	}
	for _, tt := range cases {
		got, ok := parseContentLength(tt.in)
		if ok != tt.ok || ok && got != tt.want {
			t.Errorf("parseContentLength(%q) = %d, %v; want %d, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

// TestParseChunkSize is the chunk-size line's table (RFC 9112 section
// 7.1), read strictly, as a request's is, and laxly, as the proxy reads
// an upstream's response (ChunkDecoder.Lax).
func TestParseChunkSize(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in      string
		want    int64
		ok, lax bool // accepted strictly; accepted laxly
	}{
		{"0", 0, true, true},
		{"a", 10, true, true},
		{"FF", 255, true, true},
		{"1f", 31, true, true},
		{"000a", 10, true, true},
		{"fffffffffffffff", 1<<60 - 1, true, true}, // 15 digits
		{"5;ext=1", 5, true, true},
		{"5 ; ext=\"q\"", 5, true, true},
		{"5;a;b=c", 5, true, true},
		{"5\t;\ta\t=\tb", 5, true, true},
		{"5;a=\"x\\\"y\"", 5, true, true},
		{"5;a=\"\"", 5, true, true},
		{"5;a=\"caf\xe9\"", 5, true, true},
		{"1f \t; a=b;c", 31, true, true},

		// RFC 9112 section 7.1.1 allows BWS only around ";" and "=".
		{"5 ", 5, false, true},
		{"5\t", 5, false, true},
		{"5;a=b ", 5, false, true},
		{"5;a ", 5, false, true},
		{"1f  ", 31, false, true},
		// An extension must have a name, a token; its value must be a
		// token or a quoted-string.
		{"5;", 5, false, true},
		{"5;=x", 5, false, true},
		{"5;a b", 5, false, true},
		{"5;\"x\"", 5, false, true},
		{"5;a=", 5, false, true},
		{"5;a=@", 5, false, true},
		{"5;a=\"x", 5, false, true},
		{"5;a=\"x\"y", 5, false, true},
		{"5;a=b;", 5, false, true},
		{"5;;a", 5, false, true},

		{"0000000000000001", 0, false, false}, // 16 digits: refused, whatever their value
		{"ffffffffffffffff", 0, false, false},
		{"1000000000000000", 0, false, false},
		{"", 0, false, false},
		{" ", 0, false, false},
		{";ext", 0, false, false},
		{" 1f", 0, false, false},
		{"-1", 0, false, false},
		{"+1", 0, false, false},
		{"0x5", 0, false, false},
		{"5x", 0, false, false},
		{"1 f", 0, false, false},
		{"1f\r", 0, false, false},
		{"5;\x00", 0, false, false},
		{"5;a=\x7f", 0, false, false},
	}
	for _, tt := range cases {
		for _, lax := range []bool{false, true} {
			want := tt.ok
			if lax {
				want = tt.lax
			}
			got, ok := parseChunkSize([]byte(tt.in), lax)
			if ok != want || ok && got != tt.want {
				t.Errorf("parseChunkSize(%q, lax %v) = %d, %v; want %d, %v", tt.in, lax, got, ok, tt.want, want)
			}
		}
	}
}

// TestIsPrefaceStart: every prefix of the HTTP/2 client preface is taken
// for its start, and bytes that leave it are not.
func TestIsPrefaceStart(t *testing.T) {
	t.Parallel()
	for n := 0; n <= len(preface); n++ {
		if !isPrefaceStart([]byte(preface[:n])) {
			t.Errorf("isPrefaceStart(%q) = false, want true", preface[:n])
		}
	}
	for _, in := range []string{"PRX", "GET / HTTP/1.1", "PRI * HTTP/2.0\r\n\r\nXX"} {
		if isPrefaceStart([]byte(in)) {
			t.Errorf("isPrefaceStart(%q) = true, want false", in)
		}
	}
}

// TestValidValue checks the word-at-a-time validValue against the plain
// byte loop: every byte value at every position of values from 0 to 20
// bytes long, around one word boundary and the tail, on a background of
// allowed bytes (visible ASCII, SP, HTAB, obs-text).
func TestValidValue(t *testing.T) {
	t.Parallel()
	for _, fill := range []byte{'a', ' ', '\t', 0x80, 0xff, '~'} {
		for n := 0; n <= 20; n++ {
			v := bytes.Repeat([]byte{fill}, n)
			if !validValue(v) {
				t.Fatalf("validValue(%q) = false", v)
			}
			for i := range n {
				for c := 0; c < 256; c++ {
					v[i] = byte(c)
					want := c >= ' ' && c != 0x7f || c == '\t'
					if got := validValue(v); got != want || validBytes(v) != want {
						t.Fatalf("validValue(%q) = %v, want %v", v, got, want)
					}
				}
				v[i] = fill
			}
		}
	}
}
