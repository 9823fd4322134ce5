package proxy

import (
	"context"
	"errors"
	"net"
	"net/http"
)

// StatusClientClosed is the status recorded (never written) for a request
// whose client went away, as nginx logs it.
const StatusClientClosed = 499

// Unavailable is implemented by errors that mean "try again elsewhere": a
// full queue, a deadline passed while waiting for a slot. They map to 503.
// Packages that may not import proxy (limit) define their own errors with
// this method.
type Unavailable interface{ Unavailable() bool }

// StatusFor maps an error from serving a request to the status the client
// gets. It is the only place that does so: the proxy's own failures, the
// limiter's errors (which the chain package hands to [Proxy.Fail]) and the
// access log's "nothing was written" all go through it.
//
//	client went away (context canceled)         499, nothing is written
//	an Unavailable error (limit.ErrQueueFull,   503
//	  limit.ErrQueueTimeout)
//	a request queue refuses                     400
//	deadline exceeded, or a net.Error timeout   504
//	anything else (refused, reset, EOF, junk)   502
func StatusFor(err error) int {
	var u Unavailable
	var ne net.Error
	switch {
	case err == nil:
		return http.StatusOK
	case errors.Is(err, errClientGone), errors.Is(err, context.Canceled):
		return StatusClientClosed
	case errors.As(err, &u) && u.Unavailable():
		return http.StatusServiceUnavailable
	case errors.Is(err, errBadRequest):
		return http.StatusBadRequest
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return http.StatusGatewayTimeout
	default:
		return http.StatusBadGateway
	}
}

var (
	// errClientGone marks a failure to read the request body from, or write
	// the response to, the client.
	errClientGone = errors.New("client went away")
	// errBadRequest marks a request queue refuses before it reaches the
	// upstream.
	errBadRequest = errors.New("bad request")
	// errBadResponse marks a response head or framing queue cannot accept.
	errBadResponse = errors.New("malformed upstream response")
)
