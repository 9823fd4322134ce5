// Package engine is the contract between queue's serving engines (h1, the
// HTTP/1.1 engine, and h2, the HTTP/2 engine) and the handler behind them
// that proxies (package proxy): what an engine offers a handler beyond
// net/http's http.ResponseWriter, and the protocol-neutral form of a
// response head that the proxy's upstream client writes and both engines
// read.
//
// The capabilities are optional interfaces, declared here by the side
// that provides them, as net/http declares http.Flusher: a handler asserts
// them on its ResponseWriter (or request body), through the Unwrap chain of
// the layers in front of it, and does without when they are not there
// (net/http's own server, a test's recorder). Both engines assert at
// compile time that they implement them.
//
// It imports nothing of queue's (net/http only), so that the engines and
// the proxy, which must not import each other, can both import it.
package engine

import "net/http"

// Field is one field of a response head: its name in the canonical form
// net/http uses for header keys ("Content-Type"), and its value, trimmed.
type Field struct {
	Name, Value string
}

// ResponseHead is a response head passed on as it came from the upstream,
// without a header map: the upstream client parses the head into it and
// the engine writes the fields in its own wire format (HTTP/1.1 lines,
// HTTP/2 HPACK fields), before those of the handler's Header().
//
// Fields holds no framing or connection-specific field (Content-Length,
// Transfer-Encoding, Connection and those it names, Keep-Alive, Upgrade,
// ...), and no Trailer: a head that needs any of them handled goes by the
// header map instead. Names and values are valid (token names, no CR, LF or
// NUL in values). Their strings point into the keep buffer (Keeper's
// KeepBuffer), which stays unchanged until the response is complete.
type ResponseHead struct {
	// Status is the upstream's final status, which the handler also writes
	// with WriteHeader. 0 means that no head was handed over: the engine
	// ignores the rest.
	Status int
	// Fields are the end-to-end fields, in the upstream's order.
	Fields []Field
	// ContentLength is the Content-Length that came with the head, or -1:
	// the engine frames the response by it (a Content-Length the handler
	// sets in Header() wins), and a HEAD or 304 response carries it.
	ContentLength int64
	// Date reports that a Date field is among Fields, so that the engine
	// adds none of its own.
	Date bool
}

// Reset empties h for a new response, keeping the storage of Fields.
func (h *ResponseHead) Reset() {
	clear(h.Fields) // no string stays reachable from the storage
	*h = ResponseHead{Fields: h.Fields[:0], ContentLength: -1}
}

// Keeper is implemented by the response writers of queue's engines, which
// write the response head only after the handler has returned or at its
// first write: storage they keep for the handler until the response is
// complete, so that an upstream's head can be read into it and handed over
// without copying its fields into a header map.
type Keeper interface {
	// KeepBuffer returns n bytes that stay the handler's until the
	// response is complete. A second call may return the same storage.
	KeepBuffer(n int) []byte
	// KeepValues returns scratch space for header value slices that stays
	// the handler's until the response is complete, for a head parsed into
	// the header map with its strings in KeepBuffer's storage.
	KeepValues() *[]string
	// KeepHead returns the response's head storage, empty (Status 0). The
	// handler fills it, its strings in KeepBuffer's storage, and hands it
	// over by setting Status, before it calls WriteHeader.
	KeepHead() *ResponseHead
	// ConnCache returns bytes the handler may keep across the requests of
	// one client connection (the proxy keeps the forwarding fields it
	// built there). They are dropped with the connection.
	ConnCache() *[]byte
}

// HeldBody is implemented by the request body of queue's HTTP/1.1 engine,
// which may have come whole with its head: Held returns it where it lies
// in the engine's read buffer, lent until the handler returns, and marks it
// read; or nil when it did not come whole.
type HeldBody interface {
	Held() []byte
}

