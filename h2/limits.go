package h2

import "time"

// Limits of queue's HTTP/2 server. They are not flags: they bound hostile
// clients, and no honest one comes near them.
const (
	// MaxConcurrentStreams is advertised in SETTINGS. A stream opened past
	// it, or while as many handlers still run on the connection (streams
	// the client reset included), is refused with RST_STREAM
	// REFUSED_STREAM before any handler sees it.
	MaxConcurrentStreams = 250
	// MaxHeaderListSize bounds a request's decoded header list, counted as
	// RFC 9113 section 6.5.2 counts it (name, value and 32 bytes a field).
	// It is advertised in SETTINGS; a request over it is answered 431 on
	// its stream, which the upstream never sees, and the connection goes on.
	MaxHeaderListSize = 64 << 10
	// MaxHeaderBlock bounds the encoded bytes of one header block
	// (HEADERS and its CONTINUATION frames, each frame counted with its
	// 9-byte header, so that empty frames count too). Past it the
	// connection is closed with GOAWAY ENHANCE_YOUR_CALM: the block is not
	// buffered, and decoding it stops there (CVE-2024-27316).
	MaxHeaderBlock = 2 * MaxHeaderListSize
	// MaxGlitches bounds what a connection may do that costs queue work and
	// serves nothing: a stream reset by the client before its response
	// ended, an empty DATA frame without END_STREAM, an empty CONTINUATION
	// frame, a PRIORITY or WINDOW_UPDATE frame on a closed stream. Each
	// stream served to its end takes one glitch back (down to zero). Past
	// it, GOAWAY ENHANCE_YOUR_CALM and the connection closes
	// (CVE-2023-44487, CVE-2019-9518).
	MaxGlitches = 1000
	// MaxQueued bounds the bytes of frames waiting to be written to a
	// client that does not read: acknowledgements of PING and SETTINGS
	// past it close the connection (CVE-2019-9512, CVE-2019-9515), and
	// response data waits for room well below it (queueHigh).
	MaxQueued = 1 << 20
	// MaxFrameSize is the largest frame queue reads: the protocol's
	// default, advertised as it is (RFC 9113 section 4.2).
	MaxFrameSize = 16 << 10
	// InitialWindow is the receive window queue advertises for each
	// stream and for the connection: what a client may send of request
	// bodies before a handler reads them.
	InitialWindow = 1 << 20
	// WriteTimeout closes a connection whose client takes longer than
	// this to accept queued frames (CVE-2019-9517).
	WriteTimeout = 60 * time.Second
)
