package proxy

import (
	"bufio"
	"net/http"
	"net/textproto"
	"slices"
	"strings"
	"testing"

	"github.com/queue-dev/queue/headers"
	"golang.org/x/net/http/httpguts"
)

// connectionNames returns the canonical names the Connection fields of a
// response head list. net/http may delete the Connection field itself, so
// the head is read again here.
func connectionNames(head string) map[string]bool {
	names := map[string]bool{}
	_, rest := cutLine(head)
	for rest != "" {
		var line string
		line, rest = cutLine(rest)
		if line == "" {
			break
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok || textproto.CanonicalMIMEHeaderKey(name) != headers.Connection {
			continue
		}
		for tok := range strings.SplitSeq(value, ",") {
			names[textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(tok))] = true
		}
	}
	return names
}

// FuzzParseHead checks parseHead against http.ReadResponse: where both accept
// a head, they agree on the status code, on the end-to-end fields and on
// whether the connection must close. parseHead is stricter than net/http
// (obs-fold, status below 100, versions other than 1.0 and 1.1), so heads only
// one of them accepts are not compared.
func FuzzParseHead(f *testing.F) {
	f.Add("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\n")
	f.Add("HTTP/1.0 404 Not Found\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\n\r\n")
	f.Add("HTTP/1.1 200 OK\nTransfer-Encoding: gzip, chunked\nContent-Length: 3\nTrailer: X-T\nKeep-Alive: timeout=5\n\n")
	f.Add("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	f.Add("HTTP/1.1 204\r\nx-lower: \t v \t\r\nX-Empty:\r\n\r\n")
	f.Add("HTTP/1.1 200 OK\r\nX-A: 1\r\n 2\r\n\r\n")
	f.Add("HTTP/1.0 200 OK\r\nContent-Length: 0\r\nConnection: close\r\nConnection: keep-alive\r\n\r\n")
	f.Fuzz(func(t *testing.T, head string) {
		h := http.Header{}
		rh, err := parseHead(head, h)
		if err == nil {
			if rh.Status < 100 || rh.Status > 999 {
				t.Errorf("code = %d, want 3 digits from 100", rh.Status)
			}
			if rh.Chunked && rh.ContentLength >= 0 {
				t.Errorf("chunked with contentLength %d", rh.ContentLength)
			}
			for k, vs := range h {
				if k != textproto.CanonicalMIMEHeaderKey(k) || !httpguts.ValidHeaderFieldName(k) {
					t.Errorf("key %q is not canonical", k)
				}
				if headers.IsHopByHop(k, nil) {
					t.Errorf("hop-by-hop key %q added", k)
				}
				for _, v := range vs {
					if !httpguts.ValidHeaderFieldValue(v) {
						t.Errorf("value %q of %s is invalid", v, k)
					}
				}
			}
		}

		if err == nil {
			fieldsAgree(t, head, rh, h)
		}

		resp, rerr := http.ReadResponse(bufio.NewReader(strings.NewReader(head)), nil)
		if err != nil || rerr != nil {
			return
		}
		if got, want := rh.Status, resp.StatusCode; got != want {
			t.Errorf("code = %d, net/http says %d", got, want)
		}
		// net/http also sets Close for a body that runs until the upstream
		// closes, which readHead, not parseHead, works out.
		unbounded := !rh.Chunked && rh.ContentLength < 0 && rh.Status >= 200 &&
			rh.Status != http.StatusNoContent && rh.Status != http.StatusNotModified
		if resp.Close && !rh.Close && !unbounded {
			t.Errorf("close = false, net/http says true")
		}
		skip := connectionNames(head)
		for _, k := range []string{headers.ContentLength, headers.TransferEncoding, headers.Trailer} {
			skip[k] = true
		}
		for k, want := range resp.Header {
			if skip[k] || headers.IsHopByHop(k, nil) {
				continue
			}
			if got := h[k]; !slices.Equal(got, want) {
				t.Errorf("header %s = %q, net/http says %q", k, got, want)
			}
		}
		for k, got := range h {
			if skip[k] {
				continue
			}
			if _, ok := resp.Header[k]; !ok {
				t.Errorf("header %s = %q, net/http has none", k, got)
			}
		}
	})
}

// cutLine splits s after its first line, which it returns without its LF
// or CRLF.
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
