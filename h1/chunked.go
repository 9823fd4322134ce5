package h1

import (
	"encoding/binary"
	"fmt"

	"github.com/queue-dev/queue/internal/httpsem"
)

// ChunkDecoder decodes the chunked transfer coding (RFC 9112 section 7.1)
// out of a buffer that its caller fills: the request body's reader does
// (body), and the proxy's copy of a chunked response. It is the one place
// where chunk framing is judged, for requests and responses alike.
//
// Decode runs over every chunk the buffer holds in one loop, so that a
// body of many small chunks costs a few nanoseconds a chunk, not a read
// and a write each: a body of 8 M one-byte chunks, 46 MiB of framing, is a
// hostile client's cheapest way to make a proxy work
// (BenchmarkChunkDecode). The zero value is ready for a body's first chunk,
// read strictly. A ChunkDecoder is not safe for concurrent use.
type ChunkDecoder struct {
	// Lax accepts what the strict reading refuses but a sender may still
	// mean well by: a bare LF for a CRLF, whitespace at the end of a
	// chunk-size line, and extensions checked for control characters
	// only. The proxy reads its upstream's responses so, as net/http's
	// client does: the body is framed anew for the client, so no parser
	// after queue can read it otherwise, and an upstream that has always
	// worked keeps working. Requests are read strictly.
	Lax bool

	left  int64 // bytes of data left in the current chunk
	extra int64 // extension bytes beyond their allowance so far (maxChunkExtra)
	state chunkState
}

// maxChunkExtra bounds the chunk extensions of a body, which a reader
// reads for nothing: each size line may carry 16 bytes of them, and one
// more per data byte of its chunk; past that, a body may carry
// maxChunkExtra bytes in all. Without it a hostile sender could make
// queue read a line of extensions, nearly a buffer long, for every data
// byte (net/http bounds the same overhead since CVE-2023-39326). Only
// lines with extensions or whitespace are counted: they take the slow path.
const maxChunkExtra = 16 << 10

type chunkState uint8

const (
	chunkSize    chunkState = iota // next: a chunk-size line
	chunkData                      // in a chunk's data
	chunkCRLF                      // next: the CRLF after a chunk's data
	chunkTrailer                   // past the last chunk: the trailer section follows
)

