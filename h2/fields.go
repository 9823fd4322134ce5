package h2

import (
	"encoding/binary"
	"net/http"
	"time"

	"github.com/queue-dev/queue/internal/hpackw"
	"github.com/queue-dev/queue/internal/httpsem"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// block is what the read loop learns of a header block as it decodes it.
type block struct {
	httpsem.Section
	size     int // the header list's size (RFC 9113 section 6.5.2)
	tooLarge bool
	bomb     bool // decoded past HPACKBombRatio: the connection ends
}

// blockFrame handles a HEADERS or CONTINUATION frame whose header
// headerError has let through (the stream id, the frame's room for its
// pad length and priority, CONTINUATION only within an open block), with
// its payload p (RFC 9113 sections 6.2 and 6.10).
func (c *conn) blockFrame(fh http2.FrameHeader, p []byte) error {
	if fh.Type == http2.FrameContinuation {
		return c.continuation(fh.Flags.Has(http2.FlagContinuationEndHeaders), p)
	}
	pad := 0
	if fh.Flags.Has(http2.FlagHeadersPadded) {
		pad, p = int(p[0]), p[1:]
	}
	prio := false
	var dep uint32
	if fh.Flags.Has(http2.FlagHeadersPriority) {
		prio, dep, p = true, binary.BigEndian.Uint32(p)&(1<<31-1), p[5:]
	}
	if pad > len(p) {
		// A stream error, as x/net's Framer makes it.
		return http2.StreamError{StreamID: fh.StreamID, Code: http2.ErrCodeProtocol}
	}
	return c.headers(fh.StreamID, fh.Flags.Has(http2.FlagHeadersEndStream), fh.Flags.Has(http2.FlagHeadersEndHeaders), prio, dep, p[:len(p)-pad])
}

// headers starts a header block (frag, the first fragment): a new
// stream's request, or a stream's trailers. prio and dep are the frame's
// priority, if it has one.
func (c *conn) headers(id uint32, endStream, endHeaders, prio bool, dep uint32, frag []byte) error {
	c.blk = block{}
	c.cur, c.curReject = nil, 0
	c.dec.SetEmitEnabled(true) // off after the last block if it was a bomb
	c.mu.Lock()
	s := c.streams[id]
	switch {
	case s != nil:
		switch {
		case s.recvDone:
			c.curReject = http2.ErrCodeStreamClosed
		case !endStream:
			c.curReject = http2.ErrCodeProtocol // trailers end the stream
		default:
			c.cur = s
			if s.trailer == nil {
				s.trailer = make(http.Header)
			}
			c.blk.Reset(s.trailer, &s.vals, &c.canon, true)
		}
	case id <= c.maxID && c.resetByUs(id):
		// Trailers in flight when queue reset the stream: decoded for
		// HPACK's sake, and ignored.
	case id <= c.maxID:
		c.mu.Unlock()
		return http2.ConnectionError(http2.ErrCodeStreamClosed)
	case id%2 == 0:
		c.mu.Unlock()
		return http2.ConnectionError(http2.ErrCodeProtocol)
	default:
		c.maxID = id
		switch {
		case c.goingAway:
			// Past the final GOAWAY: ignored; the client retries it
			// elsewhere. Decoded all the same, for HPACK's state.
		case c.glitches > MaxGlitches:
			// Past the budget by a handler's Refuse (response.go), which
			// leaves the end of the connection to the read loop: no
			// more streams.
			c.mu.Unlock()
			return errGlitches
		case len(c.streams) >= MaxConcurrentStreams || c.running >= MaxConcurrentStreams:
			// Refused, and a glitch: past the limit the client set, or
			// while its reset streams' handlers run (rapid reset).
			c.curReject = http2.ErrCodeRefusedStream
			if err := c.glitchLocked(GlitchFrame); err != nil {
				c.mu.Unlock()
				return err
			}
		default:
			c.cur = c.newStreamLocked(id)
			c.blk.Reset(c.cur.hdr, &c.cur.vals, &c.canon, false)
		}
	}
	if prio && dep == id {
		c.curReject = http2.ErrCodeProtocol // a stream cannot depend on itself
		if c.cur != nil && !c.blk.Trailers {
			c.resetLocked(c.cur, c.curReject)
			c.curReject = 0
		}
		c.cur = nil
	}
	c.mu.Unlock()
	c.curID, c.curEnd = id, endStream
	c.curBytes = 9 + len(frag)
	if err := c.decode(frag); err != nil {
		return err
	}
	if len(frag) == 0 && !endHeaders {
		if err := c.glitch(GlitchFrame); err != nil {
			return err
		}
	}
	if endHeaders {
		return c.endBlock()
	}
	// The rest of the block must come within the header timeout: the
	// stream is in the table meanwhile, and keeps the connection from
	// idling out.
	c.nc.SetReadDeadline(time.Now().Add(c.s.headerTimeout()))
	return nil
}

// continuation goes on with the open header block: frag, the next
// fragment, ends it when endHeaders.
func (c *conn) continuation(endHeaders bool, frag []byte) error {
	c.curBytes += 9 + len(frag)
	if c.curBytes > MaxHeaderBlock {
		return http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)
	}
	if len(frag) == 0 && !endHeaders {
		if err := c.glitch(GlitchFrame); err != nil {
			return err
		}
	}
	if err := c.decode(frag); err != nil {
		return err
	}
	if endHeaders {
		c.nc.SetReadDeadline(time.Time{})
		return c.endBlock()
	}
	return nil
}

