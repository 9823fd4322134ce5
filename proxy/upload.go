package proxy

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/queue-dev/queue/internal/pool"
	"golang.org/x/net/http/httpguts"
)

// bodyWriter streams a request body whose size is unknown or too large to
// hold, on its own goroutine, so that the response can be read while the
// body is still being sent (a streaming upload, a bidirectional exchange)
// without either side waiting on the other.
type bodyWriter struct {
	done chan error
	rc   *http.ResponseController
	err  error
	over bool
	// read is set once the writer has read the client's body to its end.
	// From then on the client's connection is the serving engine's again:
	// queue's HTTP/1.1 engine watches it for the client going away (h1's
	// watcher), and net/http's HTTP/1 server starts reading it for the
	// next request, where a read deadline set in the past fails that read
	// and cancels the connection's context, which every later request on
	// it inherits. So no deadline is set on it after that.
	read atomic.Bool
}

func startBody(w http.ResponseWriter, c *h1Conn, r *http.Request, deadline time.Time) *bodyWriter {
	bw := &bodyWriter{done: make(chan error, 1), rc: http.NewResponseController(w)}
	// queue's engines always read a body while the response is written
	// (their EnableFullDuplex does nothing); net/http's HTTP/1 server
	// would otherwise discard the unread body as soon as the response
	// starts. A server that reports ErrNotSupported is full duplex too.
	bw.rc.EnableFullDuplex()
	go func() {
		if !deadline.IsZero() {
			bw.rc.SetReadDeadline(deadline) // a slow upload is cut at --timeout
		}
		err := c.writeBody(r, &bw.read)
		if !deadline.IsZero() && err == nil {
			// Before done: once the handler has returned, w is no longer
			// ours to touch (the stats wrapper is pooled).
			bw.rc.SetReadDeadline(time.Time{})
		}
		bw.done <- err
	}()
	return bw
}

// stop waits for the body writer. If it is still running (the response came
// first), it is interrupted: the client's body read is given a past
// deadline and the upstream connection, which will not be reused, too.
func (bw *bodyWriter) stop(c *h1Conn) error {
	if bw == nil || bw.over {
		if bw == nil {
			return nil
		}
		return bw.err
	}
	select {
	case bw.err = <-bw.done:
	default:
		// The client's read is interrupted only while the writer may be
		// waiting on it: once the body was read to its end, the connection
		// is the server's again (read). What the writer may still be
		// doing then is writing to the upstream, which the upstream's
		// deadline interrupts.
		client := !bw.read.Load()
		if client {
			bw.rc.SetReadDeadline(aLongTimeAgo)
		}
		c.nc.SetDeadline(aLongTimeAgo)
		// The writer's own error, when it has one, says why (a malformed
		// body, a timeout); it may have woken the reader itself.
		if bw.err = <-bw.done; bw.err == nil {
			// It had sent the whole body after all: the client's
			// connection is intact. A read deadline set in the past is put
			// back (queue's HTTP/1.1 engine reads the next request under
			// it). The upstream connection is not reused.
			if client {
				bw.rc.SetReadDeadline(time.Time{})
			}
			bw.err = errLateBody
		}
	}
	bw.over = true
	return bw.err
}

// errLateBody is stop's answer when the body writer finished only after the
// response was read: the body was sent whole, but the upstream connection,
// interrupted meanwhile, is not reused.
var errLateBody = errors.New("request body finished after the response")

// writeBody sends the request body, chunked when its length is unknown,
// sending each piece on as it arrives from the client: one upstream write
// per Read. queue's HTTP/1.1 engine returns from a Read all the body
// its read buffer holds, up to the copy buffer, so a body of small chunks
// goes on in writes of kilobytes, not a write per chunk (bench/chunks),
// and a stream that pauses goes on as soon as it pauses, since the Read
// returns then. read is set as soon as the body has been read to its end.
func (c *h1Conn) writeBody(r *http.Request, read *atomic.Bool) error {
	chunked := r.ContentLength < 0
	bufp := pool.Get(pool.Copy)
	defer pool.Put(bufp)
	buf := *bufp
	var sent int64
	for {
		n, rerr := r.Body.Read(buf)
		if rerr == io.EOF || !chunked && sent+int64(n) == r.ContentLength {
			read.Store(true) // before the last write: see bodyWriter.read
		}
		if n > 0 {
			sent += int64(n)
			if err := c.sendPiece(buf[:n], chunked); err != nil {
				return fmt.Errorf("write request body: %w", err)
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			c.nc.SetDeadline(aLongTimeAgo) // wake the response reader
			return bodyError(rerr)
		}
	}
	if !chunked {
		if sent != r.ContentLength {
			return fmt.Errorf("%w: body of %d bytes, want %d", errClientGone, sent, r.ContentLength)
		}
		return nil
	}
	c.bw.WriteString("0\r\n")
	for k, vv := range r.Trailer {
		if forbiddenTrailer(k) || !httpguts.ValidHeaderFieldName(k) {
			continue
		}
		for _, v := range vv {
			if httpguts.ValidHeaderFieldValue(v) {
				c.bw.WriteString(k + ": " + v + "\r\n")
			}
		}
	}
	c.bw.WriteString("\r\n")
	if err := c.bw.Flush(); err != nil {
		return fmt.Errorf("write request body: %w", err)
	}
	return nil
}

// sendPiece writes p upstream, as one chunk when chunked, and flushes:
// what the write buffer holds (the request head, before the first piece),
// the chunk-size line, p and the CRLF after it go in one write when they
// fit the buffer; a larger piece goes in one writev of the three after the
// buffer's own write, rather than the three writes bufio would make.
func (c *h1Conn) sendPiece(p []byte, chunked bool) error {
	var size, end []byte
	if chunked {
		size = append(strconv.AppendInt(c.chunkHead[:0], int64(len(p)), 16), "\r\n"...)
		end = chunkEnd
	}
	if c.tcp == nil || len(size)+len(p)+len(end) <= c.bw.Available() {
		c.bw.Write(size)
		c.bw.Write(p)
		c.bw.Write(end)
		return c.bw.Flush()
	}
	if err := c.bw.Flush(); err != nil {
		return err
	}
	c.vec = [3][]byte{size, p, end}
	_, err := c.vw.Writev(c.vec[:])
	c.vec = [3][]byte{}
	return err
}

var chunkEnd = []byte("\r\n")