// Decode decodes the framing at the start of src, copying the data of as
// many chunks as src holds into dst, and returns the data bytes written to
// dst and the bytes of src used. It stops when dst is full in a chunk's
// data, when src ends or holds only the start of a line (which it leaves
// unused: the caller reads more behind it, and refuses a line that fills
// its whole buffer), or after the last chunk's line: then Trailers
// reports true, and what follows in src is the trailer section, for the
// caller to read. A framing error is returned as soon as it is seen; the
// data already copied into dst is then not to be used.
func (d *ChunkDecoder) Decode(dst, src []byte) (n, used int, err error) {
	left, state := d.left, d.state
	for {
		switch state {
		case chunkData:
			k := min(len(dst)-n, len(src)-used)
			if int64(k) > left {
				k = int(left)
			}
			copy(dst[n:n+k], src[used:used+k])
			n, used, left = n+k, used+k, left-int64(k)
			if left > 0 {
				d.left, d.state = left, state
				return n, used, nil // dst is full, or src used up
			}
			state = chunkCRLF
		case chunkCRLF:
			if d.Lax && used < len(src) && src[used] == '\n' {
				used++
				state = chunkSize
				continue
			}
			if len(src)-used < 2 {
				d.left, d.state = left, state
				return n, used, nil
			}
			if src[used] != '\r' || src[used+1] != '\n' {
				d.left, d.state = left, state
				if src[used] == '\n' {
					return n, used, fmt.Errorf("%w: bare LF", errChunk)
				}
				return n, used, fmt.Errorf("%w: data longer than its chunk size", errChunk)
			}
			used += 2
			state = chunkSize
		case chunkSize:
			// Chunks of 1 to 15 bytes, whose size is one hex digit, are
			// the framing of a hostile body at its densest ("1\r\nX\r\n"
			// is six bytes for one): one 8-byte load checks the size line
			// of each, in a loop of their own, faster than the loop below
			// for them (BenchmarkChunkDecode compares).
			for len(src)-used >= 8 {
				w := binary.LittleEndian.Uint64(src[used:])
				if w&0xffff_00ff_ffff == 0x0a0d_000a_0d31 && n < len(dst) {
					// "1\r\nX\r\n" whole, checked by one comparison: no
					// chain of loads from one chunk to the next, which
					// halves the time a chunk takes.
					dst[n] = byte(w >> 24)
					n, used = n+1, used+6
					continue
				}
				size := int(unhex[byte(w)])
				if w>>8&0xffff != 0x0a0d || uint(size-1) > 14 {
					break // not one digit and CRLF, or the last chunk
				}
				start := used + 3
				end := start + size
				if end+2 > len(src) || size > len(dst)-n || src[end] != '\r' || src[end+1] != '\n' {
					break
				}
				if size <= 8 && len(dst)-n >= 8 && len(src)-start >= 8 {
					// One 8-byte load and store, not a call to memmove:
					// what lands past the data in dst is scratch.
					binary.LittleEndian.PutUint64(dst[n:], binary.LittleEndian.Uint64(src[start:]))
				} else {
					copy(dst[n:n+size], src[start:end])
				}
				n, used = n+size, end+2
			}
			// Else the common line is hex digits and CRLF, and the common
			// chunk is whole in src with room for it in dst: both are
			// taken here, a chunk a turn. Anything else (an extension,
			// whitespace, an error, a line not all in src) goes to
			// parseChunkSize once its LF has come, and a chunk not all in
			// hand to the states above.
			i := used
			var size int64
			for ; i < len(src); i++ {
				v := unhex[src[i]]
				if v > 15 {
					break
				}
				size = size<<4 | int64(v)
			}
			switch {
			case i-used > maxChunkDigits:
				d.left, d.state = left, state
				return n, used, fmt.Errorf("%w: chunk size over %d hex digits", errChunk, maxChunkDigits)
			case i > used && i+1 < len(src) && src[i] == '\r' && src[i+1] == '\n':
				used = i + 2
				if size > 0 && size <= int64(len(dst)-n) && size+2 <= int64(len(src)-used) {
					end := used + int(size)
					if src[end] == '\r' && src[end+1] == '\n' {
						copy(dst[n:], src[used:end])
						n, used = n+int(size), end+2
						continue
					}
				}
			default:
				j := indexByte(src[used:], '\n')
				if j < 0 {
					d.left, d.state = left, state
					return n, used, nil // the rest of the line is still to come
				}
				line := src[used : used+j]
				switch {
				case j > 0 && line[j-1] == '\r':
					line = line[:j-1]
				case !d.Lax:
					d.left, d.state = left, state
					return n, used, fmt.Errorf("%w: bare LF", errChunk)
				}
				var ok bool
				if size, ok = parseChunkSize(line, d.Lax); !ok {
					d.left, d.state = left, state
					return n, used, fmt.Errorf("%w: chunk size", errChunk)
				}
				if d.extra = max(0, d.extra+int64(len(line))-16-min(size, maxChunkExtra)); d.extra > maxChunkExtra {
					d.left, d.state = left, state
					return n, used, fmt.Errorf("%w: chunk extensions over %d bytes", errChunk, maxChunkExtra)
				}
				used += j + 1
			}
			if size == 0 {
				d.left, d.state = 0, chunkTrailer
				return n, used, nil
			}
			left, state = size, chunkData
		case chunkTrailer:
			d.left, d.state = left, state
			return n, used, nil
		}
	}
}

// Trailers reports whether the last chunk has been read: what follows is
// the trailer section, which Decode leaves to its caller.
func (d *ChunkDecoder) Trailers() bool { return d.state == chunkTrailer }

// Left returns the bytes of data left in the current chunk, which the
// caller may read straight into its own buffer (Skip), 0 between chunks.
func (d *ChunkDecoder) Left() int64 {
	if d.state != chunkData {
		return 0
	}
	return d.left
}

// Skip records n bytes of the current chunk's data (at most Left) that
// the caller read itself, past Decode.
func (d *ChunkDecoder) Skip(n int) {
	if d.left -= int64(n); d.left == 0 {
		d.state = chunkCRLF
	}
}