// decode feeds a fragment of the header block to the HPACK decoder. A
// fragment that made the block an HPACK bomb ends the connection.
func (c *conn) decode(frag []byte) error {
	if _, err := c.dec.Write(frag); err != nil {
		return http2.ConnectionError(http2.ErrCodeCompression)
	}
	if c.blk.bomb {
		return c.glitch(GlitchBomb)
	}
	return nil
}

// endBlock acts on a whole header block. A list over MaxHeaderListSize is
// a glitch of its own weight, whatever its stream; a request queue refuses
// (reset as malformed, or answered 400) is one too.
func (c *conn) endBlock() error {
	if err := c.dec.Close(); err != nil {
		return http2.ConnectionError(http2.ErrCodeCompression)
	}
	id, s, b := c.curID, c.cur, &c.blk
	c.curID, c.cur = 0, nil
	c.mu.Lock()
	defer c.mu.Unlock()
	if b.tooLarge {
		if err := c.glitchLocked(GlitchHeadTooLarge); err != nil {
			return err
		}
	}
	if s == nil {
		if c.curReject != 0 {
			c.streamErrorLocked(id, c.curReject)
		}
		return nil
	}
	if s.err != nil {
		return nil // reset while its block was read
	}
	if b.Trailers {
		if b.Bad || b.tooLarge || (s.declared >= 0 && s.received != s.declared) {
			c.resetLocked(s, http2.ErrCodeProtocol)
			return c.glitchLocked(GlitchRefused)
		}
		c.endRecvLocked(s)
		s.space.Broadcast()
		return nil
	}
	if b.tooLarge {
		c.answerLocked(s, http.StatusRequestHeaderFieldsTooLarge)
		return nil
	}
	if !b.Valid() {
		c.resetLocked(s, http2.ErrCodeProtocol)
		return c.glitchLocked(GlitchRefused)
	}
	declared := int64(-1)
	if b.ContentLength != "" {
		n, ok := httpsem.ParseDigits(b.ContentLength)
		if !ok || (c.curEnd && n != 0) {
			c.resetLocked(s, http2.ErrCodeProtocol)
			return c.glitchLocked(GlitchRefused)
		}
		declared = n
	}
	if !s.setRequest(b, declared, c.curEnd) {
		c.answerLocked(s, http.StatusBadRequest)
		return c.glitchLocked(GlitchRefused)
	}
	if c.curEnd {
		c.endRecvLocked(s)
	}
	c.startLocked(s)
	return nil
}

// answerLocked answers s from the read loop, with an empty body: a
// request the handler never sees.
func (c *conn) answerLocked(s *stream, status int) {
	c.w.hbuf = hpackw.AppendStatus(c.w.hbuf[:0], status)
	c.w.hbuf = hpackw.AppendField(c.w.hbuf, "content-length", "0")
	c.w.headersLocked(s.id, c.w.hbuf, true)
	s.sendDone = true
	s.bodyGone = true
	if s.body.len() > 0 {
		c.creditLocked(int64(s.body.len()))
		s.body.reset()
	}
	if s.recvDone || c.curEnd {
		c.removeLocked(s)
	}
}

// onField takes one decoded field of the block being read. Past
// MaxHeaderListSize it only counts the list's size, to tell an oversized
// head from an HPACK bomb: once the list is HPACKBombRatio times what the
// block has brought so far (this frame whole included), the decoder calls
// it no more for the block, and the connection ends after the frame
// (decode).
func (c *conn) onField(f hpack.HeaderField) {
	b := &c.blk
	b.size += len(f.Name) + len(f.Value) + 32
	if b.size > MaxHeaderListSize {
		b.tooLarge = true
		if b.size > HPACKBombRatio*c.curBytes {
			b.bomb = true
			c.dec.SetEmitEnabled(false)
		}
		return
	}
	if c.cur == nil {
		return
	}
	b.Add(f.Name, f.Value)
}
