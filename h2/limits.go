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
	// its stream, which the upstream never sees, and costs the connection
	// GlitchHeadTooLarge; one that decodes to more than HPACKBombRatio
	// times its encoded size ends the connection at once.
	MaxHeaderListSize = 64 << 10
	// MaxHeaderBlock bounds the encoded bytes of one header block
	// (HEADERS and its CONTINUATION frames, each frame counted with its
	// 9-byte header, so that empty frames count too). Past it the
	// connection is closed with GOAWAY ENHANCE_YOUR_CALM: the block is not
	// buffered, and decoding it stops there (CVE-2024-27316).
	MaxHeaderBlock = 2 * MaxHeaderListSize
	// HPACKBombRatio is how many times its encoded size a header list over
	// MaxHeaderListSize may decode to before it is taken for an HPACK bomb
	// (a large field in the dynamic table, referenced again and again):
	// the bomb costs GlitchBomb, which ends the connection as soon as the
	// frame that crossed the ratio is decoded, and the rest of that frame
	// is decoded for the table's sake only, without a call per field. An
	// honest client's oversized head is mostly literals, about as large
	// decoded as encoded: a block that decodes past MaxHeaderListSize to
	// 16 times its size repeats what the dynamic table (4 KiB) holds.
	HPACKBombRatio = 16
	// MaxGlitches is a connection's budget for what a well-behaved client
	// never does, or seldom: each such event, a glitch, costs its weight,
	// and each stream served to its end takes one back (down to zero).
	// Past the budget, GOAWAY ENHANCE_YOUR_CALM and the connection closes
	// (CVE-2023-44487, CVE-2019-9512, CVE-2019-9516, CVE-2019-9518). As
	// HAProxy's tune.h2.fe.glitches-threshold does, it counts what serves
	// nothing and costs queue work, each event once, with a weight where
	// one costs far more than another:
	//
	//   - GlitchFrame: a stream the client resets before its response
	//     ended, a stream refused (MaxConcurrentStreams); an empty DATA
	//     frame without END_STREAM, an empty HEADERS or CONTINUATION frame
	//     without END_HEADERS; a DATA, WINDOW_UPDATE or RST_STREAM frame on
	//     a closed stream; a PRIORITY frame; a PING or SETTINGS that comes
	//     while the acknowledgement of an earlier one still waits to be
	//     written (a flood: an honest client waits for its ack); a frame
	//     that is a stream error by itself (a WINDOW_UPDATE of increment 0
	//     on a stream, a PRIORITY of the wrong length).
	//   - GlitchRefused: a request queue answers itself and the upstream
	//     never sees: malformed (RST_STREAM PROTOCOL_ERROR), or answered
	//     with a 4xx of queue's making (a target that is not origin-form, a
	//     CONNECT, a bad probe header: the handler's Refuse).
	//   - GlitchHeadTooLarge: a header list over MaxHeaderListSize (431).
	//   - GlitchBomb: an HPACK bomb (HPACKBombRatio).
	MaxGlitches = 1000
	// GlitchFrame is the weight of a glitch of one frame or stream
	// (MaxGlitches).
	GlitchFrame = 1
	// GlitchRefused is the weight of a request that queue refuses itself
	// (MaxGlitches): a hundred of them spend the budget, the next ends the
	// connection.
	GlitchRefused = 10
	// GlitchHeadTooLarge is the weight of a header list over
	// MaxHeaderListSize (MaxGlitches): a client that sends one keeps its
	// connection, ten in a row spend the budget, the eleventh ends it.
	GlitchHeadTooLarge = 100
	// GlitchBomb is the weight of an HPACK bomb (HPACKBombRatio): more
	// than the whole budget, so that the first ends the connection.
	GlitchBomb = MaxGlitches + 1
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
