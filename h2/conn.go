package h2

import (
	"context"
	"crypto/tls"
	"errors"
	"github.com/queue-dev/queue/internal/httpsem"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/queue-dev/queue/internal/netio"
	"github.com/queue-dev/queue/internal/peer"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

const (
	// clientPreface opens every HTTP/2 connection (RFC 9113 section 3.4).
	clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
	// readBufSize is the connection's read buffer: a frame of the largest
	// size queue accepts, with its header, in one read. It is a class of
	// internal/pool's (pool.Frame), checked below.
	readBufSize = MaxFrameSize + 9
	// queueHigh is how much response data may wait to be written before a
	// handler's Write waits for the writer.
	queueHigh = 64 << 10
	// windowUpdateAt is how much of a receive window is consumed before it
	// is given back.
	windowUpdateAt = InitialWindow / 4
	// maxWindow is the largest flow-control window (RFC 9113 section 6.9.1).
	maxWindow = 1<<31 - 1
	// maxHeaderTable is the HPACK dynamic table the client's encoder may
	// use (the protocol's default, SETTINGS_HEADER_TABLE_SIZE).
	maxHeaderTable = 4096
	// drainPing is the payload of the PING that times the second GOAWAY of
	// a drain.
	drainPing = "h2drain!"
	// maxPingTimeout bounds the wait for the answer to a liveness PING
	// (idleFired); a shorter idle timeout bounds it too.
	maxPingTimeout = 15 * time.Second
)

// livenessPing is the payload of the PING that asks a busy connection's
// client whether it is still there (idleFired).
var livenessPing = [8]byte{'h', '2', 'a', 'l', 'i', 'v', 'e', '?'}

// pingTimeout is how long a liveness PING waits for its answer.
func (c *conn) pingTimeout() time.Duration { return min(c.s.idleTimeout(), maxPingTimeout) }

// conn is one HTTP/2 connection. Its read loop (serve) owns the reading
// side: the Framer, the HPACK decoder, the header block being read. The
// streams, their states and windows, the queue of frames to write and the
// free streams are shared with the handlers' goroutines under mu.
type conn struct {
	s  *Server
	nc net.Conn
	rd connReader
	// hdrScratch holds a header block frame's payload when it is not whole
	// in the read buffer (under TLS, a frame read in pieces).
	hdrScratch []byte
	fr         *http2.Framer // reads
	dec        *hpack.Decoder
	base       context.Context // carries the peer (peer.From)
	remote     string
	tls        *tls.ConnectionState

	// The header block being read: its stream (nil when it is refused or
	// its stream is gone, but it must still be decoded for HPACK's sake)
	// and its encoded size so far.
	cur       *stream
	curID     uint32
	curBytes  int
	curEnd    bool // the HEADERS frame had END_STREAM
	curReject http2.ErrCode
	canon     httpsem.Canonicalizer // canonical keys of uncommon names, per connection (bounded)
	blk       block
	first     bool // no frame read yet: the first must be SETTINGS

	mu          sync.Mutex
	streams     map[uint32]*stream // open or half-closed, as the client sees them
	free        []*stream
	running     int    // handlers running, of streams reset by the client too
	maxID       uint32 // the highest stream the client opened
	goingAway   bool   // the final GOAWAY is queued; new streams are ignored
	draining    bool   // the first GOAWAY is queued
	closed      bool
	lingerUntil time.Time // after a connection error: when close stops lingering (goAway)
	glitches    int
	resets      [16]uint32 // the streams queue reset last (rstLocked)
	resetNext   uint32
	sendWindow  int64 // the connection's, for DATA to the client
	initWindow  int64 // the client's SETTINGS_INITIAL_WINDOW_SIZE
	maxFrame    int   // the client's SETTINGS_MAX_FRAME_SIZE
	recvWindow  int64 // the connection's, for DATA from the client
	recvCredit  int64 // consumed DATA not yet given back by WINDOW_UPDATE
	space       sync.Cond

	w       writer
	idleAt  int64 // when the last stream ended, Unix nanoseconds
	idleT   *time.Timer
	idleArm bool
	// livePing is set while a liveness PING waits for its answer
	// (idleFired).
	livePing bool
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{s: s, nc: nc, remote: nc.RemoteAddr().String()}
	c.base = context.Background()
	if ap, err := netip.ParseAddrPort(c.remote); err == nil {
		c.base = peer.With(c.base, ap)
	}
	tc, tcp := underlying(nc)
	if tc != nil {
		st := tc.ConnectionState()
		c.tls = &st
	}
	c.rd.init(nc, tcp)
	c.space.L = &c.mu
	c.sendWindow = 65535
	c.initWindow = 65535
	c.maxFrame = 16384
	c.recvWindow = InitialWindow
	c.idleAt = time.Now().UnixNano()
	c.w.init(c)
	c.streams = make(map[uint32]*stream)
	return c
}

// serve runs the read loop until the connection ends.
func (c *conn) serve(opts *ConnOptions) {
	defer func() {
		c.close(errClosed)
		c.rd.drop()
	}()
	if c.rd.raw != nil {
		// Frames go out in raw writes too: no syscall package on the way,
		// which would wake the runtime's monitor thread (internal/netio).
		c.w.vw = new(netio.VecWriter)
		c.w.vw.Reset(c.rd.raw)
	}
	c.fr = http2.NewFramer(nil, &c.rd)
	c.fr.SetMaxReadFrameSize(MaxFrameSize)
	c.fr.SetReuseFrames()
	c.dec = hpack.NewDecoder(maxHeaderTable, c.onField)
	c.dec.SetMaxStringLength(MaxHeaderBlock)

	c.mu.Lock()
	c.w.fr.WriteSettings(
		http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: MaxConcurrentStreams},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: InitialWindow},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: MaxHeaderListSize},
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
	)
	c.w.fr.WriteWindowUpdate(0, InitialWindow-65535)
	c.w.kickLocked()
	c.mu.Unlock()

	c.nc.SetReadDeadline(time.Now().Add(c.s.headerTimeout()))
	if opts != nil && opts.Upgrade != nil {
		if err := c.upgrade(opts); err != nil {
			c.goAway(http2.ErrCodeProtocol)
			return
		}
	}
	var p [len(clientPreface)]byte
	if _, err := io.ReadFull(&c.rd, p[:]); err != nil || string(p[:]) != clientPreface {
		if err == nil {
			c.s.logger().Debug("http2: bad preface", "remote_addr", c.remote)
			c.goAway(http2.ErrCodeProtocol)
		}
		return
	}
	c.nc.SetReadDeadline(time.Time{})
	c.first = true
	for {
		if c.rd.canSession() {
			c.rd.session(c.step, c.idle, c.refused)
			return
		}
		if c.rd.buffered() == 0 {
			c.idle() // before the read waits
		}
		if !c.step() {
			return
		}
	}
}

