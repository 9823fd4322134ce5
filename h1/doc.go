// Package h1 is queue's HTTP/1.1 wire code: a strict request-head parser
// (RFC 9112), request body framing (length and chunked, with trailers), and
// the serving engine that runs the request chain on each connection. Its
// chunk decoder (ChunkDecoder), one loop over every chunk a buffer holds,
// also reads the proxy's chunked responses.
//
// # The engine
//
// [Server] runs one goroutine per connection. That goroutine reads, parses,
// calls the handler and writes; there is no background reader and no
// goroutine, map, context or timer per request. A connection owns one
// *http.Request, its header map, URL, body reader and response writer, and
// reuses them for each request it carries.
//
// The first bytes of a connection decide: the HTTP/2 client preface, or ALPN
// "h2" on TLS, hands the connection to [Server.H2]; bytes that cannot be the
// start of a request line are answered 400 as soon as they are seen, not
// after the header timeout.
//
// On plain TCP, the request path's reads and writes are raw system calls in
// syscall.RawConn callbacks (internal/netio's ReadFD and VecWriter): a
// call through the syscall package would wake the runtime's monitor thread
// whenever the process had been idle, one extra wake-up per request at low
// rates. The HTTP/2 engine and the proxy's upstream connections use the
// same two.
//
// On plain TCP a connection is also served in read sessions (session.go):
// the raw read that waits for a request stays open while a request without
// a body, or with a Content-Length body that came whole with its head, is
// served and while the next one is awaited, so that the runtime keeps the
// socket's readiness and the engine reads only when there is something to
// read, one read per request, as nginx and HAProxy do; a read-then-wait
// engine tries a second read that finds nothing. A request whose body is
// still to come, an Upgrade or CONNECT ends the session and is served
// outside it, and such a request's handler alone may hijack the connection.
// Server.Close shuts a connection's socket down rather than wait for a
// session to end.
//
// A connection counts the requests that queue refuses itself with a 4xx (a
// handler's Refuse, the engine's own answer to a malformed head): past
// MaxGlitches the response carries "Connection: close" (Server.Glitches
// has the counts).
//
// A connection the engine closes while its client may still be sending (a
// request refused, a body left unread) is closed in stages, as RFC 9112
// section 9.6 asks: the sending side is shut down after the answer, and
// what the client still sends is read and dropped until it closes, for a
// second and 256 KiB at most (lingerClose), so that the answer is not lost
// to a reset while a client sending on cannot keep queue reading.
//
// A client that closes its connection while its request is in a handler is
// noticed by one watcher per server, a timer armed only while requests
// are in flight (internal/clock's Busy), which every tick (watchPeriod)
// peeks at the connections whose request has been in a handler for a whole
// tick or more, at most maxPeeks a tick (in rounds past that, so that a
// backlog does not grow the watcher's work and each is still seen): end of
// file cancels the request's context.
//
// # Buffers and who owns them
//
//   - The read buffer (pooled: 64 KiB on plain TCP, of which a read
//     touches only what it fills, 4 KiB under TLS) is taken when bytes
//     arrive and given back whenever it holds nothing unread: an idle
//     keep-alive connection holds no buffer at all, since a plain TCP
//     connection waits for readability before it takes one
//     (syscall.RawConn). A part of a head that waits for the rest moves to
//     a buffer sized to it; a head larger than the buffer grows it up to
//     Limits.MaxHeadBytes. A body that came whole with its head can be
//     lent to the handler where it lies (body.Held): the read buffer is
//     then kept until the handler returns.
//   - A request's head is copied out of the read buffer into a buffer of its
//     size, which the request owns until the handler returns. The
//     request's strings (method, target, header keys and values) point into
//     it without copying. A handler must therefore not keep any of them, nor
//     the *http.Request, after it returns; whatever outlives the request
//     (a span exported later, a log line written later) must copy.
//   - The response buffers (the head, and up to 4 KiB of body) are taken at
//     the first write and given back when the response is complete; a body
//     of declared length written whole in one Write goes out at once from
//     the handler's bytes, with its head, and takes no body buffer. The
//     buffer the response lends its handler (KeepBuffer, KeepValues,
//     KeepHead: internal/engine's Keeper) is given back then too: the
//     proxy copies an upstream response head there and either hands its
//     fields over as an engine.ResponseHead, or points the response's map
//     fields into it; either way they stay until the engine has written
//     them, after the handler returned. A proxied head whose fields all
//     came in an engine.ResponseHead is built in the room after them.
//   - ConnCache's bytes are the handler's for the connection's life: the
//     proxy keeps there the forwarding fields it built for the connection's
//     last Host, a few hundred bytes at most.
//   - A connection's request state (request, maps, context) is made at its
//     first complete head: a connection that never sends one holds its
//     goroutine and at most a 512-byte buffer.
//
// # Goroutines
//
// The connection's goroutine owns everything but this: while a handler
// runs, the request body may be read on another goroutine (the proxy's
// body writer streams an upload while the response is read), which then
// owns the read side; the handler's goroutine owns the response. Server
// fields and the watcher's per-connection flags are safe for concurrent
// use.
//
// # What it does not do
//
// It does not serve HTTP/2 (H2 does), absolute-form or CONNECT targets
// beyond parsing them (the proxy refuses them), or transfer codings other
// than chunked (501). It does not sniff content types.
package h1
