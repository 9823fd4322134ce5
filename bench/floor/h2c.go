package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"runtime"
	"sync"

	"github.com/queue-dev/queue/internal/hpackw"
	"github.com/queue-dev/queue/internal/httpsem"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// On its -h2c-listen address the relay takes HTTP/2 with prior knowledge
// from its clients and relays each stream's request over HTTP/1.1, the
// work of the shared harness's h2c scenario, at the least cost the Go
// runtime allows with the design queue's HTTP/2 engine has (package h2),
// allocating only the frame x/net's Framer makes: one goroutine reads
// each client connection's frames; each stream runs on a pooled worker
// goroutine that takes an idle upstream connection (or dials one), writes
// the request and reads the response; responses go into the client
// connection's queue, written by whichever worker finds no write in
// progress after one runtime.Gosched, so that the streams that are ready
// together go out in one write. Per stream it pays the worker's two
// wake-ups, the upstream write and read, and its share of the client's
// reads and writes, each a raw system call as in queue.
//
// It is not an HTTP/2 server: it sends an empty SETTINGS frame and
// acknowledges the client's, answers PING, and ignores flow control,
// priorities and stream limits; a request with a body, a header block in
// CONTINUATION frames or a response over its client's default frame size
// (16 KiB) ends the connection. The request head it sends upstream is what
// queue sends: the request line, Host from :authority, the client's
// fields with canonical names, and with -forward the forwarding fields.
// The response goes back as :status, the upstream's fields in lower case
// and a Date field (queue adds one when the upstream sent none), as
// literals (HPACK without a dynamic table, as queue encodes), then one
// DATA frame ending the stream.

// h2Relay is one h2c listener's: the idle workers and the idle upstream
// connections its client connections share.
type h2Relay struct {
	upstream string

	mu        sync.Mutex
	idleWork  []chan *h2Stream
	idleConns []*upConn
}

type upConn struct {
	net.Conn
	resp   []byte
	frames []byte
}

// serveConn relays one client connection's streams until it closes or
// sends what the relay does not take. fields, when not empty, go into
// each request head.
func (r *h2Relay) serveConn(nc net.Conn, fields []byte) {
	defer nc.Close()
	c := &h2Client{nc: nc}
	br := bufio.NewReaderSize(nc, 16<<10)
	var preface [len(http2.ClientPreface)]byte
	if _, err := io.ReadFull(br, preface[:]); err != nil || string(preface[:]) != http2.ClientPreface {
		return
	}
	fr := http2.NewFramer(io.Discard, br)
	var head []byte // the request head being built from a header block
	dec := hpack.NewDecoder(4096, func(f hpack.HeaderField) {
		head = appendField(head, f)
	})
	c.send(appendFrame(nil, http2.FrameSettings, 0, 0, nil), false)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				c.send(appendFrame(nil, http2.FrameSettings, byte(http2.FlagSettingsAck), 0, nil), false)
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				c.send(appendFrame(nil, http2.FramePing, byte(http2.FlagPingAck), 0, f.Data[:]), false)
			}
		case *http2.HeadersFrame:
			if !f.HeadersEnded() || !f.StreamEnded() {
				return // CONTINUATION or a request body: not taken
			}
			head = head[:0]
			if _, err := dec.Write(f.HeaderBlockFragment()); err != nil {
				return
			}
			st := streams.Get().(*h2Stream)
			st.c, st.id = c, f.StreamID
			st.head = requestHead(st.head[:0], head, fields)
			r.start(st)
		case *http2.WindowUpdateFrame, *http2.PriorityFrame, *http2.RSTStreamFrame:
		default:
			return
		}
	}
}

// h2Client is one client connection: its write queue and the writer's
// state, under mu.
type h2Client struct {
	nc net.Conn

	mu       sync.Mutex
	q, spare []byte
	writing  bool
	err      error
}

// send appends frames to the queue and, unless a write is in progress,
// writes the queue until it is empty; with yield, after one
// runtime.Gosched, so that the workers ready to run add theirs first.
func (c *h2Client) send(frames []byte, yield bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.q = append(c.q, frames...)
	if c.writing || c.err != nil {
		return
	}
	c.writing = true
	if yield {
		c.mu.Unlock()
		runtime.Gosched()
		c.mu.Lock()
	}
	for len(c.q) > 0 && c.err == nil {
		b := c.q
		c.q = c.spare[:0]
		c.mu.Unlock()
		_, err := c.nc.Write(b)
		c.mu.Lock()
		c.spare = b[:0]
		if err != nil {
			c.err = err
			c.nc.Close()
		}
	}
	c.writing = false
}

// h2Stream is one request: the head to send upstream and where its
// response goes.
type h2Stream struct {
	c    *h2Client
	id   uint32
	head []byte
}

var streams = sync.Pool{New: func() any { return new(h2Stream) }}

// start runs st on an idle worker, or on a new one.
func (r *h2Relay) start(st *h2Stream) {
	r.mu.Lock()
	if n := len(r.idleWork); n > 0 {
		ch := r.idleWork[n-1]
		r.idleWork = r.idleWork[:n-1]
		r.mu.Unlock()
		ch <- st
		return
	}
	r.mu.Unlock()
	ch := make(chan *h2Stream, 1)
	go func() {
		for st := range ch {
			r.serve(st)
			st.c = nil
			streams.Put(st)
			r.mu.Lock()
			r.idleWork = append(r.idleWork, ch)
			r.mu.Unlock()
		}
	}()
	ch <- st
}

