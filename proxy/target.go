package proxy

import (
	"fmt"
	"net/http"

	"github.com/queue-dev/queue/headers"
	"golang.org/x/net/http/httpguts"
)

// upstreamTarget is the one rule of what request target and Host the
// upstream gets, whichever protocol it speaks: the target is origin-form
// ("/path?query") or asterisk-form ("*", RFC 9112 section 3.2), and the
// Host valid. CONNECT and absolute- or authority-form targets are for
// forward proxies, which an origin's sidecar is not: errBadRequest. A
// request that no server read (RequestURI empty) goes by its URL; the
// HTTP/2 upstream client sends the URL either way.
func upstreamTarget(r *http.Request, o *headers.Outbound) (string, error) {
	if r.Method == http.MethodConnect {
		return "", fmt.Errorf("%w: CONNECT %q", errBadRequest, truncate(r.Host))
	}
	target := r.RequestURI
	if target == "" && r.URL != nil {
		target = r.URL.RequestURI()
	}
	if target == "" || (target[0] != '/' && target != "*") {
		return "", fmt.Errorf("%w: target %q", errBadRequest, truncate(target))
	}
	if !httpguts.ValidHostHeader(o.Host) {
		return "", fmt.Errorf("%w: host %q", errBadRequest, truncate(o.Host))
	}
	return target, nil
}
