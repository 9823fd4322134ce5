package h3

import "time"

// Limits of queue's HTTP/3 server: transport limits that quic-go enforces
// with the values set here, and HTTP/3's own. They are not flags: they
// bound hostile clients, and no honest one comes near them.
const (
	// MaxConcurrentStreams bounds the request streams a client may have
	// open on one connection (QUIC's MAX_STREAMS): a stream's credit comes
	// back when it is done, as HTTP/2's MAX_CONCURRENT_STREAMS.
	MaxConcurrentStreams = 250
	// MaxUniStreams bounds the client's unidirectional streams: HTTP/3
	// needs three (control, QPACK encoder and decoder); the rest are for
	// stream types queue does not know, which it stops reading at once.
	MaxUniStreams = 8
	// MaxHeaderListSize bounds a request's decoded header list, counted as
	// RFC 9114 section 4.2.2 counts it (name, value and 32 bytes a field),
	// and is advertised (SETTINGS_MAX_FIELD_SECTION_SIZE). A request over
	// it is answered 431, which the upstream never sees.
	MaxHeaderListSize = 64 << 10
	// MaxHeaderFrame bounds the encoded payload of a HEADERS frame: one
	// over it is not read, its stream is reset (H3_EXCESSIVE_LOAD), and it
	// costs the connection GlitchHeadTooLarge. The unknown frames a client
	// may send before its HEADERS are bounded by it too. Without a dynamic
	// table a field decodes to at most about twice its encoded size
	// (Huffman), and the decoder stops at MaxHeaderListSize.
	MaxHeaderFrame = 2 * MaxHeaderListSize
	// MaxControlFrame bounds a frame on the client's control stream
	// (SETTINGS, GOAWAY, and frames queue skips).
	MaxControlFrame = 4 << 10
	// StreamWindow is the flow-control window of a request stream's body:
	// what a client may send before the handler reads it.
	StreamWindow = 1 << 20
	// ConnWindow is a connection's window over all its streams' bodies:
	// the most a connection's unread request bytes hold in memory. With
	// the ingress's connection limit it bounds them in total.
	ConnWindow = 4 << 20
	// MaxGlitches is a connection's budget for what a well-behaved client
	// never does, or seldom: a stream reset or refused before its response
	// ended (GlitchFrame), a request queue answers itself (GlitchRefused),
	// a header list over MaxHeaderListSize (GlitchHeadTooLarge). Each
	// stream served to its end takes one back. Past the budget the
	// connection closes with H3_EXCESSIVE_LOAD: a stream-reset flood
	// (the HTTP/3 form of CVE-2023-44487) ends there.
	MaxGlitches = 1000
	// Glitch weights (MaxGlitches).
	GlitchFrame        = 1
	GlitchRefused      = 10
	GlitchHeadTooLarge = 100
	// WriteTimeout fails a response write that waits longer than this for
	// the client's flow control: a client that stops reading loses the
	// stream (H3_REQUEST_CANCELLED), and the handler its upstream request.
	WriteTimeout = 60 * time.Second
	// HandshakeTimeout bounds a QUIC handshake.
	HandshakeTimeout = 5 * time.Second
	// RetryAbove is the rate of new handshakes a second past which a
	// client must prove its address with a Retry round trip before the
	// server keeps any state for it (RFC 9000 section 8.1.2): under an
	// Initial flood from spoofed addresses the flood costs a stateless
	// packet each, not a handshake.
	RetryAbove = 64
)
