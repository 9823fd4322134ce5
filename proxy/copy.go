package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"time"

	"github.com/queue-dev/queue/h1"
	"github.com/queue-dev/queue/internal/pool"
	"golang.org/x/net/http/httpguts"
)

// copyResponse writes the status and streams the body to w. Errors wrap
// errClientGone when the client could not be written.
func (c *h1Conn) copyResponse(w http.ResponseWriter, rh *respHead, deadline time.Time, idle time.Duration) error {
	w.WriteHeader(rh.Status)
	f, _ := w.(http.Flusher)
	// The copier lives in the connection: Read calls it back through
	// flushFirst (Flush), and a copier of the stack's would escape there,
	// an allocation a response.
	// It is zero here (release zeroes it): setting the fields one by one
	// spares writing the whole struct twice a response.
	cp := &c.cp
	cp.c, cp.w, cp.rw, cp.f, cp.dirty, cp.deadline, cp.idle = c, w, w, f, true, deadline, idle
	defer cp.release()
	return cp.body(w, rh)
}

// body copies the response body as its framing says.
func (cp *copier) body(w http.ResponseWriter, rh *respHead) error {
	switch {
	case rh.Chunked:
		return cp.chunked(w.Header())
	case rh.ContentLength > 0:
		return cp.n(rh.ContentLength)
	case rh.ContentLength < 0 && rh.Close:
		return cp.untilEOF()
	}
	return nil
}

// copier moves a response body from the upstream's read buffer to the
// client. It flushes the client's response only when the next read would
// wait on the upstream, so a 1 KiB response goes out in the one write that
// net/http makes when the handler returns, and a stream (server-sent events,
// a long poll) goes out as the upstream writes it. One lives in each
// h1Conn, for the exchange it carries.
type copier struct {
	c     *h1Conn
	w     io.Writer
	f     http.Flusher
	dirty bool // written to w since the last flush

	// A chunked body is decoded into the copy buffer: out is what it
	// holds for the client, written when it is full or when a read is
	// about to wait for the upstream (Flush); werr is that write's error.
	// While waiting is set, that read fills the read buffer, not the copy
	// buffer, and Flush gives the copy buffer back: a stream that idles
	// between events holds none.
	dec     h1.ChunkDecoder
	out     []byte
	werr    error
	waiting bool

	deadline time.Time     // the whole request's, or zero
	idle     time.Duration // the most between two reads, or 0

	rw      http.ResponseWriter
	written int64   // body bytes written to the client
	armed   bool    // the client's write deadline is set
	buf     *[]byte // the copy buffer for large bodies, while held
}

// release gives back the copy buffer, clears the client's write deadline
// if it was armed, and lets go of the client's writer: the connection
// outlives the exchange.
func (cp *copier) release() {
	cp.c.flushFirst, cp.c.flushed = nil, false
	if cp.buf != nil {
		pool.Put(cp.buf)
	}
	if cp.armed {
		http.NewResponseController(cp.rw).SetWriteDeadline(time.Time{})
	}
	*cp = copier{}
}

// wrote counts body bytes and arms the client's write deadline once the
// response is large enough to block on a slow reader (lazyWriteDeadline):
// --timeout then cuts a client that reads slowly.
func (cp *copier) wrote(m int) {
	cp.written += int64(m)
	cp.dirty = true
	if !cp.armed && cp.written > lazyWriteDeadline && !cp.deadline.IsZero() {
		http.NewResponseController(cp.rw).SetWriteDeadline(cp.deadline)
		cp.armed = true
	}
}

