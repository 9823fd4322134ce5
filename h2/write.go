package h2

import (
	"runtime"
	"sync/atomic"
	"time"

	"github.com/queue-dev/queue/internal/hpackw"
	"github.com/queue-dev/queue/internal/netio"
	"golang.org/x/net/http2"
)

// writer queues the connection's frames and writes them. Every frame is
// appended to q under the connection's mutex; whoever wants the queue
// written becomes the writer unless another goroutine is one already, and
// writes until the queue is empty. Frames that handlers append while a
// write is in progress go out together in the next one, so that a
// connection under load writes many streams' responses in one system call.
type writer struct {
	c          *conn
	fr         *http2.Framer    // writes into q
	vw         *netio.VecWriter // plain TCP: raw writes (internal/netio); nil under TLS
	q, spare   []byte
	writing    bool
	closeAfter bool         // close the connection once the queue is written
	lingering  bool         // with closeAfter: shut the writing side only, the read loop lingers (conn.goAway)
	ackQueued  bool         // a PING or SETTINGS acknowledgement waits in q (conn.ackLocked)
	wdl        int64        // when the writer last pushed the write deadline, Unix nanoseconds; the writer's own
	cutAt      atomic.Int64 // the deadline cut set, Unix nanoseconds, or 0: the writer pushes it no more
	hbuf       []byte
	err        error
}

func (w *writer) init(c *conn) {
	w.c = c
	w.fr = http2.NewFramer(queueWriter{w}, nil)
}

// queueWriter appends the Framer's frames to the queue.
type queueWriter struct{ w *writer }

func (q queueWriter) Write(p []byte) (int, error) {
	q.w.q = append(q.w.q, p...)
	return len(p), nil
}

// checkQueued closes a connection whose client lets acknowledgements pile
// up (MaxQueued).
func (w *writer) checkQueued() error {
	if len(w.q) > MaxQueued {
		return http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)
	}
	return nil
}

func (w *writer) rst(id uint32, code http2.ErrCode) {
	w.fr.WriteRSTStream(id, code)
}

// headersLocked queues a header block, in CONTINUATION frames past the
// client's frame size.
func (w *writer) headersLocked(id uint32, block []byte, end bool) {
	max := w.c.maxFrame
	if len(block) <= max {
		// One frame, framed here: the Framer would copy the block twice.
		flags := byte(http2.FlagHeadersEndHeaders)
		if end {
			flags |= byte(http2.FlagHeadersEndStream)
		}
		w.q = hpackw.AppendFrameHeader(w.q, len(block), byte(http2.FrameHeaders), flags, id)
		w.q = append(w.q, block...)
		return
	}
	first := block
	if len(first) > max {
		first = first[:max]
	}
	w.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndStream: end, EndHeaders: len(first) == len(block)})
	for rest := block[len(first):]; len(rest) > 0; {
		n := min(len(rest), max)
		w.fr.WriteContinuation(id, n == len(rest), rest[:n])
		rest = rest[n:]
	}
}

// dataLocked queues one DATA frame.
func (w *writer) dataLocked(id uint32, p []byte, end bool) {
	n := len(p)
	var flags byte
	if end {
		flags = byte(http2.FlagDataEndStream)
	}
	w.q = hpackw.AppendFrameHeader(w.q, n, byte(http2.FrameData), flags, id)
	w.q = append(w.q, p...)
}

// cut bounds the writes from now on by at, a write in progress included,
// from any goroutine: the writer no longer pushes the deadline. Whichever
// order cut and a writer's push run in, at is the deadline left (the push
// reads cutAt after its own SetWriteDeadline, cut stores it before its).
func (w *writer) cut(at time.Time) {
	w.cutAt.Store(at.UnixNano())
	w.c.nc.SetWriteDeadline(at)
}

// wantsWriter reports whether there is something to write (or a close
// to make) and no goroutine is at it.
func (w *writer) wantsWriter() bool { return !w.writing && (len(w.q) > 0 || w.closeAfter) }

// kickLocked writes the queue unless a writer is at it: from a goroutine
// that must not wait on the client (the read loop, a timer), the write is
// left to a new goroutine.
func (w *writer) kickLocked() {
	if !w.wantsWriter() {
		return
	}
	w.writing = true
	go func() {
		w.c.mu.Lock()
		w.loopLocked()
		w.c.mu.Unlock()
	}()
}

// flushLocked writes the queue unless a writer is at it. yield lets the
// goroutines that are ready to run append their frames first, so that
// they go out in the same write.
func (c *conn) flushLocked(yield bool) {
	w := &c.w
	if !w.wantsWriter() {
		return
	}
	w.writing = true
	if yield {
		c.mu.Unlock()
		runtime.Gosched()
		c.mu.Lock()
	}
	w.loopLocked()
}

// loopLocked is the writer: it writes the queue until it is empty, with
// the mutex released during each write.
func (w *writer) loopLocked() {
	c := w.c
	for len(w.q) > 0 && w.err == nil {
		b := w.q
		w.q = w.spare[:0]
		w.ackQueued = false
		c.mu.Unlock()
		now := time.Now().UnixNano()
		if now-w.wdl > int64(time.Second) && w.cutAt.Load() == 0 {
			c.nc.SetWriteDeadline(time.Unix(0, now).Add(WriteTimeout))
			w.wdl = now
			if at := w.cutAt.Load(); at != 0 {
				c.nc.SetWriteDeadline(time.Unix(0, at)) // cut came meanwhile: its deadline stands
			}
		}
		var err error
		if w.vw != nil {
			_, err = w.vw.Write(b)
		} else {
			_, err = c.nc.Write(b)
		}
		c.mu.Lock()
		if cap(b) <= 4*queueHigh {
			w.spare = b[:0]
		} else {
			w.spare = nil // a burst of control frames: let it go
		}
		if err != nil {
			w.err = err
			w.q = w.q[:0]
		}
		c.space.Broadcast()
	}
	w.writing = false
	if w.err != nil || w.closeAfter {
		c.endLocked(errClosed)
		if w.lingering && w.err == nil {
			c.rd.closeWrite(c.nc)
		} else {
			c.rd.shutdown(c.nc) // the GOAWAY did not go out: nothing to linger for
		}
	}
}