// step reads one frame and acts on it. It reports whether the connection
// goes on. The frame's header is checked before its payload is read
// (headerError): a header that alone shows a connection error ends the
// connection at once, not when a payload that may never come has come.
func (c *conn) step() bool {
	fh, err := c.fr.ReadFrameHeader()
	if err != nil {
		return c.readError(err)
	}
	if code := c.headerError(fh); code != 0 {
		c.connError(code)
		return false
	}
	c.first = false
	if fh.Type == http2.FrameHeaders || fh.Type == http2.FrameContinuation {
		// A header block's frames are read here, not by the Framer, which
		// makes a HeadersFrame for each: an allocation a request.
		var p []byte
		if p, err = c.rd.payload(int(fh.Length), &c.hdrScratch); err != nil {
			return c.readError(err)
		}
		err = c.blockFrame(fh, p)
	} else {
		var f http2.Frame
		if f, err = c.fr.ReadFrameForHeader(fh); err != nil {
			return c.readError(err)
		}
		err = c.frame(f)
	}
	if err != nil {
		var ce http2.ConnectionError
		if errors.As(err, &ce) {
			c.connError(http2.ErrCode(ce))
		}
		return false
	}
	return true
}

// refused reports whether a frame's 9-byte header alone ends the
// connection (the read session's test, connReader.ready).
func (c *conn) refused(hdr []byte) bool {
	fh := http2.FrameHeader{
		Length:   uint32(hdr[0])<<16 | uint32(hdr[1])<<8 | uint32(hdr[2]),
		Type:     http2.FrameType(hdr[3]),
		Flags:    http2.Flags(hdr[4]),
		StreamID: (uint32(hdr[5])<<24 | uint32(hdr[6])<<16 | uint32(hdr[7])<<8 | uint32(hdr[8])) & (1<<31 - 1),
	}
	return c.headerError(fh) != 0
}