// direct copies up to n bytes read straight from the connection into the
// copy buffer; the read buffer is empty. It flushes if the read waits, as
// fill does.
func (cp *copier) direct(n int64) (int, error) {
	if cp.idle > 0 {
		cp.c.setReadDeadline(earliest(cp.deadline, cp.idle))
	}
	if cp.buf == nil {
		cp.buf = pool.Get(copyBufSize)
	}
	b := *cp.buf
	if int64(len(b)) > n {
		b = b[:n]
	}
	cp.flushIfWaiting()
	m, rerr := cp.c.Read(b)
	cp.flushDone()
	if m > 0 {
		w, err := cp.w.Write(b[:m])
		cp.wrote(w)
		if err != nil {
			return w, fmt.Errorf("%w: %w", errClientGone, err)
		}
	}
	return m, rerr
}

func (cp *copier) fill() error {
	if cp.c.br.Buffered() > 0 {
		return nil
	}
	if cp.idle > 0 {
		cp.c.setReadDeadline(earliest(cp.deadline, cp.idle))
	}
	cp.flushIfWaiting()
	_, err := cp.c.br.Peek(1)
	cp.flushDone()
	return err
}

// flushIfWaiting has the next read write out what the copy buffer holds
// and flush what was written to the client, if that read has to wait for
// the upstream (h1Conn.Read calls Flush).
func (cp *copier) flushIfWaiting() {
	if cp.dirty && cp.f != nil || len(cp.out) > 0 {
		cp.c.flushFirst = cp
	}
}

// Flush writes what the copy buffer holds for the client and flushes the
// client's response, for a read that is about to wait for the upstream.
// A failed write is kept in werr for the copy to return.
func (cp *copier) Flush() {
	if err := cp.writeOut(); err != nil {
		cp.werr = err
		return
	}
	if cp.waiting && cp.buf != nil {
		pool.Put(cp.buf)
		cp.buf, cp.out = nil, nil
	}
	if cp.f != nil {
		cp.f.Flush()
	}
}

// writeOut writes what the copy buffer holds for the client.
func (cp *copier) writeOut() error {
	if len(cp.out) == 0 {
		return nil
	}
	m, err := cp.w.Write(cp.out)
	cp.out = cp.out[:0]
	cp.wrote(m)
	if err != nil {
		return fmt.Errorf("%w: %w", errClientGone, err)
	}
	return nil
}

// flushDone notes whether the read flushed.
func (cp *copier) flushDone() {
	if cp.c.flushed {
		cp.dirty = false
	}
	cp.c.flushFirst, cp.c.flushed = nil, false
}

// buffered writes up to n bytes that are already buffered.
func (cp *copier) buffered(n int64) (int, error) {
	br := cp.c.br
	if m := br.Buffered(); int64(m) < n {
		n = int64(m)
	}
	b, _ := br.Peek(int(n))
	m, err := cp.w.Write(b)
	br.Discard(m)
	cp.wrote(m)
	if err != nil {
		return m, fmt.Errorf("%w: %w", errClientGone, err)
	}
	return m, nil
}

func (cp *copier) n(n int64) error {
	for n > 0 {
		if n >= directRead && cp.c.br.Buffered() == 0 {
			m, err := cp.direct(n)
			n -= int64(m)
			if err != nil && (n > 0 || errors.Is(err, errClientGone)) {
				if errors.Is(err, errClientGone) {
					return err
				}
				return fmt.Errorf("read response body: %w", noEOF(err))
			}
			continue
		}
		if err := cp.fill(); err != nil {
			return fmt.Errorf("read response body: %w", noEOF(err))
		}
		m, err := cp.buffered(n)
		if err != nil {
			return err
		}
		n -= int64(m)
	}
	return nil
}

func (cp *copier) untilEOF() error {
	for {
		if cp.c.br.Buffered() == 0 {
			_, err := cp.direct(1 << 62)
			switch {
			case err == io.EOF:
				return nil
			case errors.Is(err, errClientGone):
				return err
			case err != nil:
				return fmt.Errorf("read response body: %w", err)
			}
			continue
		}
		if _, err := cp.buffered(int64(cp.c.br.Buffered())); err != nil {
			return err
		}
	}
}

