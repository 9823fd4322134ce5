// Package chain composes queue's request path, in request order, once:
//
//	drain (probe answers, arrival counting)
//	-> stats (counting, status and duration, the access log)
//	-> tracing (the server span and kn.queueproxy.proxy)
//	-> limit (a concurrency slot, or an error; kn.queueproxy.wait with tracing on)
//	-> proxy (the upstream)
//
// Each layer is a field of [Config]; a nil field leaves its layer out of the
// path altogether, so a layer that is off costs nothing. The proxy is the
// terminal handler and is required. cmd/queue serves the handler that [New]
// returns on every serving port, over HTTP/1.1 and HTTP/2 alike (the h2c
// upgrade wraps it from outside); the tests and bench/ build queue's path
// with New too, so that none of them composes it by hand.
//
// With an adaptive limiter (limit.Config.Adaptive, --concurrency auto) the
// limit layer reads the clock once a slot is taken and gives the slot back
// with limit.Limiter.ReleaseSince, so that the limiter's controller learns
// how long the upstream held it (the request's round trip through the
// proxy, the response's body included); with a fixed limiter it calls
// Release and nothing else is on the path. New decides which, once.
//
// Layers return errors; they do not write error responses. The limiter's
// errors (a full queue, a wait for a slot that timed out, a client that went
// away while waiting) go to the proxy's one writer of error responses,
// proxy.Proxy.Fail, which maps them with proxy.StatusFor: 503 with the body
// "Service Unavailable", or nothing at all for a client that went away.
// drain writes only probe answers, which are health responses and not
// errors.
//
// The serving engine's recovery is the outermost layer (h1's and h2's
// runHandler, which log the panic with its stack through
// internal/panics): a handler that panics (the proxy aborting a response
// with http.ErrAbortHandler included, which is not logged) loses its
// connection (HTTP/1.1) or stream (HTTP/2), and the layers' deferred work
// (a limiter slot, the stats count) still runs.
//
// The handler New returns is safe for concurrent use.
package chain