// serve relays one stream over an upstream connection, and resets the
// stream if the upstream fails it.
func (r *h2Relay) serve(st *h2Stream) {
	r.mu.Lock()
	var u *upConn
	if n := len(r.idleConns); n > 0 {
		u = r.idleConns[n-1]
		r.idleConns = r.idleConns[:n-1]
	}
	r.mu.Unlock()
	if u == nil {
		nc, err := net.Dial("tcp", r.upstream)
		if err != nil {
			st.c.send(appendRST(nil, st.id), true)
			return
		}
		u = &upConn{Conn: newRawConn(nc), resp: make([]byte, 0, bufSize)}
	}
	var err error
	if _, err = u.Write(st.head); err == nil {
		u.resp, err = readResponse(u, u.resp[:0])
	}
	if err == nil {
		u.frames, err = responseFrames(u.frames[:0], st.id, u.resp)
	}
	if err != nil {
		u.Close()
		st.c.send(appendRST(nil, st.id), true)
		return
	}
	st.c.send(u.frames, true)
	r.mu.Lock()
	r.idleConns = append(r.idleConns, u)
	r.mu.Unlock()
}

// requestHead appends to dst the HTTP/1.1 request head for the fields
// (decoded, in head: pseudo-fields as "\x00name\x00value", others as
// "Name: value\r\n") and the forwarding fields.
func requestHead(dst, head, fields []byte) []byte {
	var method, path, authority, rest []byte
	for len(head) > 0 && head[0] == 0 {
		name, r, _ := bytes.Cut(head[1:], []byte{0})
		value, r, _ := bytes.Cut(r, []byte{0})
		head = r
		switch string(name) {
		case ":method":
			method = value
		case ":path":
			path = value
		case ":authority":
			authority = value
		}
	}
	rest = head
	dst = append(dst, method...)
	dst = append(dst, ' ')
	dst = append(dst, path...)
	dst = append(dst, " HTTP/1.1\r\nHost: "...)
	dst = append(dst, authority...)
	dst = append(dst, "\r\n"...)
	dst = append(dst, rest...)
	dst = append(dst, fields...)
	return append(dst, "\r\n"...)
}

// appendField appends one decoded field to head: pseudo-fields first, as
// "\x00name\x00value\x00" (HTTP/2 sends them before the others), the rest
// as HTTP/1.1 lines with canonical names.
func appendField(head []byte, f hpack.HeaderField) []byte {
	if len(f.Name) > 0 && f.Name[0] == ':' {
		head = append(head, 0)
		head = append(head, f.Name...)
		head = append(head, 0)
		head = append(head, f.Value...)
		return append(head, 0)
	}
	up := true
	for i := 0; i < len(f.Name); i++ {
		b := f.Name[i]
		if up && 'a' <= b && b <= 'z' {
			b -= 'a' - 'A'
		}
		up = b == '-'
		head = append(head, b)
	}
	head = append(head, ": "...)
	head = append(head, f.Value...)
	return append(head, "\r\n"...)
}

// responseFrames appends the HEADERS and DATA frames of one HTTP/1.1
// response (resp, whole) for stream id.
func responseFrames(dst []byte, id uint32, resp []byte) ([]byte, error) {
	end := bytes.Index(resp, headEnd)
	line, rest, _ := bytes.Cut(resp[:end], headEnd[:2])
	if len(line) < 12 {
		return dst, errNoLength
	}
	status := line[9:12]
	at := len(dst)
	dst = appendFrame(dst, http2.FrameHeaders, byte(http2.FlagHeadersEndHeaders), id, nil)
	if string(status) == "200" {
		dst = append(dst, 0x88) // :status 200, indexed (RFC 7541 Appendix A)
	} else {
		dst = append(dst, 0x08, 3) // :status, literal value
		dst = append(dst, status...)
	}
	date := false
	for len(rest) > 0 {
		var l []byte
		l, rest, _ = bytes.Cut(rest, headEnd[:2])
		name, value, ok := bytes.Cut(l, []byte{':'})
		if !ok {
			continue
		}
		value = bytes.TrimSpace(value)
		if len(name) > 126 || len(value) > 126 {
			return dst, errLongField // the one-byte length prefix holds 126
		}
		switch {
		case bytes.EqualFold(name, []byte("content-length")):
			dst = append(dst, 0x0f, 28-15) // literal without indexing, name indexed
		case bytes.EqualFold(name, []byte("content-type")):
			dst = append(dst, 0x0f, 31-15)
		default:
			dst = append(dst, 0, byte(len(name))) // literal without indexing, new name
			for _, b := range name {
				if 'A' <= b && b <= 'Z' {
					b += 'a' - 'A'
				}
				dst = append(dst, b)
			}
		}
		date = date || len(name) == 4 && bytes.EqualFold(name, []byte("date"))
		dst = append(dst, byte(len(value)))
		dst = append(dst, value...)
	}
	if !date {
		dst = append(dst, 0x0f, 33-15, 29) // date, name indexed (33), 29-byte value
		dst = httpsem.AppendDate(dst)
	}
	n := len(dst) - at - 9
	dst[at], dst[at+1], dst[at+2] = byte(n>>16), byte(n>>8), byte(n)
	body := resp[end+len(headEnd):]
	if len(body) > 16<<10 {
		return dst, errNoLength
	}
	return appendFrame(dst, http2.FrameData, byte(http2.FlagDataEndStream), id, body), nil
}

var errLongField = errors.New("a response field over 126 bytes")

func appendFrame(dst []byte, t http2.FrameType, flags byte, id uint32, payload []byte) []byte {
	dst = hpackw.AppendFrameHeader(dst, len(payload), byte(t), flags, id)
	return append(dst, payload...)
}

func appendRST(dst []byte, id uint32) []byte {
	code := uint32(http2.ErrCodeInternal)
	return appendFrame(dst, http2.FrameRSTStream, 0, id, []byte{byte(code >> 24), byte(code >> 16), byte(code >> 8), byte(code)})
}
