package h1

import (
	"fmt"
	"io"
	"net/http"
	"net/textproto"
)

// body reads a request body from its connection: Content-Length bytes, or
// a chunked body with its trailers (RFC 9112 sections 6 and 7). It is
// reused for every request of its connection. Reads go through the
// connection's buffer, but a large read with the buffer empty goes
// straight into the caller's slice.
type body struct {
	c       *conn
	framing Framing
	left    int64 // Length: bytes left; Chunked: bytes left in this chunk
	state   chunkState
	done    bool  // read to its end with valid framing
	err     error // sticky
	expect  bool  // a 100 Continue is owed before the first read
	trailer http.Header
	tbytes  int // trailer bytes so far
}

type chunkState uint8

const (
	chunkSize    chunkState = iota // next: a chunk-size line
	chunkData                      // in a chunk's data
	chunkCRLF                      // next: the CRLF after a chunk's data
	chunkTrailer                   // in the trailer section
)

func (b *body) reset(h *Head) {
	b.framing, b.left, b.state, b.err, b.tbytes = h.Framing, h.ContentLength, chunkSize, nil, 0
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
	b.c.watch.Store(true)
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

// readChunked reads data of a chunked body, parsing chunk heads and the
// trailer section as it meets them.
func (b *body) readChunked(p []byte) (int, error) {
	for {
		switch b.state {
		case chunkData:
			n, err := b.readData(p)
			if b.left == 0 {
				b.state = chunkCRLF
			}
			if n > 0 || err != nil {
				return n, err
			}
		case chunkSize:
			line, err := b.line()
			if err != nil {
				return 0, err
			}
			size, ok := parseChunkSize(line)
			if !ok {
				return 0, fmt.Errorf("%w: chunk size", errChunk)
			}
			if size == 0 {
				b.state = chunkTrailer
				continue
			}
			b.left, b.state = size, chunkData
		case chunkCRLF:
			line, err := b.line()
			if err != nil {
				return 0, err
			}
			if len(line) != 0 {
				return 0, fmt.Errorf("%w: data longer than its chunk size", errChunk)
			}
			b.state = chunkSize
		case chunkTrailer:
			line, err := b.line()
			if err != nil {
				return 0, err
			}
			if len(line) == 0 {
				b.finish()
				return 0, io.EOF
			}
			if err := b.addTrailer(line); err != nil {
				return 0, err
			}
		}
	}
}

// line returns the next line of the chunked framing without its CRLF. It
// is valid until the next read. A bare LF or a line longer than the buffer
// is an error.
func (b *body) line() ([]byte, error) {
	c := b.c
	for {
		if c.rbuf != nil {
			buf := (*c.rbuf)[c.r:c.w]
			if i := indexByte(buf, '\n'); i >= 0 {
				if i == 0 || buf[i-1] != '\r' {
					return nil, fmt.Errorf("%w: bare LF", errChunk)
				}
				c.r += i + 1
				return buf[:i-1], nil
			}
			if c.r == 0 && c.w == len(*c.rbuf) {
				return nil, fmt.Errorf("%w: line too long", errChunk)
			}
		}
		if err := c.fill(); err != nil {
			return nil, unexpected(err)
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
		if !isTchar(ch) {
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

// parseChunkSize parses a chunk-size line (RFC 9112 section 7.1):
// 1*HEXDIG, then optional extensions, which are ignored but must hold no
// control characters. More than 15 hex digits overflow: refused.
func parseChunkSize(line []byte) (int64, bool) {
	i := 0
	var n int64
	for ; i < len(line); i++ {
		c := line[i]
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			goto ext
		}
		if i == 15 {
			return 0, false
		}
		n = n<<4 | int64(c)
	}
ext:
	if i == 0 {
		return 0, false
	}
	rest := line[i:]
	for len(rest) > 0 && (rest[0] == ' ' || rest[0] == '\t') {
		rest = rest[1:] // BWS
	}
	if len(rest) > 0 && rest[0] != ';' {
		return 0, false
	}
	if !validValue(rest) {
		return 0, false
	}
	return n, true
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
