package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// The raw HTTP/2 client of the tests that drive queue's HTTP/2 server frame
// by frame (TestFloods, TestH2Defence): x/net's Framer and hpack over a
// plain TCP connection, with prior knowledge.

// h2Wait bounds every phase of a connection: h2Dial sets it as the
// connection's deadline, and the tests set it again for each phase, so that
// a test fails, not hangs.
const h2Wait = 10 * time.Second

// h2Stream is what the client saw of one stream.
type h2Stream struct {
	status     string // :status of the first response HEADERS
	headersEnd bool   // that HEADERS frame carried END_STREAM
	ended      bool   // END_STREAM seen
	data       int    // DATA payload bytes
	frames     int    // DATA frames with a payload
	reset      bool   // RST_STREAM seen, with code
	code       http2.ErrCode
	corrupt    bool // DATA differed from h2Conn.pattern
}

// h2GoAway is the server's first GOAWAY.
type h2GoAway struct {
	last  uint32
	code  http2.ErrCode
	debug string
}

// h2Conn is a raw HTTP/2 client connection with prior knowledge. Nothing
// reads it until start; then a read loop records what the server sends and
// acknowledges the server's SETTINGS and PINGs (it sends no WINDOW_UPDATE).
type h2Conn struct {
	c        net.Conn
	w        io.Writer // c, counting into written
	bw       *bufio.Writer
	fr       *http2.Framer
	wmu      sync.Mutex // guards bw, fr's writes, enc and encBuf
	enc      *hpack.Encoder
	encBuf   bytes.Buffer
	maxFrame int // the server's SETTINGS_MAX_FRAME_SIZE

	// settings is the server's first SETTINGS frame.
	settings map[http2.SettingID]uint32
	// pattern, if set before start, is what every stream's DATA must be:
	// byte n of a stream's body is pattern[n].
	pattern []byte
	pingSeq atomic.Uint64
	// written counts the bytes written to the connection so far.
	written atomic.Int64

	started bool
	done    chan struct{} // closed when the read loop ends
	notify  chan struct{} // a frame arrived

	mu           sync.Mutex
	readErr      error // what ended the read loop
	goAway       *h2GoAway
	streams      map[uint32]*h2Stream
	pingAcked    map[[8]byte]bool
	pingAcks     int
	settingsAcks int
	// writtenAtGoAway is written's value when the GOAWAY came, or else
	// when the read loop ended.
	writtenAtGoAway int64
}

type h2Opts struct {
	rcvbuf   int // SO_RCVBUF set before connecting (rcvbufDialer); 0: the system's
	settings []http2.Setting
}

// h2CountWriter counts the bytes written through it.
type h2CountWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (cw h2CountWriter) Write(p []byte) (int, error) {
	n, err := cw.w.Write(p)
	cw.n.Add(int64(n))
	return n, err
}