// maxChunkDigits bounds a chunk size: 15 hex digits are 2^60-1 bytes, and
// a 16th could overflow an int64. A longer size is refused whatever its
// value, leading zeros included, as HAProxy does.
const maxChunkDigits = 15

// unhex maps a hex digit to its value, any other byte to 0xff.
var unhex = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = byte(c - '0')
	}
	for c := 'a'; c <= 'f'; c++ {
		t[c], t[c-'a'+'A'] = byte(c-'a'+10), byte(c-'a'+10)
	}
	return t
}()

// parseChunkSize parses a chunk-size line without its CRLF (RFC 9112
// section 7.1): 1*HEXDIG, of at most maxChunkDigits, then the extensions
// (validChunkExt), which are checked and ignored. lax takes whitespace at
// the end of the line, and any extensions without control characters
// (ChunkDecoder.Lax).
func parseChunkSize(line []byte, lax bool) (int64, bool) {
	for lax && len(line) > 0 && (line[len(line)-1] == ' ' || line[len(line)-1] == '\t') {
		line = line[:len(line)-1]
	}
	i := 0
	var n int64
	for ; i < len(line); i++ {
		v := unhex[line[i]]
		if v > 15 {
			break
		}
		if i == maxChunkDigits {
			return 0, false
		}
		n = n<<4 | int64(v)
	}
	if i == 0 {
		return 0, false
	}
	if ext := line[i:]; lax {
		if ext = trimOWS(ext); len(ext) > 0 && (ext[0] != ';' || !validValue(ext)) {
			return 0, false
		}
	} else if !validChunkExt(ext) {
		return 0, false
	}
	return n, true
}

// validChunkExt reports whether b, what follows a chunk size on its line,
// is a list of chunk extensions (RFC 9112 section 7.1.1):
//
//	chunk-ext      = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] )
//	chunk-ext-name = token
//	chunk-ext-val  = token / quoted-string
//
// read exactly: whitespace (BWS) is allowed only before and after a ";"
// or an "=", so a size followed by whitespace alone ("5 "), or an
// extension followed by whitespace ("5;a=b "), is refused, as are an empty
// name ("5;", "5;=x"), a name that is not a token ("5;a b", `5;"x"`) and a
// value that is neither a token nor a quoted-string ("5;a=", "5;a=@").
// Extensions are then ignored, as section 7.1.1 has a recipient do with
// those it does not know: queue knows none.
func validChunkExt(b []byte) bool {
	i := 0
	for i < len(b) {
		if i = skipBWS(b, i); i == len(b) || b[i] != ';' {
			return false
		}
		i = skipBWS(b, i+1)
		j := i
		for i < len(b) && httpsem.IsTchar(b[i]) {
			i++
		}
		if i == j {
			return false // no name
		}
		if k := skipBWS(b, i); k < len(b) && b[k] == '=' {
			i = skipBWS(b, k+1)
			if i < len(b) && b[i] == '"' {
				if i = quotedStringEnd(b, i); i < 0 {
					return false
				}
				continue
			}
			j = i
			for i < len(b) && httpsem.IsTchar(b[i]) {
				i++
			}
			if i == j {
				return false // no value
			}
		}
	}
	return true
}

// skipBWS returns the index of the first byte at or after i in b that is
// not SP or HTAB.
func skipBWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t') {
		i++
	}
	return i
}

// quotedStringEnd returns the index just past the quoted-string that
// starts at b[i] (a DQUOTE), or -1 if there is none (RFC 9110 section
// 5.6.4): qdtext is HTAB, SP, visible ASCII but DQUOTE and backslash, and
// obs-text; a quoted-pair is a backslash and HTAB, SP, VCHAR or obs-text.
func quotedStringEnd(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c == '\\':
			if i++; i == len(b) || !qdChar(b[i]) && b[i] != '"' && b[i] != '\\' {
				return -1
			}
		case !qdChar(c):
			return -1
		}
	}
	return -1
}

// qdChar reports a byte that a quoted-string may hold as it is: HTAB, SP,
// visible ASCII but DQUOTE and backslash, and obs-text.
func qdChar(c byte) bool {
	return c == '\t' || c == ' ' || c >= 0x21 && c != '"' && c != '\\' && c != 0x7f
}
