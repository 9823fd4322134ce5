package h1

import (
	"fmt"
	"io"
	"net/http"
	"net/textproto"

	"github.com/queue-dev/queue/internal/httpsem"
)

// body reads a request body from its connection: Content-Length bytes, or
// a chunked body with its trailers (RFC 9112 sections 6 and 7). It is
// reused for every request of its connection. Reads go through the
// connection's buffer, but a large read with the buffer empty goes
// straight into the caller's slice.
type body struct {
	c       *conn
	framing Framing
	left    int64        // Length: bytes left
	dec     ChunkDecoder // Chunked: the framing read so far
	done    bool         // read to its end with valid framing
	err     error        // sticky
	expect  bool         // a 100 Continue is owed before the first read
	trailer http.Header
	tbytes  int // trailer bytes so far
}

func (b *body) reset(h *Head) {
	b.framing, b.left, b.dec, b.err, b.tbytes = h.Framing, h.ContentLength, ChunkDecoder{}, nil, 0
	b.done = h.Framing == NoBody
	b.expect = h.Expect100 && !b.done
	if b.trailer != nil {
		clear(b.trailer)
	}
}

// trailerMap returns the map that receives a chunked body's trailers,
// made once per connection.
func (b *body) trailerMap() http.Header {
	if b.trailer == nil {
		b.trailer = http.Header{}
	}
	return b.trailer
}

// Close does nothing: what is left of the body is dealt with once the
// handler has returned (consume).
func (b *body) Close() error { return nil }

// Read implements io.Reader.
func (b *body) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	if b.err != nil {
		return 0, b.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	if b.expect {
		b.expect = false
		b.c.res.writeContinue()
	}
	var n int
	var err error
	if b.framing == Length {
		n, err = b.readData(p)
		if err == nil && b.left == 0 {
			b.finish()
			err = io.EOF
		}
	} else {
		n, err = b.readChunked(p)
	}
	if err != nil && err != io.EOF {
		b.err = err
	}
	return n, err
}

// Held returns the rest of a Content-Length body when the read buffer
// holds all of it, and marks it read; otherwise, or when a 100 Continue is
// still owed, nil. The bytes are the read buffer's own, valid until the
// handler returns: a handler that needs the whole body in hand (the
// proxy, which may send it twice) takes it without a copy.
func (b *body) Held() []byte {
	c := b.c
	if !b.whole() {
		return nil
	}
	p := (*c.rbuf)[c.r : c.r+int(b.left)]
	c.r += int(b.left)
	b.left = 0
	b.finish()
	return p
}

// whole reports whether the read buffer holds all that is left of a
// Content-Length body, with no 100 Continue owed: the rest is read without
// touching the socket (Held, and the read session: session.go).
func (b *body) whole() bool {
	return !b.done && b.err == nil && !b.expect && b.framing == Length && int64(b.c.w-b.c.r) >= b.left
}

func (b *body) finish() {
	b.done = true
	if !b.c.unwatched {
		b.c.watch.Store(true)
	}
}

