// Package h3 is queue's HTTP/3 server (RFC 9114): its own HTTP/3 layer
// over quic-go's QUIC transport, serving requests to an http.Handler as
// the HTTP/1.1 and HTTP/2 engines (packages h1, h2) do, with the same
// contract with the proxy behind it (package engine).
//
// quic-go carries the transport: the handshake (TLS 1.3, 0-RTT off),
// address validation (Retry, past RetryAbove handshakes a second), the
// anti-amplification limit, loss recovery and congestion control, flow
// control (the windows below), stream limits, stateless resets, and the
// UDP fast paths (GSO, batched receives) where the kernel has them. This
// package is HTTP/3's frames and QPACK over its streams:
//
//   - A connection's goroutine accepts its request streams and hands each
//     to a worker (package workers): a stream costs a goroutine switch,
//     not a goroutine. Another goroutine accepts the client's
//     unidirectional streams (control, QPACK encoder and decoder), one
//     goroutine each while they last.
//   - QPACK without a dynamic table (SETTINGS_QPACK_MAX_TABLE_CAPACITY 0):
//     the static table and literals only, so that no stream blocks on
//     another and no field decodes to more than its bytes (qpack.go).
//   - A request whose stream ended with its HEADERS frame gets
//     http.NoBody, as an HTTP/2 request with END_STREAM does: the proxy
//     sends it upstream without a body.
//   - The request's context is its QUIC stream's: canceled when the
//     client resets the stream (STOP_SENDING) or the connection ends.
//   - The response writer implements the proxy's fast paths
//     (engine.Keeper, engine.Refuser, engine.CancelNotifier): a response
//     head the proxy read from the upstream is encoded straight from it,
//     and a response whose body comes in one Write leaves in one stream
//     write, HEADERS and DATA together, with the stream's FIN.
//
// Shutdown sends GOAWAY on every connection's control stream, refuses
// streams past it with H3_REQUEST_REJECTED, and waits for the requests in
// flight, as the other engines drain.
package h3
