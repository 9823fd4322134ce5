package h1

import (
	"bufio"
	"bytes"
	"net/http"
	"strings"
	"testing"
)

// FuzzParseRequest is a differential test of the head parser against
// net/http.ReadRequest. For an input both accept, the method, target,
// URL, Host, header map, Content-Length, chunked-ness and whether the
// connection closes must agree. An input ours accepts and net/http
// refuses must fall under one of acceptedExceptions (empty lines before
// the request line are not given to net/http at all: see differential).
// The reverse, net/http accepts and ours refuses, is expected, ours being
// the stricter: bare LF, obs-fold, HTTP/1.x versions other than 1.0 and
// 1.1, a missing Host on HTTP/1.1, a Host that is not uri-host[:port], an
// empty Host with a target that has no authority, the asterisk-form
// target of a method other than OPTIONS, a method over 32 bytes,
// Transfer-Encoding on HTTP/1.0 or with Content-Length, codings other
// than chunked, 19-digit lengths, non-ASCII targets, more than 100
// fields, and Expect values other than 100-continue.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST /a?b=c HTTP/1.1\r\nHost: a:80\r\nContent-Length: 5\r\nX-A: 1\r\nx-a: 2\r\n\r\nhello",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n0\r\n\r\n",
		"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
		"GET http://b/x HTTP/1.1\r\nHost: a\r\n\r\n",
		"CONNECT b:443 HTTP/1.1\r\nHost: b:443\r\n\r\n",
		"OPTIONS * HTTP/1.1\r\nHost: a\r\nPragma: no-cache\r\n\r\n",
		"\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 05\r\n\r\n",
		"GET / HTTP/1.1\nHost: a\n\n",
		"GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n 2\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nX-A: caf\xe9\r\nX_b: 1\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(differential)
}

// FuzzRequestFields is FuzzParseRequest with the head built from its
// parts, so that the fuzzer spends its time inside a well-formed frame:
// a request line and three field lines.
func FuzzRequestFields(f *testing.F) {
	f.Add("GET", "/", "HTTP/1.1", "Host", "a", "Content-Length", "5", "Connection", "close")
	f.Add("POST", "/a?b", "HTTP/1.1", "Host", "a", "Transfer-Encoding", "chunked", "Trailer", "X")
	f.Add("CONNECT", "a:1", "HTTP/1.0", "X", "1", "Pragma", "no-cache", "Connection", "keep-alive")
	f.Add("OPTIONS", "*", "HTTP/1.1", "host", "a:80", "content-length", "1, 1", "expect", "100-continue")
	f.Fuzz(func(t *testing.T, method, target, version, n1, v1, n2, v2, n3, v3 string) {
		differential(t, []byte(method+" "+target+" "+version+"\r\n"+
			n1+":"+v1+"\r\n"+n2+":"+v2+"\r\n"+n3+":"+v3+"\r\n\r\n"))
	})
}

// differential parses in with ours and net/http's parser and compares.
// Empty lines before the request line, which RFC 9112 section 2.2 says a
// server SHOULD ignore and net/http refuses, are taken off what net/http
// is given.
func differential(t *testing.T, in []byte) {
	q, ourErr, incomplete := parseHead(in, Limits{})
	if incomplete || ourErr != nil {
		return // a connection would read on; or stricter, which is allowed
	}
	theirIn := in
	for bytes.HasPrefix(theirIn, []byte("\r\n")) {
		theirIn = theirIn[2:]
	}
	theirs, theirErr := http.ReadRequest(bufio.NewReader(bytes.NewReader(theirIn)))
	if theirErr != nil {
		if acceptedException(in, q) == "" {
			t.Fatalf("we accept %q, net/http refuses it (%v), and no exception covers it", in, theirErr)
		}
		return
	}
	compareRequests(t, in, q, theirs)
}

