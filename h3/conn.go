package h3

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/quicvarint"
)

// conn is one QUIC connection: its goroutine accepts request streams and
// hands each to a worker; the client's unidirectional streams are read on
// goroutines of their own.
type conn struct {
	s      *Server
	qc     *quic.Conn
	tls    *tls.ConnectionState // shared by its requests, read-only
	remote string

	mu       sync.Mutex
	ctrl     *quic.SendStream // the server's control stream
	free     []*stream        // stream objects to reuse
	active   int              // handlers running
	glitches int
	nextID   quic.StreamID // the request stream after the highest accepted (0: none yet)
	draining bool          // the first GOAWAY went: no more after the second
	goneAway bool          // the final GOAWAY went: later streams are refused
	goAwayID quic.StreamID // what the final GOAWAY said
	closed   bool
	peerCtrl bool // the client's control stream came

	// The sender writes the ends of responses (response.sendEnd): once the
	// workers ready to run have queued theirs, so that quic-go packs them
	// into one train of packets, one system call (GSO), rather than a
	// packet and a call each.
	sendQ    []*stream
	sendNext []*stream
	sending  bool
	sendGone bool // the sender ended with the connection
	sendWake chan struct{}
}

func newConn(s *Server, qc *quic.Conn) *conn {
	cs := qc.ConnectionState().TLS
	return &conn{s: s, qc: qc, tls: &cs, remote: qc.RemoteAddr().String(), sendWake: make(chan struct{}, 1)}
}

// serve runs the connection until it closes.
func (c *conn) serve() {
	defer c.s.conns.Remove(c)
	defer c.close(errNoError)
	ctrl, err := c.qc.OpenUniStream()
	if err != nil {
		return
	}
	c.mu.Lock()
	c.ctrl = ctrl
	c.mu.Unlock()
	if _, err := ctrl.Write(settingsFrame); err != nil {
		return
	}
	go c.acceptUni()
	go c.sendLoop()
	if c.s.conns.ShuttingDown() {
		c.drain()
	}
	for {
		str, err := c.qc.AcceptStream(context.Background())
		if err != nil {
			return
		}
		c.mu.Lock()
		if c.goneAway && str.StreamID() >= c.goAwayID || c.closed {
			c.mu.Unlock()
			// Past the final GOAWAY: not processed, the client may retry.
			str.CancelRead(quic.StreamErrorCode(errRequestRejected))
			str.CancelWrite(quic.StreamErrorCode(errRequestRejected))
			continue
		}
		if id := str.StreamID(); id >= c.nextID {
			c.nextID = id + 4
		}
		st := c.newStreamLocked(str)
		c.active++
		c.mu.Unlock()
		c.s.workers.Run(st)
	}
}

// send queues st's response end for the sender.
func (c *conn) send(st *stream) {
	c.mu.Lock()
	if c.sendGone {
		c.mu.Unlock()
		st.res.sendEnd() // fails: the connection is gone
		return
	}
	c.sendQ = append(c.sendQ, st)
	wake := !c.sending
	c.sending = true
	c.mu.Unlock()
	if wake {
		c.sendWake <- struct{}{}
	}
}

// sendLoop is the sender: woken by the first response end queued, it
// yields once, so that the workers ready to run queue theirs, then writes
// them all. It ends with the connection, once nothing is queued.
func (c *conn) sendLoop() {
	for {
		select {
		case <-c.sendWake:
		case <-c.qc.Context().Done():
			c.mu.Lock()
			idle := !c.sending
			c.sendGone = idle
			c.mu.Unlock()
			if idle {
				return
			}
			<-c.sendWake
		}
		runtime.Gosched()
		for {
			c.mu.Lock()
			q := c.sendQ
			c.sendQ, c.sendNext = c.sendNext[:0], nil
			if len(q) == 0 {
				c.sending = false
				c.sendNext = q
				c.mu.Unlock()
				break
			}
			c.mu.Unlock()
			for i, st := range q {
				st.res.sendEnd()
				q[i] = nil
			}
			c.mu.Lock()
			c.sendNext = q[:0]
			c.mu.Unlock()
		}
	}
}

// close closes the connection with code, once.
func (c *conn) close(code errCode) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.mu.Unlock()
	c.qc.CloseWithError(quic.ApplicationErrorCode(code), "")
}

// glitch counts a glitch of weight w (MaxGlitches); past the budget the
// connection closes.
func (c *conn) glitch(w int) {
	c.s.glitches.Add(1)
	c.mu.Lock()
	c.glitches += w
	over := c.glitches > MaxGlitches && !c.closed
	c.mu.Unlock()
	if over {
		c.s.glitchCloses.Add(1)
		c.s.logger().LogAttrs(context.Background(), slog.LevelDebug, "HTTP/3 connection past its glitch budget",
			slog.String("remote_addr", c.remote))
		c.close(errExcessiveLoad)
	}
}