// h2Dial connects to addr, sends the preface with o.settings, reads the
// server's first frame, which must be its SETTINGS, and acknowledges it.
// The connection's deadline is h2Wait from now. The read loop is not
// started; the test's cleanup closes the connection (and waits for the read
// loop to end).
func h2Dial(t *testing.T, addr string, o h2Opts) *h2Conn {
	t.Helper()
	nc, err := rcvbufDialer(o.rcvbuf).Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	c := &h2Conn{
		c: nc, maxFrame: 16384, settings: map[http2.SettingID]uint32{},
		done: make(chan struct{}), notify: make(chan struct{}, 1),
		streams: map[uint32]*h2Stream{}, pingAcked: map[[8]byte]bool{},
	}
	t.Cleanup(func() {
		nc.Close()
		if c.started {
			<-c.done
		}
	})
	nc.SetDeadline(time.Now().Add(h2Wait))
	c.w = h2CountWriter{nc, &c.written}
	c.bw = bufio.NewWriterSize(c.w, 64<<10)
	c.fr = http2.NewFramer(c.bw, bufio.NewReaderSize(nc, 64<<10))
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.enc = hpack.NewEncoder(&c.encBuf)
	c.bw.WriteString(http2.ClientPreface)
	if err := c.write(true, func(fr *http2.Framer) error { return fr.WriteSettings(o.settings...) }); err != nil {
		t.Fatalf("preface: %v", err)
	}
	f, err := c.fr.ReadFrame()
	if err != nil {
		t.Fatalf("reading the server's preface: %v", err)
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok || sf.IsAck() {
		t.Fatalf("server's first frame is %v, want SETTINGS", f)
	}
	sf.ForeachSetting(func(s http2.Setting) error {
		c.settings[s.ID] = s.Val
		return nil
	})
	if v, ok := c.settings[http2.SettingMaxFrameSize]; ok {
		c.maxFrame = int(v)
	}
	if v, ok := c.settings[http2.SettingHeaderTableSize]; ok {
		c.enc.SetMaxDynamicTableSizeLimit(v)
	}
	if err := c.write(true, func(fr *http2.Framer) error { return fr.WriteSettingsAck() }); err != nil {
		t.Fatalf("SETTINGS ack: %v", err)
	}
	return c
}

func (c *h2Conn) start() {
	c.started = true
	go c.readLoop()
}

func (c *h2Conn) readLoop() {
	defer close(c.done)
	for {
		f, err := c.fr.ReadFrame()
		c.mu.Lock()
		if err != nil {
			c.readErr = err
			if c.goAway == nil {
				c.writtenAtGoAway = c.written.Load()
			}
			c.mu.Unlock()
			return
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			s := c.stream(f.StreamID)
			if s.status == "" {
				s.status = f.PseudoValue("status")
				s.headersEnd = f.StreamEnded()
			}
			s.ended = s.ended || f.StreamEnded()
		case *http2.DataFrame:
			s := c.stream(f.StreamID)
			p := f.Data()
			if c.pattern != nil && (s.data+len(p) > len(c.pattern) || !bytes.Equal(p, c.pattern[s.data:s.data+len(p)])) {
				s.corrupt = true
			}
			s.data += len(p)
			if len(p) > 0 {
				s.frames++
			}
			s.ended = s.ended || f.StreamEnded()
		case *http2.RSTStreamFrame:
			s := c.stream(f.StreamID)
			if !s.reset {
				s.reset, s.code = true, f.ErrCode
			}
		case *http2.GoAwayFrame:
			if c.goAway == nil {
				c.goAway = &h2GoAway{last: f.LastStreamID, code: f.ErrCode, debug: string(f.DebugData())}
				c.writtenAtGoAway = c.written.Load()
			}
		case *http2.PingFrame:
			if f.IsAck() {
				c.pingAcks++
				c.pingAcked[f.Data] = true
			} else {
				data := f.Data
				go c.write(true, func(fr *http2.Framer) error { return fr.WritePing(true, data) })
			}
		case *http2.SettingsFrame:
			if f.IsAck() {
				c.settingsAcks++
			} else {
				go c.write(true, func(fr *http2.Framer) error { return fr.WriteSettingsAck() })
			}
		}
		c.mu.Unlock()
		select {
		case c.notify <- struct{}{}:
		default:
		}
	}
}

// stream returns the record of stream id; the caller holds mu.
func (c *h2Conn) stream(id uint32) *h2Stream {
	s := c.streams[id]
	if s == nil {
		s = &h2Stream{}
		c.streams[id] = s
	}
	return s
}

// snap returns a copy of stream id's record.
func (c *h2Conn) snap(id uint32) h2Stream {
	c.mu.Lock()
	defer c.mu.Unlock()
	return *c.stream(id)
}

// count returns how many of the streams seen match pred.
func (c *h2Conn) count(pred func(s *h2Stream) bool) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, s := range c.streams {
		if pred(s) {
			n++
		}
	}
	return n
}

// state returns the GOAWAY (nil: none) and the read loop's end (nil: still
// reading).
func (c *h2Conn) state() (*h2GoAway, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.goAway, c.readErr
}

// waitFor waits until cond (called with mu held) is true, the read loop
// ends, or d passes; it reports cond's last value.
func (c *h2Conn) waitFor(d time.Duration, cond func() bool) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		c.mu.Lock()
		ok := cond()
		c.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-c.notify:
		case <-c.done:
			c.mu.Lock()
			defer c.mu.Unlock()
			return cond()
		case <-timer.C:
			return false
		}
	}
}

// waitEnd waits, within d, for the read loop to end; closed reports that
// the server closed the connection (EOF, reset), as opposed to the client's
// deadline or a frame the client could not parse.
func (c *h2Conn) waitEnd(d time.Duration) (closed bool, err error) {
	c.waitFor(d, func() bool { return c.readErr != nil })
	_, err = c.state()
	return h2Closed(err), err
}

// h2Closed reports that err, the end of a read loop, is the server's close
// of the connection (EOF, reset), as opposed to the client's deadline or a
// frame the client could not parse.
func h2Closed(err error) bool {
	var ce http2.ConnectionError
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded) && !errors.As(err, &ce)
}

