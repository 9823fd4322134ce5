package h3

import (
	"errors"
	"io"

	"github.com/quic-go/quic-go/quicvarint"
)

// HTTP/3 frame types (RFC 9114 section 7.2).
const (
	frameData        = 0x00
	frameHeaders     = 0x01
	frameCancelPush  = 0x03
	frameSettings    = 0x04
	framePushPromise = 0x05
	frameGoAway      = 0x07
	frameMaxPushID   = 0x0d
)

// Unidirectional stream types (RFC 9114 section 6.2, RFC 9204 section 4.2).
const (
	streamControl = 0x00
	streamPush    = 0x01
	streamEncoder = 0x02
	streamDecoder = 0x03
)

// Settings (RFC 9114 section 7.2.4.1, RFC 9204 section 5).
const (
	settingTableCapacity  = 0x01
	settingMaxFieldSize   = 0x06
	settingBlockedStreams = 0x07
)

// Error codes (RFC 9114 section 8.1, RFC 9204 section 6).
type errCode uint64

const (
	errNoError              errCode = 0x100
	errGeneralProtocol      errCode = 0x101
	errInternal             errCode = 0x102
	errStreamCreation       errCode = 0x103
	errClosedCriticalStream errCode = 0x104
	errFrameUnexpected      errCode = 0x105
	errFrameError           errCode = 0x106
	errExcessiveLoad        errCode = 0x107
	errMissingSettings      errCode = 0x10a
	errRequestRejected      errCode = 0x10b
	errRequestCancelled     errCode = 0x10c
	errRequestIncomplete    errCode = 0x10d
	errMessage              errCode = 0x10e
	errDecompression        errCode = 0x200
)

// reservedH2 reports the HTTP/2 frame types HTTP/3 reserves: receiving one
// is a connection error (RFC 9114 section 7.2.8).
func reservedH2(t uint64) bool {
	return t == 0x02 || t == 0x06 || t == 0x08 || t == 0x09
}

// appendFrameHeader appends a frame's type and length.
func appendFrameHeader(b []byte, t, length uint64) []byte {
	return quicvarint.Append(quicvarint.Append(b, t), length)
}

// settingsFrame is the server's control stream's opening: its type, and
// SETTINGS without a QPACK dynamic table, with MaxHeaderListSize.
var settingsFrame = func() []byte {
	var p []byte
	p = quicvarint.Append(p, settingTableCapacity)
	p = quicvarint.Append(p, 0)
	p = quicvarint.Append(p, settingBlockedStreams)
	p = quicvarint.Append(p, 0)
	p = quicvarint.Append(p, settingMaxFieldSize)
	p = quicvarint.Append(p, MaxHeaderListSize)
	b := quicvarint.Append(nil, streamControl)
	b = appendFrameHeader(b, frameSettings, uint64(len(p)))
	return append(b, p...)
}()

var errFrame = errors.New("h3: malformed frame")

// parseFrameHeader parses a frame header at the start of b; n is 0 when b
// holds only part of it.
func parseFrameHeader(b []byte) (t, length uint64, n int) {
	t, k, err := quicvarint.Parse(b)
	if err != nil {
		return 0, 0, 0
	}
	length, m, err := quicvarint.Parse(b[k:])
	if err != nil {
		return 0, 0, 0
	}
	return t, length, k + m
}

// reader reads a stream through a buffer: the unread bytes are buf[r:w].
// A request stream reads its HEADERS frame, its body's frame headers and
// its trailers through one (stream.in), the client's unidirectional
// streams their type and their frames.
type reader struct {
	src  io.Reader
	buf  []byte
	r, w int
	read int64 // bytes read from src
	eof  bool  // src's end was read
}

// fill reads more of the stream into the buffer, moving what is unread to
// its start when the buffer is full.
func (b *reader) fill() error {
	if b.r > 0 && b.r == b.w {
		b.r, b.w = 0, 0
	}
	if b.w == len(b.buf) {
		if b.r == 0 {
			return errFrame // a frame header that does not fit: never for a valid one
		}
		b.w = copy(b.buf, b.buf[b.r:b.w])
		b.r = 0
	}
	n, err := b.src.Read(b.buf[b.w:])
	b.w += n
	b.read += int64(n)
	if err == io.EOF {
		b.eof = true
		return nil
	}
	return err
}

// header reads a frame header: the frame's type and its payload's length.
// At the stream's end it returns io.EOF, or io.ErrUnexpectedEOF after part
// of a header.
func (b *reader) header() (t, length uint64, err error) {
	for {
		t, l, n := parseFrameHeader(b.buf[b.r:b.w])
		if n > 0 {
			b.r += n
			return t, l, nil
		}
		if b.eof {
			if b.r < b.w {
				return 0, 0, io.ErrUnexpectedEOF
			}
			return 0, 0, io.EOF
		}
		if err := b.fill(); err != nil {
			return 0, 0, err
		}
	}
}

// varint reads a variable-length integer: a unidirectional stream's type.
func (b *reader) varint() (uint64, error) {
	for {
		if v, n, err := quicvarint.Parse(b.buf[b.r:b.w]); err == nil {
			b.r += n
			return v, nil
		}
		if b.eof {
			return 0, io.ErrUnexpectedEOF
		}
		if err := b.fill(); err != nil {
			return 0, err
		}
	}
}

// consumed is how many bytes of the stream were taken out of the buffer.
func (b *reader) consumed() int64 { return b.read - int64(b.w-b.r) }

// skip discards l bytes of the stream.
func (b *reader) skip(l uint64) error {
	for l > 0 {
		if b.r == b.w {
			if b.eof {
				return io.ErrUnexpectedEOF
			}
			if err := b.fill(); err != nil {
				return err
			}
			continue
		}
		k := min(uint64(b.w-b.r), l)
		b.r += int(k)
		l -= k
	}
	return nil
}

// errTooLarge is the answer for a frame longer than its bound.
var errTooLarge = errors.New("h3: frame too large")

// notOnRequestStream reports the frame types a request stream must not
// carry (RFC 9114 section 7.2): the control stream's, PUSH_PROMISE (a
// client does not push), and HTTP/2's reserved types. DATA before HEADERS
// is a caller's check.
func notOnRequestStream(t uint64) bool {
	switch t {
	case frameSettings, frameGoAway, frameMaxPushID, frameCancelPush, framePushPromise:
		return true
	}
	return reservedH2(t)
}
