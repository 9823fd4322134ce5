package proxy

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/queue-dev/queue/headers"
)

// serveH2 proxies r over the h2c upstream transport. Like serveH1, it
// returns an error only when nothing was written to w.
func (p *Proxy) serveH2(w http.ResponseWriter, r *http.Request, o *headers.Outbound) error {
	if r.Method == http.MethodConnect {
		return fmt.Errorf("%w: CONNECT", errBadRequest)
	}
	if r.RequestURI != "" && r.RequestURI[0] != '/' && r.RequestURI != "*" {
		return fmt.Errorf("%w: target %q", errBadRequest, truncate(r.RequestURI))
	}
	// HTTP/2 has no Upgrade (RFC 9113 section 8.2.2): a websocket request
	// reaches an h2c upstream as a plain GET.
	o.WebSocket = false
	out := r.WithContext(r.Context())
	u := *r.URL
	u.Scheme, u.Host = "http", p.addr
	out.URL = &u
	out.Host = o.Host
	out.RequestURI = ""
	out.Close = false
	out.Header = r.Header
	o.Apply(out.Header)
	if _, ok := out.Header["User-Agent"]; !ok {
		out.Header["User-Agent"] = noUserAgent // else the Transport sends its own
	}
	if r.ContentLength == 0 {
		out.Body = nil
	}
	res, err := p.h2.RoundTrip(out)
	if err != nil {
		return fmt.Errorf("round trip: %w", err)
	}
	defer res.Body.Close()
	h := w.Header()
	conn := res.Header[headers.Connection]
	for k, vv := range res.Header {
		if !headers.IsHopByHop(k, conn) {
			h[k] = vv
		}
	}
	w.WriteHeader(res.StatusCode)
	if err := copyStream(w, res.Body, res.ContentLength); err != nil {
		if errors.Is(err, errClientGone) || r.Context().Err() != nil {
			return nil
		}
		abort()
	}
	for k, vv := range res.Trailer {
		if !forbiddenTrailer(k) {
			h[http.TrailerPrefix+k] = vv
		}
	}
	return nil
}

var noUserAgent = []string{""}

// copyStream copies body to w, flushing after every read unless the body's
// length is known and reached: an HTTP/2 upstream's DATA frames (a gRPC
// stream's messages) reach the client as they come.
func copyStream(w http.ResponseWriter, body io.Reader, length int64) error {
	f, _ := w.(http.Flusher)
	bufp := copyPool.Get().(*[]byte)
	defer copyPool.Put(bufp)
	buf := *bufp
	var n int64
	for {
		m, rerr := body.Read(buf)
		if m > 0 {
			if _, err := w.Write(buf[:m]); err != nil {
				return fmt.Errorf("%w: %w", errClientGone, err)
			}
			n += int64(m)
			if f != nil && (length < 0 || n < length) {
				f.Flush()
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return fmt.Errorf("read response body: %w", rerr)
		}
	}
}