// done ends a stream's run: its handler returned.
func (c *conn) done(st *stream, served bool) {
	c.mu.Lock()
	c.active--
	if served && c.glitches > 0 {
		c.glitches--
	}
	if !c.closed {
		c.free = append(c.free, st)
	}
	last := c.goneAway && c.active == 0 && !c.closed
	c.mu.Unlock()
	if last {
		c.linger()
	}
}

// linger closes a connection that has answered its last request after the
// final GOAWAY, once the client had time to receive the responses' ends:
// closing at once would drop what quic-go has not yet sent or seen
// acknowledged. A client that saw GOAWAY closes the connection itself when
// its requests are done (RFC 9114 section 5.2), which ends it sooner.
func (c *conn) linger() {
	d := min(max(8*c.qc.ConnectionStats().SmoothedRTT, 250*time.Millisecond), 2*time.Second)
	time.AfterFunc(d, func() { c.close(errNoError) })
}

// drain begins the connection's shutdown: a GOAWAY that refuses nothing
// yet (the largest stream ID), then, once the client has had time to see
// it, the final GOAWAY with the next stream ID, after which the
// connection closes when its last request is done (linger). Requests the client
// sent before it saw the first are thus served, as HTTP/2's drain does
// with its PING.
func (c *conn) drain() {
	c.mu.Lock()
	if c.draining || c.closed || c.ctrl == nil {
		c.mu.Unlock()
		return
	}
	c.draining = true
	c.writeGoAwayLocked(quicvarint.Max &^ 3)
	c.mu.Unlock()
	grace := min(max(4*c.qc.ConnectionStats().SmoothedRTT, 20*time.Millisecond), time.Second)
	time.AfterFunc(grace, func() {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return
		}
		c.goneAway = true
		c.goAwayID = c.nextID
		c.writeGoAwayLocked(uint64(c.goAwayID))
		last := c.active == 0
		c.mu.Unlock()
		if last {
			c.linger()
		}
	})
}

func (c *conn) writeGoAwayLocked(id uint64) {
	p := quicvarint.Append(nil, id)
	b := appendFrameHeader(nil, frameGoAway, uint64(len(p)))
	c.ctrl.Write(append(b, p...))
}

// acceptUni reads the client's unidirectional streams.
func (c *conn) acceptUni() {
	for {
		str, err := c.qc.AcceptUniStream(context.Background())
		if err != nil {
			return
		}
		go c.readUni(str)
	}
}

// readUni reads one unidirectional stream by its type: the control
// stream's frames, the QPACK streams (discarded: with no dynamic table
// they carry nothing queue needs), and stops any other.
func (c *conn) readUni(str *quic.ReceiveStream) {
	in := reader{src: str, buf: make([]byte, 512)}
	t, err := in.varint()
	if err != nil {
		return
	}
	switch t {
	case streamControl:
		c.mu.Lock()
		dup := c.peerCtrl
		c.peerCtrl = true
		c.mu.Unlock()
		if dup {
			c.close(errStreamCreation)
			return
		}
		c.readControl(&in)
	case streamEncoder, streamDecoder:
		// Without a dynamic table the client's encoder may only set its
		// capacity to 0, and its decoder has nothing to acknowledge; the
		// bytes are bounded by the stream's flow control.
		for !in.eof {
			in.r = in.w
			if err := in.fill(); err != nil {
				return
			}
		}
	case streamPush:
		c.close(errStreamCreation) // clients do not push
	default:
		str.CancelRead(quic.StreamErrorCode(errStreamCreation))
	}
}

// readControl reads the client's control stream: SETTINGS first, then
// frames queue takes note of or skips. Its end ends the connection.
func (c *conn) readControl(in *reader) {
	first := true
	for {
		t, l, err := in.header()
		if err == nil && l > MaxControlFrame {
			err = errTooLarge
		}
		if err == nil {
			err = in.skip(l)
		}
		switch {
		case errors.Is(err, errTooLarge):
			c.close(errExcessiveLoad)
			return
		case errors.Is(err, io.EOF), err != nil && !c.isClosed():
			c.close(errClosedCriticalStream)
			return
		case err != nil:
			return
		}
		if first {
			if t != frameSettings {
				c.close(errMissingSettings)
				return
			}
			first = false
			continue
		}
		switch {
		case t == frameSettings, t == frameData, t == frameHeaders, t == framePushPromise, reservedH2(t):
			c.close(errFrameUnexpected)
			return
		}
		// GOAWAY from a client (it will open no more pushes), MAX_PUSH_ID,
		// CANCEL_PUSH (queue never pushes) and unknown types: nothing to do.
	}
}

func (c *conn) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}