// finished reports that stream id ended, was reset, or the connection
// ended; the caller holds mu.
func (c *h2Conn) finished(id uint32) bool {
	s := c.stream(id)
	return s.ended || s.reset || c.readErr != nil
}

// waitStreams waits, within d, until the client's first n streams (1, 3,
// 5, ...) are finished; it reports whether they are.
func (c *h2Conn) waitStreams(d time.Duration, n int) bool {
	return c.waitFor(d, func() bool {
		for i := range n {
			if !c.finished(uint32(2*i + 1)) {
				return false
			}
		}
		return true
	})
}

// sync sends a PING and waits, within d, for its acknowledgement: the
// server has then handled every frame sent before it. It reports whether
// the acknowledgement came.
func (c *h2Conn) sync(d time.Duration) bool {
	var data [8]byte
	binary.BigEndian.PutUint64(data[:], 1<<63|c.pingSeq.Add(1))
	if err := c.write(true, func(fr *http2.Framer) error { return fr.WritePing(false, data) }); err != nil {
		return false
	}
	return c.waitFor(d, func() bool { return c.pingAcked[data] })
}

// write runs f under the write lock, and flushes if asked.
func (c *h2Conn) write(flush bool, f func(fr *http2.Framer) error) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := f(c.fr); err != nil {
		return err
	}
	if flush {
		return c.bw.Flush()
	}
	return nil
}

// rawWrite writes p to the connection as it is.
func (c *h2Conn) rawWrite(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.bw.Flush(); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}

// encode returns the HPACK block of fields, valid until the next encode;
// the caller holds wmu (the encoder's dynamic table follows the order of
// the blocks on the wire).
func (c *h2Conn) encode(fields ...hpack.HeaderField) []byte {
	c.encBuf.Reset()
	for _, f := range fields {
		c.enc.WriteField(f)
	}
	return c.encBuf.Bytes()
}

// headers sends a request's header block on stream id, in HEADERS and
// CONTINUATION frames of at most the server's frame size, and reports the
// block's encoded size.
func (c *h2Conn) headers(id uint32, endStream bool, fields ...hpack.HeaderField) (int, error) {
	var n int
	err := c.write(true, func(fr *http2.Framer) error {
		b := c.encode(fields...)
		n = len(b)
		first, rest := b, []byte(nil)
		if len(b) > c.maxFrame {
			first, rest = b[:c.maxFrame], b[c.maxFrame:]
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndStream: endStream, EndHeaders: len(rest) == 0}); err != nil {
			return err
		}
		for len(rest) > 0 {
			frag := rest[:min(len(rest), c.maxFrame)]
			rest = rest[len(frag):]
			if err := fr.WriteContinuation(id, len(rest) == 0, frag); err != nil {
				return err
			}
		}
		return nil
	})
	return n, err
}

// openBlock sends the HEADERS frame of a GET of path on stream id, with
// END_STREAM and without END_HEADERS: a header block for CONTINUATION
// frames to go on. It reports the frame's size, its 9-byte head included.
func (c *h2Conn) openBlock(id uint32, path string) (int, error) {
	var n int
	err := c.write(true, func(fr *http2.Framer) error {
		b := c.encode(h2Req("GET", path)...)
		n = 9 + len(b)
		return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b, EndStream: true, EndHeaders: false})
	})
	return n, err
}

// h2Req returns a request's pseudo-header fields, then extra.
func h2Req(method, path string, extra ...hpack.HeaderField) []hpack.HeaderField {
	return append([]hpack.HeaderField{
		{Name: ":method", Value: method},
		{Name: ":scheme", Value: "http"},
		{Name: ":authority", Value: "a"},
		{Name: ":path", Value: path},
	}, extra...)
}

// h2Frag is a fragment of a header block that a CONTINUATION flood
// repeats, and its name.
type h2Frag struct {
	name string
	frag []byte
}

// h2Literals returns a CONTINUATION fragment of just under 16 KiB of valid
// HPACK: literal fields without indexing, with new names, so that only a
// size limit stops a header block made of them.
func h2Literals() []byte {
	var lit bytes.Buffer
	for lit.Len() < 16<<10-64 {
		name, value := "x-junk", strings.Repeat("j", 50)
		lit.WriteByte(0x00)
		lit.WriteByte(byte(len(name)))
		lit.WriteString(name)
		lit.WriteByte(byte(len(value)))
		lit.WriteString(value)
	}
	return lit.Bytes()
}