// headerError returns the connection error that a frame's header shows by
// itself, given what the read loop knows (the first frame, the header
// block open, the highest stream opened), or 0. Only what RFC 9113 makes a
// connection error is here; a stream error (a PRIORITY of the wrong
// length) waits for its frame as any frame does.
func (c *conn) headerError(fh http2.FrameHeader) http2.ErrCode {
	n, id, fl := fh.Length, fh.StreamID, fh.Flags
	switch {
	case c.first && (fh.Type != http2.FrameSettings || fl.Has(http2.FlagSettingsAck)):
		return http2.ErrCodeProtocol // the preface goes on with SETTINGS (section 3.4)
	case n > MaxFrameSize:
		return http2.ErrCodeFrameSize // section 4.2
	case c.curID != 0:
		if fh.Type != http2.FrameContinuation || id != c.curID {
			return http2.ErrCodeProtocol // section 6.10
		}
		return 0
	}
	idle := id > c.maxID // section 5.1: only HEADERS and PRIORITY may open one
	switch fh.Type {
	case http2.FrameData:
		switch {
		case id == 0 || idle:
			return http2.ErrCodeProtocol // sections 6.1, 5.1
		case fl.Has(http2.FlagDataPadded) && n < 1:
			return http2.ErrCodeFrameSize // no room for the pad length (section 4.2)
		}
	case http2.FrameHeaders:
		need := uint32(0)
		if fl.Has(http2.FlagHeadersPadded) {
			need++
		}
		if fl.Has(http2.FlagHeadersPriority) {
			need += 5
		}
		switch {
		case id == 0 || idle && id%2 == 0:
			return http2.ErrCodeProtocol // sections 6.2, 5.1.1
		case n < need:
			return http2.ErrCodeFrameSize // a field block's frame (section 4.2)
		}
	case http2.FramePriority:
		if id == 0 {
			return http2.ErrCodeProtocol // section 6.3
		}
	case http2.FrameRSTStream:
		switch {
		case id == 0 || idle:
			return http2.ErrCodeProtocol // sections 6.4, 5.1
		case n != 4:
			return http2.ErrCodeFrameSize
		}
	case http2.FrameSettings:
		switch {
		case id != 0:
			return http2.ErrCodeProtocol // section 6.5
		case fl.Has(http2.FlagSettingsAck) && n != 0, n%6 != 0:
			return http2.ErrCodeFrameSize
		}
	case http2.FramePushPromise:
		return http2.ErrCodeProtocol // a client cannot push (section 8.4)
	case http2.FramePing:
		switch {
		case id != 0:
			return http2.ErrCodeProtocol // section 6.7
		case n != 8:
			return http2.ErrCodeFrameSize
		}
	case http2.FrameGoAway:
		switch {
		case id != 0:
			return http2.ErrCodeProtocol // section 6.8
		case n < 8:
			return http2.ErrCodeFrameSize
		}
	case http2.FrameWindowUpdate:
		switch {
		case n != 4:
			return http2.ErrCodeFrameSize // section 6.9
		case id != 0 && idle:
			return http2.ErrCodeProtocol // section 5.1
		}
	case http2.FrameContinuation:
		return http2.ErrCodeProtocol // no header block is open (section 6.10)
	}
	return 0
}

// readError handles what ReadFrame refused. It reports whether the
// connection goes on.
func (c *conn) readError(err error) bool {
	var se http2.StreamError
	var ce http2.ConnectionError
	switch {
	case errors.As(err, &se):
		c.mu.Lock()
		c.streamErrorLocked(se.StreamID, se.Code)
		gerr := c.glitchLocked(GlitchFrame) // a frame malformed by itself
		c.mu.Unlock()
		if gerr != nil {
			c.connError(http2.ErrCodeEnhanceYourCalm)
			return false
		}
		return true
	case errors.As(err, &ce):
		c.connError(http2.ErrCode(ce))
	case errors.Is(err, http2.ErrFrameTooLarge):
		c.connError(http2.ErrCodeFrameSize)
	}
	return false
}

// connError ends the connection on a connection error of the client's
// making: logged at debug, as clients cause them.
func (c *conn) connError(code http2.ErrCode) {
	c.s.logger().Debug("http2: connection error", "remote_addr", c.remote, "code", code.String())
	c.goAway(code)
}

