//lint:file-ignore SA1019 the tests drive the engine with golang.org/x/net/http2's own client on purpose: a second HTTP/2 implementation besides net/http's.

package h2_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queue-dev/queue/h2"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// The tests do not call t.Parallel: some wait on the engine's timers (the
// idle timeout, the drain's PING) and TestGoroutines counts the process's
// goroutines; run one after another, the package takes a few seconds.

// failAfter bounds every wait in these tests: it is the failure bound only,
// never waited out by a passing test.
const failAfter = 5 * time.Second

// connLife bounds the whole life of a raw client's connection, on top of
// failAfter for each of its reads and writes: a server that never stops
// sending cannot keep a test reading for ever.
const connLife = 2 * time.Minute

// testServer serves h2.Server on a loopback listener: its accept loop hands
// each connection to serve (ServeConn with prior knowledge by default).
type testServer struct {
	srv   *h2.Server
	addr  string
	conns atomic.Int32 // connections accepted
}

// startServer starts srv; when the test ends it closes the listener and the
// server, and checks that every ServeConn returned.
func startServer(t *testing.T, srv *h2.Server) *testServer {
	return startServerFunc(t, srv, func(nc net.Conn) { srv.ServeConn(nc, nil) })
}

func startServerFunc(t *testing.T, srv *h2.Server, serve func(net.Conn)) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	ts := &testServer{srv: srv, addr: ln.Addr().String()}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			ts.conns.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				serve(nc)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		srv.Close()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(failAfter):
			t.Errorf("ServeConn did not return after Close")
		}
	})
	return ts
}

func (ts *testServer) url(path string) string { return "http://" + ts.addr + path }

// transport returns an x/net HTTP/2 client speaking h2c with prior
// knowledge; its connections close when the test ends.
func (ts *testServer) transport(t *testing.T) *http2.Transport {
	tr := &http2.Transport{
		AllowHTTP:          true,
		DisableCompression: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

func (ts *testServer) client(t *testing.T) *http.Client {
	return &http.Client{Transport: ts.transport(t), Timeout: 2 * failAfter}
}

// newServer returns a server for f, with the other fields zero.
func newServer(f http.HandlerFunc) *h2.Server { return &h2.Server{Handler: f} }

// rawClient speaks HTTP/2 frame by frame.
type rawClient struct {
	t    *testing.T
	nc   net.Conn
	fr   *http2.Framer
	wbuf bytes.Buffer // the Framer's frames, written by flush
	hold bool         // batch: flush writes nothing until the batch ends
	enc  *hpack.Encoder
	hbuf bytes.Buffer
	// note, if set, says in a failed read or write what the test was at.
	note string
	// sendWindow is the connection's window for DATA to the server, as
	// the frames read so far set it.
	sendWindow int64
	// end is when the connection's life (connLife) ends.
	end time.Time
}

// dialRaw connects to ts; every read and write on the connection is
// bounded by failAfter (each one: a test that reads or writes much is
// not failed by a slow machine), and the whole by connLife.
func (ts *testServer) dialRaw(t *testing.T) *rawClient {
	t.Helper()
	nc, err := net.DialTimeout("tcp", ts.addr, failAfter)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { nc.Close() })
	rc := &rawClient{t: t, nc: nc, sendWindow: 65535, end: time.Now().Add(connLife)}
	nc.SetDeadline(rc.deadline()) // for a write of the test's own on nc
	rc.setConn(nc)
	rc.enc = hpack.NewEncoder(&rc.hbuf)
	return rc
}

// setConn makes nc the connection rc speaks on: its Framer reads from nc,
// each read under a deadline of its own, and flush writes to it.
func (rc *rawClient) setConn(nc net.Conn) {
	rc.nc = nc
	rc.fr = http2.NewFramer(&rc.wbuf, &boundedReader{rc: rc})
	rc.fr.AllowIllegalWrites = true
	rc.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
}

// deadline is the deadline of rc's next read or write: failAfter from
// now, within the connection's life.
func (rc *rawClient) deadline() time.Time {
	d := time.Now().Add(failAfter)
	if d.After(rc.end) {
		return rc.end
	}
	return d
}

// boundedReader reads rc's connection, each Read bounded by rc.deadline.
type boundedReader struct{ rc *rawClient }

func (r *boundedReader) Read(p []byte) (int, error) {
	r.rc.nc.SetReadDeadline(r.rc.deadline())
	return r.rc.nc.Read(p)
}

// flush writes the frames queued by the Framer, unless in a batch.
func (rc *rawClient) flush() {
	rc.t.Helper()
	if rc.hold || rc.wbuf.Len() == 0 {
		return
	}
	rc.nc.SetWriteDeadline(rc.deadline())
	if _, err := rc.nc.Write(rc.wbuf.Bytes()); err != nil {
		rc.t.Fatalf("%swrite: %v", rc.notePrefix(), err)
	}
	rc.wbuf.Reset()
}

// batch runs f and writes what it queued in one write.
func (rc *rawClient) batch(f func()) {
	rc.t.Helper()
	rc.hold = true
	f()
	rc.hold = false
	rc.flush()
}

// preface writes the client preface and a SETTINGS frame.
func (rc *rawClient) preface(settings ...http2.Setting) {
	rc.t.Helper()
	rc.wbuf.WriteString(http2.ClientPreface)
	rc.check(rc.fr.WriteSettings(settings...))
	rc.flush()
}

// handshake writes the preface, reads the server's SETTINGS and acks it.
func (rc *rawClient) handshake(settings ...http2.Setting) {
	rc.t.Helper()
	rc.preface(settings...)
	for {
		f := rc.readRaw()
		if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
			break
		}
	}
	rc.check(rc.fr.WriteSettingsAck())
	rc.flush()
}