// Unwatcher is implemented by the response writer of queue's HTTP/1.1
// engine, which looks at the connection of a request in a handler once a
// tick (a timer that runs while any request is in one) and cancels the
// request's context when the client has gone. A handler that only waits on
// queue itself, for a bounded time, and reads no more of the request body
// calls Unwatch first: the client is no longer looked at for the rest of
// the request, and the ticks stop when no other request needs them, so
// that the wait costs no wake-ups of its own. The readiness probe's hold
// is one (package drain). The HTTP/2 engine has no ticks to stop: a
// stream's client is seen to go by the frames the connection reads.
type Unwatcher interface {
	Unwatch()
}

// Refuser is implemented by the response writers of queue's engines. A
// handler that answers a request with a 4xx of queue's own making, which
// the upstream never sees, calls Refuse before it writes the response: the
// connection counts the request against its glitch budget (h1.MaxGlitches,
// h2.MaxGlitches), so that a client whose requests queue refuses again and
// again loses its connection.
type Refuser interface {
	Refuse()
}

// PeerChecker is implemented by the response writer of queue's HTTP/1.1
// engine, whose watcher sees a client go only at its next tick: PeerGone
// looks at the connection now (one non-blocking peek) and reports whether
// the client has closed or reset it. A handler that made a request wait
// for something of queue's own (a slot in the concurrency limit) asks it
// before it sends the request on, so that a client that left while it
// waited costs no exchange with the upstream (HAProxy's abortonclose). The
// HTTP/2 and HTTP/3 engines need none: a stream's client is seen to go by
// the frames its connection reads, which cancel the request's context.
type PeerChecker interface {
	PeerGone() bool
}

// As finds the first of w and the writers its layers' wrappers wrap
// (Unwrap, as http.ResponseController follows them) that is a T. It is for
// paths that are not taken by every request: a type assertion to a type
// parameter looks its method table up each time, where one to a named
// interface is cached at its call site.
func As[T any](w http.ResponseWriter) (T, bool) {
	for {
		if t, ok := w.(T); ok {
			return t, true
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			var zero T
			return zero, false
		}
		w = u.Unwrap()
	}
}

// CancelNotifier is implemented by the response writer of queue's HTTP/2
// engine. A handler that waits on a channel of its own for something
// else (the h2c upstream client, for its stream's response) gives that
// channel to NotifyCancel: when the request's context is canceled (the
// client reset its stream, or its connection ended) the channel then gets
// a value, sent without blocking, so the handler, woken, finds ctx.Err
// set. It saves the handler a select on the context's Done channel, and
// the stream the channel Done would make for each request. NotifyCancel(nil)
// ends it; the handler calls it before it returns.
type CancelNotifier interface {
	NotifyCancel(ch chan<- struct{})
}

// Kept is the storage behind Keeper for a multiplexing engine's response
// writer (h2, h3), which embeds it: made with the stream object, reused by
// each of its responses (Reset), and kept until the response is complete.
type Kept struct {
	head      ResponseHead
	buf       []byte
	vals      []string
	connCache []byte
}

// KeepBuffer returns n bytes that stay the handler's until the response is
// complete (Keeper).
func (k *Kept) KeepBuffer(n int) []byte {
	if cap(k.buf) < n {
		k.buf = make([]byte, n)
	}
	return k.buf[:n]
}

// KeepValues returns scratch space for header value slices (Keeper).
func (k *Kept) KeepValues() *[]string { return &k.vals }

// KeepHead returns the response's head storage (Keeper), empty: a head
// handed over (its Status set) before WriteHeader is written before
// Header()'s fields.
func (k *Kept) KeepHead() *ResponseHead { return &k.head }

// ConnCache returns bytes kept across the responses of the stream object,
// all of one connection (Keeper).
func (k *Kept) ConnCache() *[]byte { return &k.connCache }

// Upstream returns the head the handler handed over, or nil.
func (k *Kept) Upstream() *ResponseHead {
	if k.head.Status == 0 {
		return nil
	}
	return &k.head
}

// UpstreamLength is the Content-Length of the head the handler handed
// over, or -1 (none, or none handed over).
func (k *Kept) UpstreamLength() int64 {
	if k.head.Status == 0 {
		return -1
	}
	return k.head.ContentLength
}

// Reset empties k for the next response.
func (k *Kept) Reset() {
	k.head.Reset()
	k.vals = k.vals[:0]
}