// frame handles one frame. An error ends the connection: a
// ConnectionError with GOAWAY first.
func (c *conn) frame(f http2.Frame) error {
	if c.curID != 0 {
		return http2.ConnectionError(http2.ErrCodeProtocol) // headerError checks this too
	}
	switch f := f.(type) {
	case *http2.DataFrame:
		return c.data(f)
	case *http2.PriorityFrame:
		// Read, checked and ignored (doc.go), and a glitch: RFC 9113
		// deprecates the scheme, and a flood of them costs a frame each.
		c.mu.Lock()
		defer c.mu.Unlock()
		if f.StreamDep == f.StreamID {
			c.streamErrorLocked(f.StreamID, http2.ErrCodeProtocol)
		}
		return c.glitchLocked(GlitchFrame)
	case *http2.RSTStreamFrame:
		return c.rstStream(f)
	case *http2.SettingsFrame:
		return c.settings(f)
	case *http2.PingFrame:
		return c.ping(f)
	case *http2.GoAwayFrame:
		// The client opens no more streams: the connection drains as at
		// Shutdown, and closes once its streams are done and the drain's
		// PING came back (or a second passed). Not at once: that would
		// reset it under frames the client sent after its GOAWAY (a PING,
		// h2spec 7/1), unread. Nor only when the client closes it: a
		// client that waits for the server's close would hold Shutdown
		// up until its deadline.
		c.drain()
		return nil
	case *http2.WindowUpdateFrame:
		return c.windowUpdate(f)
	case *http2.PushPromiseFrame:
		return http2.ConnectionError(http2.ErrCodeProtocol) // a client cannot push (RFC 9113 section 8.4)
	}
	return nil // unknown frame types are ignored (RFC 9113 section 4.1)
}

func (c *conn) settings(f *http2.SettingsFrame) error {
	if f.IsAck() {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	err := f.ForeachSetting(func(st http2.Setting) error {
		if err := st.Valid(); err != nil {
			return err
		}
		return c.applySetting(st)
	})
	if err != nil {
		return err
	}
	if err := c.ackLocked(); err != nil {
		return err
	}
	c.w.fr.WriteSettingsAck()
	return c.w.checkQueued()
}

// ackLocked notes the acknowledgement of a PING or SETTINGS that the
// caller queues next: a glitch if the acknowledgement of an earlier one is
// still waiting to be written (a flood: an honest client waits for its
// acknowledgement). Acknowledgements that pile up past MaxQueued end the
// connection too (checkQueued).
func (c *conn) ackLocked() error {
	if c.w.ackQueued {
		if err := c.glitchLocked(GlitchFrame); err != nil {
			return err
		}
	}
	c.w.ackQueued = true
	return nil
}

// applySetting applies one of the client's settings; mu is held.
func (c *conn) applySetting(st http2.Setting) error {
	switch st.ID {
	case http2.SettingInitialWindowSize:
		delta := int64(st.Val) - c.initWindow
		c.initWindow = int64(st.Val)
		for _, s := range c.streams {
			s.sendWindow += delta
			if s.sendWindow > maxWindow {
				return http2.ConnectionError(http2.ErrCodeFlowControl)
			}
			if delta > 0 {
				s.space.Broadcast()
			}
		}
	case http2.SettingMaxFrameSize:
		c.maxFrame = int(st.Val)
	}
	// HEADER_TABLE_SIZE: queue's encoder never indexes (encode.go).
	// ENABLE_PUSH: queue never pushes. MAX_CONCURRENT_STREAMS: queue opens
	// none. MAX_HEADER_LIST_SIZE: advisory.
	return nil
}

func (c *conn) ping(f *http2.PingFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.IsAck() {
		switch {
		case f.Data == livenessPing && c.livePing:
			c.livePing = false // the next check comes an idle timeout after the last
			if c.idleArm {
				c.idleT.Stop()
				c.idleArm = false
			}
			c.armIdleLocked()
		case string(f.Data[:]) == drainPing && c.draining && !c.goingAway:
			c.finalGoAwayLocked()
		}
		return nil
	}
	if err := c.ackLocked(); err != nil {
		return err
	}
	c.w.fr.WritePing(true, f.Data)
	return c.w.checkQueued()
}

func (c *conn) windowUpdate(f *http2.WindowUpdateFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.StreamID == 0 {
		c.sendWindow += int64(f.Increment)
		if c.sendWindow > maxWindow {
			return http2.ConnectionError(http2.ErrCodeFlowControl)
		}
		c.space.Broadcast()
		return nil
	}
	s := c.streams[f.StreamID]
	if s == nil {
		if f.StreamID > c.maxID {
			return http2.ConnectionError(http2.ErrCodeProtocol) // idle stream
		}
		return c.glitchLocked(GlitchFrame) // closed: in flight as it closed, or a flood
	}
	s.sendWindow += int64(f.Increment)
	if s.sendWindow > maxWindow {
		c.resetLocked(s, http2.ErrCodeFlowControl)
		return nil
	}
	s.space.Broadcast()
	return nil
}

func (c *conn) rstStream(f *http2.RSTStreamFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.streams[f.StreamID]
	if s == nil {
		if f.StreamID > c.maxID {
			return http2.ConnectionError(http2.ErrCodeProtocol) // idle stream
		}
		if c.resetByUs(f.StreamID) {
			return nil // crossed queue's own RST_STREAM
		}
		return c.glitchLocked(GlitchFrame) // closed
	}
	if !s.sendDone {
		if err := c.glitchLocked(GlitchFrame); err != nil {
			return err
		}
	}
	c.closeStreamLocked(s, errReset)
	return nil
}

// glitchLocked counts a glitch of weight w (MaxGlitches), and returns the
// connection error that ends the connection past the budget. The server's
// count (Server.Glitches) is one atomic add, for glitches only.
func (c *conn) glitchLocked(w int) error {
	c.s.glitches.Add(1)
	c.glitches += w
	if c.glitches > MaxGlitches {
		return errGlitches
	}
	return nil
}

// glitch is glitchLocked for the read loop, which does not hold mu.
func (c *conn) glitch(w int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.glitchLocked(w)
}

// errGlitches ends a connection past MaxGlitches.
var errGlitches = http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)