func (rc *rawClient) notePrefix() string {
	if rc.note == "" {
		return ""
	}
	return rc.note + ": "
}

func (rc *rawClient) check(err error) {
	rc.t.Helper()
	if err != nil {
		rc.t.Fatalf("frame write: %v", err)
	}
}

// request lists the pseudo-fields of a request, then extra name, value
// pairs.
func request(method, path string, extra ...string) []string {
	return append([]string{":method", method, ":scheme", "http", ":path", path, ":authority", "example.test"}, extra...)
}

// headers writes a HEADERS frame with the fields kv (name, value pairs),
// encoded as they are (no lowercasing).
func (rc *rawClient) headers(id uint32, end bool, kv ...string) {
	rc.t.Helper()
	rc.hbuf.Reset()
	for i := 0; i < len(kv); i += 2 {
		rc.enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	rc.check(rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: rc.hbuf.Bytes(), EndStream: end, EndHeaders: true}))
	rc.flush()
}

// headersSplit writes a header block of fields kv in HEADERS and
// CONTINUATION frames of at most size bytes.
func (rc *rawClient) headersSplit(id uint32, end bool, size int, kv ...string) {
	rc.t.Helper()
	rc.hbuf.Reset()
	for i := 0; i < len(kv); i += 2 {
		rc.enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	b := rc.hbuf.Bytes()
	first := b[:min(size, len(b))]
	b = b[len(first):]
	rc.batch(func() {
		rc.check(rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndStream: end, EndHeaders: len(b) == 0}))
		for len(b) > 0 {
			n := min(size, len(b))
			rc.check(rc.fr.WriteContinuation(id, n == len(b), b[:n]))
			b = b[n:]
		}
	})
}

func (rc *rawClient) data(id uint32, end bool, p []byte) {
	rc.t.Helper()
	rc.sendWindow -= int64(len(p))
	rc.check(rc.fr.WriteData(id, end, p))
	rc.flush()
}

func (rc *rawClient) rst(id uint32, code http2.ErrCode) {
	rc.t.Helper()
	rc.check(rc.fr.WriteRSTStream(id, code))
	rc.flush()
}

func (rc *rawClient) ping(ack bool, data [8]byte) {
	rc.t.Helper()
	rc.check(rc.fr.WritePing(ack, data))
	rc.flush()
}

// readRaw reads the next frame, whatever it is.
func (rc *rawClient) readRaw() http2.Frame {
	rc.t.Helper()
	f, err := rc.fr.ReadFrame()
	if err != nil {
		rc.t.Fatalf("%sread frame: %v", rc.notePrefix(), err)
	}
	if wu, ok := f.(*http2.WindowUpdateFrame); ok && wu.StreamID == 0 {
		rc.sendWindow += int64(wu.Increment)
	}
	return f
}

// next reads the next frame that is not SETTINGS or WINDOW_UPDATE (the
// server's own, its acks and its flow control).
func (rc *rawClient) next() http2.Frame {
	rc.t.Helper()
	for {
		switch f := rc.readRaw().(type) {
		case *http2.SettingsFrame, *http2.WindowUpdateFrame:
		default:
			return f
		}
	}
}

// sync sends a PING and returns the frames (other than SETTINGS and
// WINDOW_UPDATE) that came before its ack: everything the server queued
// before it read the PING.
func (rc *rawClient) sync() []http2.Frame {
	rc.t.Helper()
	p := [8]byte{'s', 'y', 'n', 'c'}
	rc.ping(false, p)
	var fs []http2.Frame
	for {
		f := rc.next()
		if pf, ok := f.(*http2.PingFrame); ok && pf.IsAck() && pf.Data == p {
			return fs
		}
		fs = append(fs, f)
	}
}

