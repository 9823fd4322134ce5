package h3

import (
	"errors"
	"io"
	"net/http"

	"github.com/quic-go/quic-go"
)

// reqBody is the request body as the handler reads it: the payload of the
// stream's DATA frames, then its trailers (HEADERS), checked against the
// request's Content-Length.
type reqBody struct{ st *stream }

var (
	errBodyLength = errors.New("h3: request body does not match its Content-Length")
	errTrailers   = errors.New("h3: malformed request trailers")
)

func (b *reqBody) Read(p []byte) (int, error) {
	st := b.st
	if st.bodyErr != nil {
		return 0, st.bodyErr
	}
	if len(p) == 0 {
		return 0, nil
	}
	for st.frameLeft == 0 {
		if err := st.nextDataFrame(); err != nil {
			return 0, st.endBody(err)
		}
	}
	in := &st.in
	var n int
	if in.r < in.w {
		n = copy(p[:min(uint64(len(p)), st.frameLeft)], in.buf[in.r:in.w])
		in.r += n
	} else {
		if in.eof {
			return 0, st.endBody(io.ErrUnexpectedEOF)
		}
		// Straight into p: a body is not copied through the buffer.
		var err error
		n, err = st.str.Read(p[:min(uint64(len(p)), st.frameLeft)])
		in.read += int64(n)
		if err == io.EOF {
			in.eof = true
		} else if err != nil {
			st.frameLeft -= uint64(n)
			st.received += int64(n)
			return n, st.endBody(err)
		}
	}
	st.frameLeft -= uint64(n)
	st.received += int64(n)
	if st.declared >= 0 && st.received > st.declared {
		return 0, st.endBody(errBodyLength)
	}
	return n, nil
}

func (b *reqBody) Close() error { return nil }

// nextDataFrame reads frame headers up to the next DATA frame's payload.
// Trailers (HEADERS) end the body; the stream's FIN after them, or after
// the last DATA, is io.EOF.
func (st *stream) nextDataFrame() error {
	for {
		t, l, err := st.in.header()
		switch {
		case err == io.ErrUnexpectedEOF:
			return errFrame // a frame header cut by the stream's end
		case err != nil:
			return err
		case t == frameData:
			if l > 0 {
				st.frameLeft = l
				return nil
			}
		case t == frameHeaders:
			if err := st.readTrailers(l); err != nil {
				return err
			}
			return io.EOF
		case notOnRequestStream(t):
			st.c.close(errFrameUnexpected)
			return errUnexpectedFrame
		default:
			if err := st.in.skip(l); err != nil {
				return err
			}
		}
	}
}

// readTrailers reads the trailer section of l bytes into the request's
// Trailer; nothing may follow it but the stream's FIN.
func (st *stream) readTrailers(l uint64) error {
	p, err := st.fieldSection(l)
	if err != nil {
		return err
	}
	st.trailer = make(http.Header)
	st.sec.Reset(st.trailer, &st.vals, &st.canon, true)
	if err := st.decodeSection(p); err != nil || st.sec.Bad {
		return errTrailers
	}
	in := &st.in
	for in.r == in.w && !in.eof {
		if err := in.fill(); err != nil {
			return err
		}
	}
	if in.r < in.w {
		return errTrailers
	}
	st.req.Trailer = st.trailer
	return nil
}

// endBody ends the body with err (io.EOF at its end), checking the length
// the request declared; a malformed body resets the stream.
func (st *stream) endBody(err error) error {
	if err == io.EOF && st.declared >= 0 && st.received != st.declared {
		err = errBodyLength
	}
	st.bodyErr = err
	switch {
	case err == io.EOF:
	case errors.Is(err, errBodyLength), errors.Is(err, errTrailers), errors.Is(err, errFrame), errors.Is(err, errTooLarge):
		st.cancel(errMessage)
		st.c.glitch(GlitchRefused)
	default:
		var se *quic.StreamError
		if errors.As(err, &se) && se.Remote {
			err = io.ErrUnexpectedEOF // the client reset its stream
			st.bodyErr = err
		}
	}
	return err
}