func (c *conn) data(f *http2.DataFrame) error {
	n := int64(f.Length) // padding included: it counts against the windows
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recvWindow -= n
	if c.recvWindow < 0 {
		return http2.ConnectionError(http2.ErrCodeFlowControl)
	}
	s := c.streams[f.StreamID]
	if s == nil || s.recvDone {
		c.creditLocked(n)
		if s == nil && f.StreamID > c.maxID {
			return http2.ConnectionError(http2.ErrCodeProtocol) // idle stream
		}
		if s == nil && c.resetByUs(f.StreamID) {
			// In flight when queue reset the stream: ignored (RFC 9113
			// section 5.1).
			if len(f.Data()) == 0 && !f.StreamEnded() {
				return c.glitchLocked(GlitchFrame)
			}
			return nil
		}
		// After the client's END_STREAM or RST_STREAM: STREAM_CLOSED.
		if err := c.glitchLocked(GlitchFrame); err != nil {
			return err
		}
		c.streamErrorLocked(f.StreamID, http2.ErrCodeStreamClosed)
		return nil
	}
	s.recvWindow -= n
	if s.recvWindow < 0 {
		c.creditLocked(n)
		c.resetLocked(s, http2.ErrCodeFlowControl)
		return nil
	}
	data := f.Data()
	if pad := n - int64(len(data)); pad > 0 {
		c.creditLocked(pad)
		s.recvWindow += pad
	}
	if len(data) == 0 && !f.StreamEnded() {
		if err := c.glitchLocked(GlitchFrame); err != nil {
			return err
		}
	}
	s.received += int64(len(data))
	if s.declared >= 0 && (s.received > s.declared || f.StreamEnded() && s.received != s.declared) {
		c.creditLocked(int64(len(data)))
		c.resetLocked(s, http2.ErrCodeProtocol)
		return nil
	}
	if s.bodyGone {
		c.creditLocked(int64(len(data))) // the handler is done with the body
	} else if len(data) > 0 {
		s.body.append(data)
	}
	if f.StreamEnded() {
		c.endRecvLocked(s)
	}
	s.space.Broadcast()
	return nil
}

// creditLocked gives n bytes of DATA back to the connection's window,
// batched.
func (c *conn) creditLocked(n int64) {
	c.recvCredit += n
	if c.recvCredit >= windowUpdateAt && !c.closed {
		c.w.fr.WriteWindowUpdate(0, uint32(c.recvCredit))
		c.recvWindow += c.recvCredit
		c.recvCredit = 0
	}
}

// endRecvLocked notes the client's END_STREAM on s.
func (c *conn) endRecvLocked(s *stream) {
	s.recvDone = true
	if s.sendDone {
		c.removeLocked(s)
	}
}