// chunked decodes a chunked body (RFC 9112 section 7.1) and passes its
// trailers on through h with http.TrailerPrefix. The framing is decoded
// in one loop over all that the read buffer holds (h1.ChunkDecoder), the
// data into the copy buffer, which goes to the client when it is full or
// when the next read would wait for the upstream (Flush): a body of many
// small chunks goes out in writes of up to the copy buffer (one chunk
// each to an HTTP/1.1 client, DATA frames to an HTTP/2 one), and a stream
// of events still goes out event by event, as the upstream pauses between
// them. The upstream's framing is read laxly (h1.ChunkDecoder.Lax).
func (cp *copier) chunked(h http.Header) error {
	br := cp.c.br
	cp.dec = h1.ChunkDecoder{Lax: true}
	for {
		if br.Buffered() > 0 {
			if cp.buf == nil {
				cp.buf = pool.Get(copyBufSize)
				cp.out = (*cp.buf)[:0]
			}
			src, _ := br.Peek(br.Buffered())
			out := cp.out
			n, used, err := cp.dec.Decode(out[len(out):cap(out)], src)
			br.Discard(used)
			cp.out = out[:len(out)+n]
			if err != nil {
				return fmt.Errorf("%w: %w", errBadResponse, err)
			}
			if cp.dec.Trailers() {
				if err := cp.writeOut(); err != nil {
					return err
				}
				cp.flushIfWaiting()
				err := cp.trailers(h)
				cp.flushDone()
				return err
			}
			if len(cp.out) == cap(cp.out) {
				if err := cp.writeOut(); err != nil {
					return err
				}
				continue
			}
			if br.Buffered() == br.Size() {
				return fmt.Errorf("%w: chunk line too long", errBadResponse)
			}
		}
		// All that was read is decoded, but for the start of a line.
		if left := cp.dec.Left(); left >= directRead && br.Buffered() == 0 {
			// A large chunk: its data is read straight into the copy
			// buffer, once that is written out.
			if err := cp.writeOut(); err != nil {
				return err
			}
			m, err := cp.direct(left)
			cp.out = (*cp.buf)[:0]
			cp.dec.Skip(m)
			if err != nil {
				if errors.Is(err, errClientGone) {
					return err
				}
				return fmt.Errorf("read response body: %w", noEOF(err))
			}
			continue
		}
		if cp.idle > 0 {
			cp.c.setReadDeadline(earliest(cp.deadline, cp.idle))
		}
		cp.flushIfWaiting()
		cp.waiting = true
		_, err := br.Peek(br.Buffered() + 1)
		cp.waiting = false
		cp.flushDone()
		if cp.werr != nil {
			return cp.werr
		}
		if err != nil {
			return fmt.Errorf("read chunk: %w", noEOF(err))
		}
	}
}

// readLine reads one line without its CRLF (or LF). Lines longer than the
// read buffer are refused.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		return nil, fmt.Errorf("%w: line too long", errBadResponse)
	}
	if err != nil {
		return nil, fmt.Errorf("read response body: %w", noEOF(err))
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

func (cp *copier) trailers(h http.Header) error {
	total := 0
	for {
		line, err := readLine(cp.c.br)
		if err != nil {
			return err
		}
		if len(line) == 0 {
			return nil
		}
		if total += len(line); total > maxHeaderBytes {
			return fmt.Errorf("%w: trailers too large", errBadResponse)
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			return fmt.Errorf("%w: trailer line", errBadResponse)
		}
		name, value := string(line[:colon]), trimOWS(string(line[colon+1:]))
		if !httpguts.ValidHeaderFieldName(name) || !httpguts.ValidHeaderFieldValue(value) {
			return fmt.Errorf("%w: trailer line", errBadResponse)
		}
		key := textproto.CanonicalMIMEHeaderKey(name)
		if forbiddenTrailer(key) {
			continue
		}
		h.Add(http.TrailerPrefix+key, value)
	}
}
