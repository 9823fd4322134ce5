// Package h2 is queue's HTTP/2 serving engine (RFC 9113), on
// golang.org/x/net/http2's Framer, which reads and checks frames, and its
// hpack decoder. Everything else is here: streams and their states, flow
// control in both directions, the writer, the HPACK encoding of
// responses, SETTINGS, PING, GOAWAY and the drain, and the defences of
// limits.go.
//
// # Goroutines
//
// A connection's read loop (conn.serve) runs on the goroutine that called
// ServeConn. It owns the Framer, the HPACK decoder and the header block
// being read; it never writes to the socket itself, so that a client that
// does not read cannot stop queue reading (the two would wait on each
// other's full socket buffers): what it queues (acknowledgements,
// WINDOW_UPDATE, RST_STREAM) is written by a goroutine of its own, made
// when there is something to write and nobody writing.
//
// A stream whose request is complete runs on a worker (server.go): a
// goroutine that waits for the next stream once it has served one, and
// exits after a second idle. A stream therefore costs a goroutine switch,
// not a goroutine, and no map: the connection keeps the streams it made
// (their request, header map, URL, body buffer, context and response
// writer) and reuses them.
//
// Everything the read loop and the workers share (the stream table, the
// streams' states, windows and body bytes, the queue of frames to write,
// the free streams) is under the connection's one mutex. Each stream has a
// condition variable on it for its body and its send window; the
// connection has one for its send window and queue room.
//
// # Writing
//
// Frames are appended to the connection's queue (write.go). Whoever wants
// them written (a worker at the end of its stream or on Flush, a Write
// that filled the queue) writes the whole queue, unless another goroutine
// is doing so already, and releases the mutex during the system call: the
// frames that other streams append meanwhile go out in the next write. A
// worker about to write yields once first, so that the streams ready at
// the same moment go out in one write. The client's write deadline
// (WriteTimeout) is pushed at most once a second.
//
// # Connection errors
//
// A connection error (RFC 9113 section 5.4.1) is the read loop's to end:
// it queues GOAWAY with the error's code, has it written within a second
// (conn.goAway), shuts the writing side, then reads and drops what the
// client still sends until the client closes or that second is over, and
// only then closes the socket, so that the GOAWAY is not lost to the reset
// that a close under unread bytes makes. A frame's 9-byte header is
// checked before its payload is read (conn.headerError): what the header
// alone shows to be a connection error (a first frame other than SETTINGS,
// a frame over MaxFrameSize, a frame on a stream it may not have, a
// control frame of the wrong length, anything but CONTINUATION inside a
// header block) ends the connection then, not when a payload that may
// never come has come.
//
// # Buffers and who owns them
//
//   - The read buffer (16 KiB and a frame header, pooled) is taken on plain
//     TCP only while the socket has bytes to read, in the runtime's
//     readiness callback, and given back whenever it is empty (read.go);
//     under TLS it is the connection's for its life. The Framer's frame
//     buffer is the connection's, as large as the largest frame read.
//   - A request's strings come from the HPACK decoder, which owns them (an
//     indexed field's strings are its table's): nothing is copied.
//   - A request body's DATA is copied out of the read buffer into the
//     stream's body buffer, at most the receive window (InitialWindow),
//     and the window is given back as the handler reads it.
//   - A response head is encoded into the stream's own buffer; the fields
//     the proxy hands over (an engine.ResponseHead, internal/engine's
//     Keeper) point into the stream's keep buffer until the head is
//     encoded. The encoder indexes nothing, so
//     nothing of a response outlives its stream.
//   - The stream objects, with all of the above, are dropped with their
//     connection.
//
// # What it does not do
//
// It does not push, and does not offer extended CONNECT (RFC 8441): a
// websocket over HTTP/2 cannot reach an HTTP/1.1 upstream through queue's
// proxy, which has no tunnel for it; :protocol is a malformed request.
// PRIORITY is read and checked, and ignored: responses go out in the order
// they are written.
package h2