// streamErrorLocked answers a stream error on id, open or not.
func (c *conn) streamErrorLocked(id uint32, code http2.ErrCode) {
	if s := c.streams[id]; s != nil {
		c.resetLocked(s, code)
		return
	}
	c.rstLocked(id, code)
}

// resetLocked resets s from queue's side: RST_STREAM, and the stream is
// closed.
func (c *conn) resetLocked(s *stream, code http2.ErrCode) {
	if !s.sendDone || !s.recvDone {
		c.rstLocked(s.id, code)
	}
	c.closeStreamLocked(s, errReset)
}

// rstLocked queues RST_STREAM, and notes the stream as reset by queue:
// frames the client sent before it saw the reset are ignored.
func (c *conn) rstLocked(id uint32, code http2.ErrCode) {
	c.w.rst(id, code)
	c.resets[c.resetNext%uint32(len(c.resets))] = id
	c.resetNext++
}

// resetByUs reports whether id is among the streams queue reset last.
func (c *conn) resetByUs(id uint32) bool {
	for _, r := range c.resets {
		if r == id {
			return true
		}
	}
	return false
}

// closeStreamLocked ends s on both sides: its handler's context is
// canceled, its body and writes fail with err, and it leaves the table.
func (c *conn) closeStreamLocked(s *stream, err error) {
	s.sendDone, s.recvDone = true, true
	if s.err == nil {
		s.err = err
	}
	s.ctx.cancel()
	if n := s.body.len(); n > 0 {
		c.creditLocked(int64(n))
		s.body.reset()
	}
	s.bodyGone = true
	s.space.Broadcast()
	c.removeLocked(s)
}

// removeLocked takes s out of the table once both sides are done, and
// frees it if its handler is done too.
func (c *conn) removeLocked(s *stream) {
	if !s.inTable {
		return
	}
	s.inTable = false
	delete(c.streams, s.id)
	c.idleCheckLocked()
	s.unref()
}

// idleCheckLocked ends a draining connection that has no more streams,
// and notes when it became idle.
func (c *conn) idleCheckLocked() {
	if len(c.streams) > 0 || c.running > 0 {
		return
	}
	if c.goingAway {
		c.closeAfterFlushLocked()
		return
	}
	c.idleAt = time.Now().UnixNano()
	c.armIdleLocked()
}

// armIdleLocked arms the connection's timer, unless it is armed or the
// connection closed: on an idle connection for what is left of the idle
// timeout since idleAt, on a busy one for its liveness check an idle
// timeout away, and while a liveness PING waits for its answer for
// pingTimeout (idleFired).
func (c *conn) armIdleLocked() {
	if c.idleArm || c.closed {
		return
	}
	c.idleArm = true
	var d time.Duration
	switch {
	case c.livePing:
		d = c.pingTimeout()
	case len(c.streams) > 0 || c.running > 0:
		d = c.s.idleTimeout() // a busy connection's liveness check (idleFired)
	default:
		d = time.Duration(c.idleAt + int64(c.s.idleTimeout()) - time.Now().UnixNano())
	}
	if c.idleT == nil {
		c.idleT = time.AfterFunc(d, c.idleFired)
	} else {
		c.idleT.Reset(d)
	}
}

// idle is called by the read loop before its read waits: what the frames
// read so far want written (acknowledgements, WINDOW_UPDATE, RST_STREAM)
// is written, by another goroutine: the read loop must go on reading
// while a client that does not read holds a write up, or the two would
// wait on each other, each with its socket buffers full. And the
// connection's timer is armed if it is not.
func (c *conn) idle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.w.kickLocked()
	c.armIdleLocked()
}

func (c *conn) idleFired() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.idleArm = false
	if c.closed {
		return
	}
	if len(c.streams) > 0 || c.running > 0 {
		// A busy connection is idle in its own way when its client is
		// gone unseen: a peer that vanished without a FIN or a reset, or
		// whose end came unseen (connReader.session), while its streams
		// wait on it (a response held by flow control, a request body) or
		// on the upstream. Each idle timeout it is asked a PING; a PING
		// not answered within pingTimeout ends it, and its streams.
		if c.livePing {
			c.s.logger().Debug("http2: no answer to a liveness PING", "remote_addr", c.remote)
			c.endLocked(errClosed)
			c.rd.shutdown(c.nc)
			return
		}
		c.livePing = true
		c.w.fr.WritePing(false, livenessPing)
		c.w.kickLocked()
		c.armIdleLocked()
		return
	}
	c.livePing = false
	if time.Now().UnixNano() < c.idleAt+int64(c.s.idleTimeout()) {
		c.armIdleLocked() // a stream came and went since it was armed
		return
	}
	c.goingAway = true
	c.w.fr.WriteGoAway(c.maxID, http2.ErrCodeNo, nil)
	c.closeAfterFlushLocked()
}

