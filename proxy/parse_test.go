package proxy

import (
	"errors"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/queue-dev/queue/h1"
	"github.com/queue-dev/queue/internal/engine"
)

// crlf turns the "\n" line ends of a test head into "\r\n".
func crlf(s string) string { return strings.ReplaceAll(s, "\n", "\r\n") }

// TestParseHead table-tests parseResponse on response heads: the status
// line it accepts (RFC 9112 section 4, CRLF line ends only), whether the
// connection closes after the response, the framing it reads from
// Content-Length and Transfer-Encoding (RFC 9112 section 6), the
// hop-by-hop fields it leaves out and the end-to-end ones it keeps; and
// that parseResponseFields, the fields form of the same parse, agrees.
func TestParseHead(t *testing.T) {
	t.Parallel()
	type rh = respHead
	tests := []struct {
		name    string
		in      string // "\n" is sent as "\r\n" unless bareLF
		bareLF  bool
		want    respHead
		wantH   http.Header
		wantErr bool
	}{
		// Status line.
		{name: "ok", in: "HTTP/1.1 200 OK\n\n", want: rh{Status: 200, ContentLength: -1}, wantH: http.Header{}},
		{name: "no reason", in: "HTTP/1.1 204\n\n", want: rh{Status: 204, ContentLength: -1}, wantH: http.Header{}},
		{name: "empty reason", in: "HTTP/1.1 404 \n\n", want: rh{Status: 404, ContentLength: -1}, wantH: http.Header{}},
		{name: "long reason", in: "HTTP/1.1 503 Service Unavailable, try later\n\n", want: rh{Status: 503, ContentLength: -1}, wantH: http.Header{}},
		{name: "1xx", in: "HTTP/1.1 103 Early Hints\nLink: </a.css>; rel=preload\n\n", want: rh{Status: 103, ContentLength: -1}, wantH: http.Header{"Link": {"</a.css>; rel=preload"}}},
		{name: "999", in: "HTTP/1.1 999 X\n\n", want: rh{Status: 999, ContentLength: -1}, wantH: http.Header{}},
		// RFC 9112 section 2.2 lets a recipient accept a bare LF; queue
		// does not, in either direction, so that no two parsers on the way
		// can disagree on where a line ends.
		{name: "bare lf", in: "HTTP/1.1 200 OK\nA: 1\n\n", bareLF: true, wantErr: true},
		{name: "mixed line ends", in: "HTTP/1.1 200 OK\r\nA: 1\nB: 2\r\n\n", bareLF: true, wantErr: true},
		{name: "body after head ignored", in: "HTTP/1.1 200 OK\nA: 1\n\nB: 2\n", want: rh{Status: 200, ContentLength: -1}, wantH: http.Header{"A": {"1"}}},
		{name: "empty", in: "", wantErr: true},
		{name: "short status", in: "HTTP/1.1 20 OK\n\n", wantErr: true},
		{name: "status below 100", in: "HTTP/1.1 099 X\n\n", wantErr: true},
		{name: "status not digits", in: "HTTP/1.1 2x0 OK\n\n", wantErr: true},
		{name: "status signed", in: "HTTP/1.1 +20 OK\n\n", wantErr: true},
		{name: "no space after status", in: "HTTP/1.1 200OK\n\n", wantErr: true},
		{name: "tab after status", in: "HTTP/1.1 200\tOK\n\n", wantErr: true},
		{name: "two spaces before status", in: "HTTP/1.1  200 OK\n\n", wantErr: true},
		{name: "four digit status", in: "HTTP/1.1 2000 OK\n\n", wantErr: true},
		{name: "http/2", in: "HTTP/2.0 200 OK\n\n", wantErr: true},
		{name: "http/1.2", in: "HTTP/1.2 200 OK\n\n", wantErr: true},
		{name: "lower case version", in: "http/1.1 200 OK\n\n", wantErr: true},
		{name: "icy", in: "ICY 200 OK\n\n", wantErr: true},
		{name: "leading empty line", in: "\nHTTP/1.1 200 OK\n\n", wantErr: true},

		// Connection persistence.
		{name: "http/1.0 closes", in: "HTTP/1.0 200 OK\n\n", want: rh{Status: 200, ContentLength: -1, Close: true}, wantH: http.Header{}},
		{name: "http/1.0 keep-alive", in: "HTTP/1.0 200 OK\nConnection: Keep-Alive\nKeep-Alive: timeout=5\n\n", want: rh{Status: 200, ContentLength: -1, KeepAlive: 5 * time.Second}, wantH: http.Header{}},
		{name: "http/1.1 keep-alive is a no-op", in: "HTTP/1.1 200 OK\nConnection: keep-alive\n\n", want: rh{Status: 200, ContentLength: -1}, wantH: http.Header{}},
		{name: "connection close", in: "HTTP/1.1 200 OK\nConnection: close\n\n", want: rh{Status: 200, ContentLength: -1, Close: true}, wantH: http.Header{}},
		{name: "connection close in a list", in: "HTTP/1.1 200 OK\nConnection: foo, CLOSE\n\n", want: rh{Status: 200, ContentLength: -1, Close: true}, wantH: http.Header{}},
		{name: "connection close on second line", in: "HTTP/1.1 200 OK\nConnection: foo\nConnection: close\n\n", want: rh{Status: 200, ContentLength: -1, Close: true}, wantH: http.Header{}},
		// On HTTP/1.0 close wins over keep-alive (RFC 9112 section 9.3;
		// net/http's shouldClose agrees). Regression: c30d916 kept it alive.
		{name: "http/1.0 close wins over keep-alive", in: "HTTP/1.0 200 OK\nConnection: close, keep-alive\n\n", want: rh{Status: 200, ContentLength: -1, Close: true}, wantH: http.Header{}},
		// An HTTP/1.0 response with Transfer-Encoding must close the
		// connection (RFC 9112 section 6.1), keep-alive or not. Regression:
		// c30d916 let keep-alive clear close.
		{name: "http/1.0 chunked closes despite keep-alive", in: "HTTP/1.0 200 OK\nTransfer-Encoding: chunked\nConnection: keep-alive\n\n", want: rh{Status: 200, ContentLength: -1, Chunked: true, Close: true}, wantH: http.Header{}},
		// A response with both Transfer-Encoding and Content-Length is not
		// reused, whatever keep-alive says.
		{name: "http/1.0 te and cl close despite keep-alive", in: "HTTP/1.0 200 OK\nContent-Length: 5\nTransfer-Encoding: chunked\nConnection: keep-alive\n\n", want: rh{Status: 200, ContentLength: -1, Chunked: true, Close: true}, wantH: http.Header{}},

		// Content-Length.
		{name: "content-length", in: "HTTP/1.1 200 OK\nContent-Length: 42\n\n", want: rh{Status: 200, ContentLength: 42}, wantH: http.Header{"Content-Length": {"42"}}},
		{name: "content-length zero", in: "HTTP/1.1 200 OK\ncontent-length:0\n\n", want: rh{Status: 200, ContentLength: 0}, wantH: http.Header{"Content-Length": {"0"}}},
		{name: "content-length duplicate equal", in: "HTTP/1.1 200 OK\nContent-Length: 42\nContent-Length: 42\n\n", want: rh{Status: 200, ContentLength: 42}, wantH: http.Header{"Content-Length": {"42"}}},
		{name: "content-length equal list", in: "HTTP/1.1 200 OK\nContent-Length: 42, 42\n\n", want: rh{Status: 200, ContentLength: 42}, wantH: http.Header{"Content-Length": {"42, 42"}}},
		{name: "content-length duplicate different", in: "HTTP/1.1 200 OK\nContent-Length: 42\nContent-Length: 43\n\n", wantErr: true},
		{name: "content-length different list", in: "HTTP/1.1 200 OK\nContent-Length: 42, 43\n\n", wantErr: true},
		{name: "content-length negative", in: "HTTP/1.1 200 OK\nContent-Length: -1\n\n", wantErr: true},
		{name: "content-length plus", in: "HTTP/1.1 200 OK\nContent-Length: +1\n\n", wantErr: true},
		{name: "content-length empty", in: "HTTP/1.1 200 OK\nContent-Length:\n\n", wantErr: true},
		{name: "content-length hex", in: "HTTP/1.1 200 OK\nContent-Length: 0x10\n\n", wantErr: true},
		{name: "content-length too big", in: "HTTP/1.1 200 OK\nContent-Length: 9999999999999999999\n\n", wantErr: true},

		// Transfer-Encoding.
		{name: "chunked", in: "HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n\n", want: rh{Status: 200, ContentLength: -1, Chunked: true}, wantH: http.Header{}},
		{name: "chunked upper case", in: "HTTP/1.1 200 OK\nTransfer-Encoding: Chunked\n\n", want: rh{Status: 200, ContentLength: -1, Chunked: true}, wantH: http.Header{}},
		{name: "gzip then chunked", in: "HTTP/1.1 200 OK\nTransfer-Encoding: gzip, chunked\n\n", want: rh{Status: 200, ContentLength: -1, Chunked: true}, wantH: http.Header{}},
		{name: "chunked on second line", in: "HTTP/1.1 200 OK\nTransfer-Encoding: gzip\nTransfer-Encoding: chunked\n\n", want: rh{Status: 200, ContentLength: -1, Chunked: true}, wantH: http.Header{}},
		{name: "chunked overrides content-length", in: "HTTP/1.1 200 OK\nContent-Length: 10\nTransfer-Encoding: chunked\n\n", want: rh{Status: 200, ContentLength: -1, Chunked: true, Close: true}, wantH: http.Header{}},
		{name: "chunked overrides later content-length", in: "HTTP/1.1 200 OK\nTransfer-Encoding: chunked\nContent-Length: 10\n\n", want: rh{Status: 200, ContentLength: -1, Chunked: true, Close: true}, wantH: http.Header{}},
		{name: "chunked not last closes", in: "HTTP/1.1 200 OK\nTransfer-Encoding: chunked, gzip\n\n", want: rh{Status: 200, ContentLength: -1, Close: true}, wantH: http.Header{}},
		{name: "non-chunked te closes", in: "HTTP/1.1 200 OK\nTransfer-Encoding: gzip\n\n", want: rh{Status: 200, ContentLength: -1, Close: true}, wantH: http.Header{}},
		{name: "identity te closes", in: "HTTP/1.1 200 OK\nTransfer-Encoding: identity\nContent-Length: 3\n\n", want: rh{Status: 200, ContentLength: -1, Close: true}, wantH: http.Header{}},

		// Hop-by-hop fields.
		{
			name:  "hop-by-hop never added",
			in:    "HTTP/1.1 200 OK\nKeep-Alive: timeout=5\nProxy-Connection: keep-alive\nTE: trailers\nHTTP2-Settings: AAMAAABkAAQAAP__\nConnection: keep-alive\nX-End: 1\n\n",
			want:  rh{Status: 200, ContentLength: -1, KeepAlive: 5 * time.Second},
			wantH: http.Header{"X-End": {"1"}},
		},
		{
			name:  "connection names a header",
			in:    "HTTP/1.1 200 OK\nX-Hop: 1\nConnection: x-hop, X-Other\nX-Other: 2\nX-Hop: 3\nX-End: 4\n\n",
			want:  rh{Status: 200, ContentLength: -1},
			wantH: http.Header{"X-End": {"4"}},
		},
		{
			name:  "connection names a header and closes",
			in:    "HTTP/1.1 200 OK\nConnection: X-Hop\nConnection: close\nX-Hop: 1\n\n",
			want:  rh{Status: 200, ContentLength: -1, Close: true},
			wantH: http.Header{},
		},
		{
			name:  "connection with empty and invalid tokens",
			in:    "HTTP/1.1 200 OK\nConnection: , a b,\"x\",\nX-End: 1\n\n",
			want:  rh{Status: 200, ContentLength: -1},
			wantH: http.Header{"X-End": {"1"}},
		},
		{
			name:  "upgrade",
			in:    "HTTP/1.1 101 Switching Protocols\nUpgrade: websocket\nConnection: Upgrade\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\n\n",
			want:  rh{Status: 101, ContentLength: -1, Upgrade: "websocket"},
			wantH: http.Header{"Sec-Websocket-Accept": {"s3pPLMBiTxaQ9kYGzzhZRbK+xOo="}},
		},

		// Field syntax.
		{
			name:  "keys canonicalised, values trimmed",
			in:    "HTTP/1.1 200 OK\ncontent-type:text/plain\nX-SPACES: \t a  b \t\nx-empty:\n\n",
			want:  rh{Status: 200, ContentLength: -1},
			wantH: http.Header{"Content-Type": {"text/plain"}, "X-Spaces": {"a  b"}, "X-Empty": {""}},
		},
		{
			name:  "set-cookie kept in order",
			in:    "HTTP/1.1 200 OK\nSet-Cookie: a=1\nX-Between: x\nset-cookie: b=2\nSet-Cookie: c=3; Path=/\n\n",
			want:  rh{Status: 200, ContentLength: -1},
			wantH: http.Header{"Set-Cookie": {"a=1", "b=2", "c=3; Path=/"}, "X-Between": {"x"}},
		},
		{
			name:  "obs-text allowed",
			in:    "HTTP/1.1 200 OK\nX-Latin: caf\xe9\n\n",
			want:  rh{Status: 200, ContentLength: -1},
			wantH: http.Header{"X-Latin": {"caf\xe9"}},
		},
		{name: "obs-fold rejected", in: "HTTP/1.1 200 OK\nX-A: 1\n 2\n\n", wantErr: true},
		{name: "obs-fold with tab rejected", in: "HTTP/1.1 200 OK\nX-A: 1\n\t2\n\n", wantErr: true},
		{name: "leading space on first field", in: "HTTP/1.1 200 OK\n X-A: 1\n\n", wantErr: true},
		{name: "space before colon", in: "HTTP/1.1 200 OK\nX-A : 1\n\n", wantErr: true},
		{name: "tab before colon", in: "HTTP/1.1 200 OK\nX-A\t: 1\n\n", wantErr: true},
		{name: "no colon", in: "HTTP/1.1 200 OK\nX-A 1\n\n", wantErr: true},
		{name: "empty name", in: "HTTP/1.1 200 OK\n: 1\n\n", wantErr: true},
		{name: "bad name", in: "HTTP/1.1 200 OK\nX(A): 1\n\n", wantErr: true},
		{name: "non-ascii name", in: "HTTP/1.1 200 OK\nX-\xe9: 1\n\n", wantErr: true},
		{name: "nul in value", in: "HTTP/1.1 200 OK\nX-A: a\x00b\n\n", wantErr: true},
		{name: "bare cr in value", in: "HTTP/1.1 200 OK\nX-A: a\rb\n\n", wantErr: true},
		{name: "bare cr at a value's end", in: "HTTP/1.1 200 OK\nX-A: a\r\n\n", wantErr: true},
		{name: "bare cr in name", in: "HTTP/1.1 200 OK\nX\rA: 1\n\n", wantErr: true},
		{name: "bare cr in reason", in: "HTTP/1.1 200 O\rK\n\n", wantErr: true},
		{name: "bare cr after status", in: "HTTP/1.1 200\r\n\n", wantErr: true},
		{name: "del in value", in: "HTTP/1.1 200 OK\nX-A: a\x7fb\n\n", wantErr: true},
		{name: "control in value", in: "HTTP/1.1 200 OK\nX-A: a\x01\n\n", wantErr: true},
		{name: "bare cr line", in: "HTTP/1.1 200 OK\r\n\r\r\n\r\n", bareLF: true, wantErr: true},

		// What the fields form (parseResponseFields) needs to know.
		{name: "date", in: "HTTP/1.1 200 OK\nDate: Wed, 25 Nov 2026 21:00:00 GMT\nX-A:1\n\n", want: rh{Status: 200, ContentLength: -1, Date: true}, wantH: http.Header{"Date": {"Wed, 25 Nov 2026 21:00:00 GMT"}, "X-A": {"1"}}},
		{name: "trailer", in: "HTTP/1.1 200 OK\nTrailer: X-T\nTransfer-Encoding: chunked\n\n", want: rh{Status: 200, ContentLength: -1, Chunked: true}, wantH: http.Header{"Trailer": {"X-T"}}},
		{name: "connection names a field", in: "HTTP/1.1 200 OK\nX-Hop: 1\nConnection: x-hop\nX-B: 2\n\n", want: rh{Status: 200, ContentLength: -1}, wantH: http.Header{"X-B": {"2"}}},
		{name: "repeated field", in: "HTTP/1.1 200 OK\nSet-Cookie: a=1\nset-cookie:b=2\nContent-Length: 3\n\n", want: rh{Status: 200, ContentLength: 3}, wantH: http.Header{"Set-Cookie": {"a=1", "b=2"}, "Content-Length": {"3"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := tt.in
			if !tt.bareLF {
				in = crlf(in)
			}
			h := http.Header{}
			got, err := parseHead(in, h)
			if _, _, _, lerr := parseHeadFields(in); (lerr == nil) != (err == nil) {
				t.Errorf("parseResponseFields(%q) error = %v, parseResponse's = %v", in, lerr, err)
			}
			if tt.wantErr {
				if !errors.Is(err, errBadResponse) {
					t.Errorf("parseHead(%q) error = %v, want errBadResponse", in, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseHead(%q) error = %v", in, err)
			}
			if got != tt.want {
				t.Errorf("parseHead(%q) = %+v, want %+v", in, got, tt.want)
			}
			fieldsAgree(t, in, got, h)
			for k, want := range tt.wantH {
				if got := h[k]; !slices.Equal(got, want) {
					t.Errorf("header %s = %q, want %q", k, got, want)
				}
			}
			for k, got := range h {
				if _, ok := tt.wantH[k]; !ok {
					t.Errorf("header %s = %q, want none", k, got)
				}
			}
		})
	}
}

// TestHeadEnd: h1.HeadEnd finds the end of a head (the empty line, after
// CRLF or a bare LF) and says -1 while it has not come.
func TestHeadEnd(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want int
	}{
		{name: "crlf", in: "HTTP/1.1 200 OK\r\n\r\n", want: 19},
		{name: "crlf with fields", in: "HTTP/1.1 200 OK\r\nA: 1\r\n\r\n", want: 25},
		{name: "crlf with body", in: "HTTP/1.1 200 OK\r\n\r\nbody\r\n\r\n", want: 19},
		{name: "bare lf", in: "HTTP/1.1 200 OK\n\n", want: 17},
		{name: "bare lf with fields", in: "HTTP/1.1 200 OK\nA: 1\n\nbody", want: 22},
		{name: "crlf then bare lf", in: "HTTP/1.1 200 OK\r\n\n", want: 18},
		{name: "bare lf then crlf", in: "HTTP/1.1 200 OK\n\r\n", want: 18},
		{name: "empty", in: "", want: -1},
		{name: "no line end", in: "HTTP/1.1 200 OK", want: -1},
		{name: "one line", in: "HTTP/1.1 200 OK\r\n", want: -1},
		{name: "one field", in: "HTTP/1.1 200 OK\r\nA: 1\r\n", want: -1},
		{name: "half an empty line", in: "HTTP/1.1 200 OK\r\nA: 1\r\n\r", want: -1},
		{name: "cr cr lf is no empty line", in: "HTTP/1.1 200 OK\r\n\r\r\n", want: -1},
		{name: "lone cr lines", in: "HTTP/1.1 200 OK\r\r\r\r", want: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got, want := h1.HeadEnd([]byte(tt.in)), tt.want; got != want {
				t.Errorf("h1.HeadEnd(%q) = %d, want %d", tt.in, got, want)
			}
		})
	}
}

// TestParseContentLength: a Content-Length is one decimal number of up to
// 18 digits, or a list of equal ones (RFC 9110 section 8.6); anything else
// is malformed.
func TestParseContentLength(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		in     string
		want   int64
		wantOK bool
	}{
		{name: "zero", in: "0", want: 0, wantOK: true},
		{name: "number", in: "42", want: 42, wantOK: true},
		{name: "leading zeros", in: "007", want: 7, wantOK: true},
		{name: "whitespace", in: " 42\t", want: 42, wantOK: true},
		{name: "equal list", in: "42,42", want: 42, wantOK: true},
		{name: "equal list with whitespace", in: "42 , 42, 042", want: 42, wantOK: true},
		{name: "18 digits", in: "999999999999999999", want: 999999999999999999, wantOK: true},
		{name: "19 digits", in: "1000000000000000000", wantOK: false},
		{name: "overflow", in: "99999999999999999999", wantOK: false},
		{name: "different list", in: "42,43", wantOK: false},
		{name: "empty", in: "", wantOK: false},
		{name: "blank", in: " ", wantOK: false},
		{name: "comma", in: ",", wantOK: false},
		// Content-Length is one number, not a list (RFC 9110 section 8.6):
		// a list of equal numbers may be taken as one, but an empty
		// element is no number, and the field is malformed.
		{name: "trailing comma", in: "42,", wantOK: false},
		{name: "empty element", in: "42,,42", wantOK: false},
		{name: "negative", in: "-1", wantOK: false},
		{name: "plus", in: "+1", wantOK: false},
		{name: "hex", in: "0x10", wantOK: false},
		{name: "inner space", in: "4 2", wantOK: false},
		{name: "letters", in: "abc", wantOK: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := h1.ParseContentLength(tt.in)
			if ok != tt.wantOK || (ok && got != tt.want) {
				t.Errorf("h1.ParseContentLength(%q) = %d, %v, want %d, %v", tt.in, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// parseHeadFields parses a response head given as a string into an
// engine.ResponseHead's fields, as readHead does for queue's engines.
func parseHeadFields(s string) (respHead, []engine.Field, bool, error) {
	b := []byte(s)
	if n := h1.HeadEnd(b); n > 0 {
		b = b[:n]
	}
	var fields []engine.Field
	rh, ok, err := parseResponseFields(b, &fields)
	return rh, fields, ok, err
}

// fieldsAgree checks that parseResponseFields gives what parseResponse
// gave (rh and h) for the head in: the same head, and fields that are h's
// but Content-Length, which the fields leave to rh. When the fields form
// declines, the head must be one it declines.
func fieldsAgree(t *testing.T, in string, rh respHead, h http.Header) {
	t.Helper()
	got, fields, ok, err := parseHeadFields(in)
	if err != nil {
		t.Errorf("parseResponseFields(%q) error = %v, parseResponse accepted it", in, err)
		return
	}
	if !ok {
		if _, trailer := h["Trailer"]; !trailer && len(connectionNames(in)) == 0 {
			t.Errorf("parseResponseFields(%q) declined a head with no Trailer and no Connection option", in)
		}
		return
	}
	if got != rh {
		t.Errorf("parseResponseFields(%q) = %+v, parseResponse's %+v", in, got, rh)
	}
	back := http.Header{}
	for _, f := range fields {
		back[f.Name] = append(back[f.Name], f.Value)
	}
	want := h.Clone()
	delete(want, "Content-Length")
	if !maps.EqualFunc(back, want, slices.Equal) {
		t.Errorf("parseResponseFields(%q) fields %q, want %q", in, fields, want)
	}
}

// parseHead parses a response head given as a string, as readHead does.
func parseHead(s string, h http.Header) (respHead, error) {
	var vals []string
	b := []byte(s)
	if n := h1.HeadEnd(b); n > 0 {
		b = b[:n] // readBlock passes the head alone
	}
	return parseResponse(b, h, &vals)
}