// readData reads at most b.left bytes of data.
func (b *body) readData(p []byte) (int, error) {
	c := b.c
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	if c.r == c.w {
		if len(p) >= bufSize {
			n, err := c.readDirect(p)
			b.left -= int64(n)
			if err != nil {
				return n, unexpected(err)
			}
			return n, nil
		}
		if err := c.fill(); err != nil {
			return 0, unexpected(err)
		}
	}
	n := copy(p, (*c.rbuf)[c.r:c.w])
	c.r += n
	b.left -= int64(n)
	if c.r == c.w && c.tcp != nil && b.left > 0 {
		c.releaseRead()
	}
	return n, nil
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// readChunked reads data of a chunked body. One call decodes every chunk
// the read buffer holds (ChunkDecoder), as much as p takes, and returns
// what it has as soon as the buffer is used up: it waits for the socket
// only when it has nothing to return yet. A body of small chunks thus
// costs a read and a Read per buffer of framing, not per chunk
// (BenchmarkChunkedBody). A chunk's data that is not buffered and fills p
// is read straight into p, as readData does.
//
// A framing error fails the Read with nothing returned, even if chunks
// before it were decoded in the same call: a body found malformed is not
// to be passed on further.
func (b *body) readChunked(p []byte) (int, error) {
	c := b.c
	n := 0
	for {
		if c.r < c.w {
			if !b.dec.Trailers() {
				m, used, err := b.dec.Decode(p[n:], (*c.rbuf)[c.r:c.w])
				c.r += used
				n += m
				if err != nil {
					return 0, err
				}
			}
			if b.dec.Trailers() {
				end, err := b.trailers()
				if err != nil {
					return 0, err
				}
				if end {
					b.finish()
					return n, io.EOF
				}
			}
			if n == len(p) {
				return n, nil
			}
		}
		// What the buffer holds is used, but for the start of a line.
		if n > 0 {
			if c.r == c.w && c.tcp != nil {
				c.releaseRead() // hold no buffer while the caller sends on what it got
			}
			return n, nil
		}
		if left := b.dec.Left(); c.r == c.w && left >= bufSize && len(p) >= bufSize {
			q := p[:min(int64(len(p)), left)]
			m, err := c.readDirect(q)
			b.dec.Skip(m)
			if err != nil {
				return m, unexpected(err)
			}
			return m, nil
		}
		if c.rbuf != nil && c.r == 0 && c.w == len(*c.rbuf) {
			return 0, fmt.Errorf("%w: line too long", errChunk)
		}
		if err := c.fill(); err != nil {
			return 0, unexpected(err)
		}
	}
}

// trailers reads the trailer section's lines that the buffer holds whole,
// and reports whether it read the empty line that ends the section.
func (b *body) trailers() (end bool, err error) {
	c := b.c
	for {
		buf := (*c.rbuf)[c.r:c.w]
		i := indexByte(buf, '\n')
		if i < 0 {
			return false, nil
		}
		if i == 0 || buf[i-1] != '\r' {
			return false, fmt.Errorf("%w: bare LF", errChunk)
		}
		c.r += i + 1
		if i == 1 {
			return true, nil
		}
		if err := b.addTrailer(buf[:i-1]); err != nil {
			return false, err
		}
	}
}

// addTrailer adds one trailer field, validated as a header field is, to
// the request's Trailer map. Trailers are bounded with the head's limit.
func (b *body) addTrailer(line []byte) error {
	if b.tbytes += len(line); b.tbytes > b.c.s.Limits.head() {
		return fmt.Errorf("%w: trailers too large", errChunk)
	}
	colon := indexByte(line, ':')
	if colon <= 0 {
		return fmt.Errorf("%w: trailer line", errChunk)
	}
	for _, ch := range line[:colon] {
		if !httpsem.IsTchar(ch) {
			return fmt.Errorf("%w: trailer name", errChunk)
		}
	}
	value := trimOWS(line[colon+1:])
	for _, ch := range value {
		if ch < ' ' && ch != '\t' || ch == 0x7f {
			return fmt.Errorf("%w: trailer value", errChunk)
		}
	}
	// Trailers are rare: they are copied, as the buffer they sit in is
	// reused by the next read.
	key := textproto.CanonicalMIMEHeaderKey(string(line[:colon]))
	b.trailer[key] = append(b.trailer[key], string(value))
	return nil
}

// consume deals with what the handler left of the body, once it has
// returned, and reports whether the connection can read its next request:
// yes when the body was read to its end, or the rest of it is already
// buffered (it is skipped); no otherwise, since reading on could take as
// long as the client likes.
func (b *body) consume() bool {
	if b.done {
		return true
	}
	if b.err != nil || b.framing != Length {
		return false
	}
	c := b.c
	if buffered := int64(c.w - c.r); buffered >= b.left {
		c.r += int(b.left)
		b.left = 0
		b.done = true
		return true
	}
	return false
}