// closeAfterFlushLocked writes what is queued, then closes the connection
// (the read loop's read then fails).
func (c *conn) closeAfterFlushLocked() {
	if c.closed {
		return
	}
	c.w.closeAfter = true
	c.w.kickLocked()
}

// drain starts a graceful close: GOAWAY with the highest stream id and a
// PING; the PING's ack sends the final GOAWAY (finalGoAwayLocked).
func (c *conn) drain() {
	c.mu.Lock()
	if c.draining || c.closed {
		c.mu.Unlock()
		return
	}
	c.draining = true
	c.w.fr.WriteGoAway(maxWindow, http2.ErrCodeNo, nil)
	var p [8]byte
	copy(p[:], drainPing)
	c.w.fr.WritePing(false, p)
	c.w.kickLocked()
	c.mu.Unlock()
	// A client that never acks the PING still gets the final GOAWAY.
	time.AfterFunc(time.Second, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if !c.goingAway && !c.closed {
			c.finalGoAwayLocked()
		}
	})
}

func (c *conn) finalGoAwayLocked() {
	c.goingAway = true
	c.w.fr.WriteGoAway(c.maxID, http2.ErrCodeNo, nil)
	c.w.kickLocked()
	c.idleCheckLocked()
}

// goAway ends the connection with a connection error, from the read
// loop: GOAWAY, written with what is queued before it within goAwayWait,
// then the writing side is shut (FIN), and the read loop, once it returns,
// lingers until the client closes or the same deadline passes, reading and
// dropping what the client sends, before it closes the socket (close):
// RFC 9113 section 5.4.1 has the connection closed after a connection
// error, and a close under unread bytes would be a reset that may lose the
// GOAWAY.
func (c *conn) goAway(code http2.ErrCode) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.goingAway = true
	if code == http2.ErrCodeEnhanceYourCalm && c.glitches > MaxGlitches {
		c.s.glitchCloses.Add(1)
	}
	c.w.fr.WriteGoAway(c.maxID, code, nil)
	c.lingerUntil = time.Now().Add(goAwayWait)
	c.w.closeAfter, c.w.lingering = true, true
	c.w.cut(c.lingerUntil)
	c.flushLocked(false)
	for !c.closed { // another goroutine is writing
		c.space.Wait()
	}
}

// goAwayWait bounds the writing of a GOAWAY that ends a connection in
// error, to a client that may not be reading, and the linger after it.
const goAwayWait = time.Second

// close ends the connection: every stream fails with err. After a
// connection error it first lingers (goAway).
func (c *conn) close(err error) {
	c.mu.Lock()
	c.endLocked(err)
	until := c.lingerUntil
	c.mu.Unlock()
	if !until.IsZero() {
		c.rd.linger(c.nc, until)
	}
	c.nc.Close()
}

// endLocked marks the connection closed: every stream fails with err and
// every waiter wakes.
func (c *conn) endLocked(err error) {
	if c.closed {
		return
	}
	c.closed = true
	for _, s := range c.streams {
		c.closeStreamLocked(s, err)
	}
	c.space.Broadcast()
	if c.idleT != nil {
		c.idleT.Stop()
	}
}

var errReset = errors.New("h2: stream reset")

// upgrade sets up stream 1 from an "Upgrade: h2c" request, and applies
// its HTTP2-Settings.
func (c *conn) upgrade(opts *ConnOptions) error {
	b := opts.Settings
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(b) >= 6 {
		st := http2.Setting{ID: http2.SettingID(uint16(b[0])<<8 | uint16(b[1])), Val: uint32(b[2])<<24 | uint32(b[3])<<16 | uint32(b[4])<<8 | uint32(b[5])}
		if err := st.Valid(); err != nil {
			return err
		}
		if err := c.applySetting(st); err != nil {
			return err
		}
		b = b[6:]
	}
	s := c.newStreamLocked(1)
	s.fromRequest(opts.Upgrade)
	c.maxID = 1
	c.startLocked(s)
	return nil
}