// response is what a raw client read of one stream.
type response struct {
	status    string
	header    http.Header
	trailer   http.Header
	body      []byte
	infos     []string // informational statuses, in order
	ended     bool     // END_STREAM came
	rst       bool     // RST_STREAM came
	rstCode   http2.ErrCode
	endOnHead bool // END_STREAM came on the final HEADERS
	frames    []http2.Frame
}

// readResponse reads frames until stream id ends (END_STREAM or
// RST_STREAM). Frames of other streams fail the test unless other is set,
// which gets them.
func (rc *rawClient) readResponse(id uint32, other func(http2.Frame)) *response {
	rc.t.Helper()
	res := &response{header: http.Header{}}
	for {
		f := rc.next()
		if ga, ok := f.(*http2.GoAwayFrame); ok && ga.ErrCode != http2.ErrCodeNo {
			rc.t.Fatalf("stream %d: GOAWAY %v (last stream %d)", id, ga.ErrCode, ga.LastStreamID)
		}
		if f.Header().StreamID != id {
			if other == nil {
				rc.t.Fatalf("stream %d: unexpected frame %v", id, f)
			}
			other(f)
			continue
		}
		res.frames = append(res.frames, f)
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			switch {
			case res.status != "":
				res.trailer = http.Header{}
				for _, hf := range f.RegularFields() {
					res.trailer.Add(hf.Name, hf.Value)
				}
			case strings.HasPrefix(f.PseudoValue("status"), "1"):
				res.infos = append(res.infos, f.PseudoValue("status"))
				if f.StreamEnded() {
					rc.t.Fatalf("stream %d: END_STREAM on a %s", id, f.PseudoValue("status"))
				}
				continue
			default:
				res.status = f.PseudoValue("status")
				for _, hf := range f.RegularFields() {
					res.header.Add(hf.Name, hf.Value)
				}
				res.endOnHead = f.StreamEnded()
			}
			if f.StreamEnded() {
				res.ended = true
				return res
			}
		case *http2.DataFrame:
			res.body = append(res.body, f.Data()...)
			if f.StreamEnded() {
				res.ended = true
				return res
			}
		case *http2.RSTStreamFrame:
			res.rst, res.rstCode = true, f.ErrCode
			return res
		default:
			rc.t.Fatalf("stream %d: unexpected frame %v", id, f)
		}
	}
}

// expectGoAway reads until a GOAWAY, checks its code, and then that the
// server closes the connection.
func (rc *rawClient) expectGoAway(code http2.ErrCode) *http2.GoAwayFrame {
	rc.t.Helper()
	var ga *http2.GoAwayFrame
	for ga == nil {
		f, err := rc.fr.ReadFrame()
		if err != nil {
			rc.t.Fatalf("read frame: %v (want GOAWAY %v)", err, code)
		}
		ga, _ = f.(*http2.GoAwayFrame)
	}
	if ga.ErrCode != code {
		rc.t.Errorf("GOAWAY code = %v, want %v", ga.ErrCode, code)
	}
	rc.expectEOF()
	return ga
}

// expectDrain reads a drain to its end: the first GOAWAY (the highest
// stream id), then, once its PING came back (acked here when ack is set)
// or its second passed, the final GOAWAY with last, and the close.
func (rc *rawClient) expectDrain(last uint32, ack bool) {
	rc.t.Helper()
	var goaways []uint32
	for len(goaways) < 2 {
		switch f := rc.next().(type) {
		case *http2.GoAwayFrame:
			goaways = append(goaways, f.LastStreamID)
		case *http2.PingFrame:
			if ack && !f.IsAck() {
				rc.ping(true, f.Data)
			}
		default:
			rc.t.Fatalf("unexpected frame %v", f)
		}
	}
	if want := []uint32{1<<31 - 1, last}; !slices.Equal(goaways, want) {
		rc.t.Errorf("GOAWAY last stream ids %v, want %v", goaways, want)
	}
	rc.expectEOF()
}

// expectEOF reads until the server closes the connection.
func (rc *rawClient) expectEOF() {
	rc.t.Helper()
	for {
		f, err := rc.fr.ReadFrame()
		if err == nil {
			switch f.(type) {
			case *http2.GoAwayFrame, *http2.PingFrame, *http2.SettingsFrame, *http2.WindowUpdateFrame:
			default:
				rc.t.Errorf("frame %v before the connection closed", f)
			}
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			rc.t.Fatalf("connection not closed: %v", err)
		}
		if !errors.Is(err, io.EOF) {
			rc.t.Logf("connection ended with %v", err)
		}
		return
	}
}