// acceptedExceptions are the heads ours accepts and net/http refuses, with
// the reason for each. acceptedException returns the reason that covers in,
// or "".
var acceptedExceptions = []struct {
	reason  string
	matches func(in []byte, q *request) bool
}{
	{
		// RFC 9110 section 8.6: a list of equal values ("5, 5"), or equal
		// values on several lines spelt differently ("5" and "05"), may be
		// taken as the single value. net/http wants one value, or lines
		// that are equal as strings.
		reason: "Content-Length list of equal values",
		matches: func(in []byte, q *request) bool {
			vv := q.r.Header["Content-Length"]
			return len(vv) == 1 && strings.Contains(vv[0], ",") || len(rawFieldValues(in, "content-length")) > 1
		},
	},
	{
		// RFC 9110 section 5.3: field lines of one name make one list, in
		// which empty elements are ignored (section 5.6.1), so
		// "Transfer-Encoding: ,chunked", or an empty line before a
		// "chunked" one, is the list (chunked). net/http takes exactly one
		// line saying "chunked". The body is re-framed on its way
		// upstream, so no parser behind queue sees the list.
		reason: "Transfer-Encoding as a list that reduces to chunked",
		matches: func(in []byte, q *request) bool {
			vv := rawFieldValues(in, "transfer-encoding")
			return len(vv) > 1 || len(vv) == 1 && !strings.EqualFold(vv[0], "chunked")
		},
	},
}

func acceptedException(in []byte, q *request) string {
	for _, e := range acceptedExceptions {
		if e.matches(in, q) {
			return e.reason
		}
	}
	return ""
}

// rawFieldValues returns the values, trimmed, of the field lines of in's
// head named name (lower case).
func rawFieldValues(in []byte, name string) []string {
	head := in[:headEnd(in)]
	var vv []string
	for _, line := range strings.Split(string(head), "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && strings.ToLower(k) == name {
			vv = append(vv, strings.Trim(v, " \t"))
		}
	}
	return vv
}

// compareRequests checks that our parse of in agrees with net/http's.
func compareRequests(t *testing.T, in []byte, q *request, theirs *http.Request) {
	t.Helper()
	ours := q.r
	if got, want := ours.Method, theirs.Method; got != want {
		t.Errorf("%q: Method = %q, net/http %q", in, got, want)
	}
	if got, want := ours.RequestURI, theirs.RequestURI; got != want {
		t.Errorf("%q: RequestURI = %q, net/http %q", in, got, want)
	}
	if got, want := ours.Proto, theirs.Proto; got != want {
		t.Errorf("%q: Proto = %q, net/http %q", in, got, want)
	}
	if got, want := ours.Host, theirs.Host; got != want {
		t.Errorf("%q: Host = %q, net/http %q", in, got, want)
	}
	if got, want := ours.URL.String(), theirs.URL.String(); got != want {
		t.Errorf("%q: URL = %q, net/http %q", in, got, want)
	}
	if got, want := ours.ContentLength, theirs.ContentLength; got != want {
		t.Errorf("%q: ContentLength = %d, net/http %d", in, got, want)
	}
	ourChunked := q.head.Framing == Chunked
	theirChunked := len(theirs.TransferEncoding) > 0 && theirs.TransferEncoding[len(theirs.TransferEncoding)-1] == "chunked"
	if ourChunked != theirChunked {
		t.Errorf("%q: chunked = %v, net/http %v", in, ourChunked, theirChunked)
	}
	if got, want := ours.Close, theirs.Close; got != want {
		t.Errorf("%q: Close = %v, net/http %v", in, got, want)
	}

	// Header maps, after what net/http does beyond parsing: it keeps Host
	// in the map (a Server deletes it; ours never puts it there), takes
	// Transfer-Encoding out (ours too), and on a chunked request takes
	// Trailer out into the request's Trailer; it adds Cache-Control:
	// no-cache to a Pragma: no-cache that has none.
	want := theirs.Header.Clone()
	delete(want, "Host")
	got := ours.Header.Clone()
	if ourChunked {
		delete(got, "Trailer")
	}
	if _, ok := got["Cache-Control"]; !ok {
		if pragma := got["Pragma"]; len(pragma) > 0 && pragma[0] == "no-cache" {
			delete(want, "Cache-Control")
		}
	}
	if !equalHeader(got, want) {
		t.Errorf("%q: Header = %q, net/http %q", in, got, want)
	}
}
