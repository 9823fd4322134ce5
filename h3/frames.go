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

// frameReader reads frames from a unidirectional stream: small ones
// whole, others skipped.
type frameReader struct {
	r   io.Reader
	buf []byte
}

func (f *frameReader) fill(n int) error {
	for len(f.buf) < n {
		if len(f.buf) == cap(f.buf) {
			return errFrame
		}
		k, err := f.r.Read(f.buf[len(f.buf):cap(f.buf)])
		f.buf = f.buf[:len(f.buf)+k]
		if err != nil && len(f.buf) < n {
			return err
		}
	}
	return nil
}

// varint reads a variable-length integer.
func (f *frameReader) varint() (uint64, error) {
	if err := f.fill(1); err != nil {
		return 0, err
	}
	l := quicvarint.Len(0) << (f.buf[0] >> 6)
	if err := f.fill(l); err != nil {
		return 0, err
	}
	v, _, err := quicvarint.Parse(f.buf)
	f.buf = f.buf[:copy(f.buf, f.buf[l:])]
	return v, err
}

// errTooLarge is next's answer for a frame longer than its bound.
var errTooLarge = errors.New("h3: frame too large")

// next reads a frame whose payload is at most max bytes (errTooLarge
// otherwise); the payload stays valid until the next call.
func (f *frameReader) next(max int) (t uint64, payload []byte, err error) {
	if t, err = f.varint(); err != nil {
		return 0, nil, err
	}
	l, err := f.varint()
	if err != nil {
		return 0, nil, err
	}
	if l > uint64(max) {
		return t, nil, errTooLarge
	}
	if err := f.fill(int(l)); err != nil {
		return 0, nil, err
	}
	payload = append(payload[:0], f.buf[:l]...)
	f.buf = f.buf[:copy(f.buf, f.buf[l:])]
	return t, payload, nil
}
