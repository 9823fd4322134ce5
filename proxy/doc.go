// Package proxy is queue's terminal handler: it sends each request to the one
// upstream (the user container on loopback) and streams the answer back.
//
// The upstream protocol is fixed by configuration, never by what the client
// spoke: "http1" uses queue's own HTTP/1.1 client on the wire package h1:
// h1.go runs an exchange in three steps (prepareH1: the target, the
// deadline and a held body; sendH1: one attempt, the rewritten request
// head and a held body in one write, then the response head, parsed by
// h1.ParseResponseFields into an engine.ResponseHead that queue's engines,
// HTTP/1.1 and HTTP/2, write without a header map, or by h1.ParseResponse
// into another writer's map; finishH1: the response passed on), copy.go
// copies the response body, upload.go streams a request body too large to
// hold, and pool.go keeps the connections (replay on a fresh one for the
// idle-close race, idle retirement, the reaper of departed clients).
// Everything of an exchange runs on the handler's goroutine but a streamed
// upload. "h2c" uses queue's own HTTP/2 client with prior knowledge
// (RFC 9113 section 3.3): h2c.go keeps the connections and runs their read
// loops, h2cstream.go a stream (the request's HEADERS, HPACK-encoded by
// internal/hpackw from the same head appendHead writes for HTTP/1.1, and
// its body), h2.go an exchange (serveH2, exchangeH2C, the response head
// handed to the engines as an engine.ResponseHead, as for HTTP/1.1).

// Both protocols take a request's target and Host under one rule,
// target.go's upstreamTarget: origin-form or "*", never CONNECT.
//
// Both protocols send a request again under one rule, replay.go's
// mayReplay: at most once, and only an idempotent request. A connect the
// upstream refuses is retried within Config.RetryWindow, on the request's
// goroutine, with one outage (outage.go) shared by the waiting requests.
//
// Every failure on the request path becomes a response in one place:
// [StatusFor] maps an error to its status and [Proxy.Fail] writes it, the
// status text as the body; the chain package sends the limiter's errors
// there too.
//
// It deliberately does not count, queue, limit or probe: those are separate
// layers, composed with the proxy by the chain package. A *Proxy is safe for
// concurrent use.
//
// # The h2c client's goroutines
//
// One read loop per upstream connection (h2cConn.readLoop) owns the
// Framer, the HPACK decoder and the header block being read; one writer
// (h2cConn.writeLoop) writes the write queue, woken when there is
// something in it (kickLocked). Neither the read loop nor a handler
// writes to the socket, so that an upstream that does not read cannot
// stop queue reading, nor hold a handler where it could not be stopped.
// The writer, woken, first yields to the goroutines already runnable, so
// that the requests that came in one wake-up of the netpoller queue their
// HEADERS before the one write that carries them all. Reads and writes
// are raw system calls on plain TCP (h2cio.go, internal/netio). The read
// loop wakes a stream's handler only before it waits for the socket, so
// that a response's HEADERS and DATA that arrive together wake it once.
// The handler's goroutine encodes its request, queues its frames, kicks
// the writer, then waits on its stream's channel and the request's
// context. A request body that is not sent with the head (it streams, or
// the windows do not take it whole) is sent by a goroutine of its own
// (h2cStream.pump), so that a gRPC bidirectional stream's two directions
// run at once; the handler stops it before it returns. One timer per
// connection (h2cConn.tick) fails the streams whose deadline passed
// (--timeout, --response-start-timeout, --idle-timeout), PINGs a
// connection whose streams wait in silence and gives it up when the PING
// goes unanswered, and retires a connection idle for
// --upstream-idle-timeout. Everything the read loop, the timer and the
// handlers share (the stream table, windows, states, the write queue, the
// free streams) is under the connection's one mutex.
//
// # The h2c client's buffers and who owns them
//
//   - The read buffer (h2cReader, a frame and its header) and the header
//     block being gathered are the read loop's, for the connection's life.
//   - A response's strings are the HPACK decoder's, immutable: the head's
//     values go to the engine as they are, its names canonicalised into
//     the response's keep buffer (engine.Keeper).
//   - A response's DATA is copied into its stream's buffer (pooled, at
//     most the stream's receive window, 256 KiB), which the handler swaps
//     for its own empty one and writes to the client; the stream's window
//     is given back as the handler takes the bytes, in one WINDOW_UPDATE per
//     half window, the connection's as the bytes arrive, per quarter.
//   - The write queue holds the frames to write, at most 256 KiB of request
//     DATA (a body waits for room beyond it), and is the writer's while it
//     writes.
//   - Stream objects (their channels, header block and field storage) are
//     the connection's and reused: a stream is reset upstream (RST_STREAM
//     CANCEL) unless closed before its handler returns, so the upstream
//     never has more of queue's streams open than queue has requests.
package proxy
