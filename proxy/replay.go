package proxy

import (
	"net/http"

	"github.com/queue-dev/queue/headers"
)

// mayReplay reports whether a request that failed at the upstream may be
// sent to it again, where sent is how many times it went out already (its
// head written to a connection, whole or in part). It is the one rule of
// both upstream protocols: serveH1 asks it about the idle-close race,
// serveH2 about a stream the upstream did not process (h2.go).
//
// The callers establish first that nothing of the request can have been
// processed (a reused HTTP/1.1 connection closed before any response byte;
// on h2c, REFUSED_STREAM or a stream above a GOAWAY's last one, RFC 9113
// section 8.7), and that the request is whole in hand. The rule adds what
// holds whatever the failure:
//
//   - a request not sent yet (sent 0: its connection failed before a byte
//     of it was written) goes, whatever its method;
//   - a request is sent again at most once (sent 1), never a third time;
//   - and only when it is idempotent (RFC 9110 section 9.2.2: GET, HEAD,
//     OPTIONS, TRACE, PUT, DELETE) or carries Idempotency-Key (or
//     X-Idempotency-Key), as net/http's Transport reads them
//     (Request.isReplayable, golang.org/issue/19943): a client that sends
//     the key says the server applies a request with it once, however
//     often it arrives. A POST or PATCH without one gets 502 rather than
//     risking being applied twice.
func mayReplay(r *http.Request, sent int) bool {
	switch {
	case sent == 0:
		return true
	case sent > 1:
		return false
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	if _, ok := r.Header[headers.IdempotencyKey]; ok {
		return true
	}
	_, ok := r.Header[headers.XIdempotencyKey]
	return ok
}
