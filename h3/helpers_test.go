package h3_test

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/qpack"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/quicvarint"

	"github.com/queue-dev/queue/h3"
)

func TestMain(m *testing.M) {
	// The tests wrap some UDP sockets (udpConn): quic-go would warn that
	// it cannot size their buffers.
	os.Setenv("QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING", "true")
	os.Exit(m.Run())
}

// failAfter bounds every wait in these tests: the failure bound only,
// never waited out by a passing test.
const failAfter = 10 * time.Second

// HTTP/3 and QPACK codes the tests check (RFC 9114 section 8.1, RFC 9204
// section 6).
const (
	codeExcessiveLoad    = 0x107
	codeRequestCancelled = 0x10c
	codeDecompression    = 0x200
)

// okHandler answers every request 200 "ok".
var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	io.WriteString(w, "ok")
})

// testCert is a self-signed ECDSA certificate for 127.0.0.1, made in the
// test.
type testCert struct {
	cert tls.Certificate
	pool *x509.CertPool
	der  []byte
}

// newCert makes a certificate; padNames DNS names make it larger (a
// server flight over the anti-amplification limit).
func newCert(t testing.TB, padNames int) *testCert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		BasicConstraintsValid: true,
	}
	for i := range padNames {
		tmpl.DNSNames = append(tmpl.DNSNames, fmt.Sprintf("padding-name-%05d.h3.invalid", i))
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return &testCert{
		cert: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf},
		pool: pool,
		der:  der,
	}
}

func (c *testCert) serverConfig() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{c.cert}}
}

func (c *testCert) clientConfig() *tls.Config {
	return &tls.Config{RootCAs: c.pool, ServerName: "127.0.0.1", NextProtos: []string{"h3"}}
}

// udpAddr is ts's address, resolved.
func (ts *testServer) udpAddr(t testing.TB) *net.UDPAddr {
	t.Helper()
	ua, err := net.ResolveUDPAddr("udp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	return ua
}

// testServer is an h3.Server serving on a loopback UDP socket.
type testServer struct {
	srv    *h3.Server
	addr   string
	cert   *testCert
	pc     net.PacketConn
	served chan struct{} // closed when Serve returned
	err    error         // what Serve returned, once served is closed
}

func listenUDP(t testing.TB, addr string) net.PacketConn {
	t.Helper()
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	t.Cleanup(func() { pc.Close() })
	return pc
}

// startServer serves srv on a new socket with a new certificate.
func startServer(t testing.TB, srv *h3.Server) *testServer {
	t.Helper()
	return serveOn(t, srv, listenUDP(t, "127.0.0.1:0"), newCert(t, 0))
}

// serveOn serves srv on pc with cert; the server shuts down when the test
// ends (after the test's later cleanups: clients, handler releases).
func serveOn(t testing.TB, srv *h3.Server, pc net.PacketConn, cert *testCert) *testServer {
	t.Helper()
	ts := &testServer{srv: srv, addr: pc.LocalAddr().String(), cert: cert, pc: pc, served: make(chan struct{})}
	go func() {
		ts.err = srv.Serve(pc, cert.serverConfig())
		close(ts.served)
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		select {
		case <-ts.served:
		case <-time.After(failAfter):
			t.Errorf("Serve did not return after Shutdown")
		}
	})
	return ts
}

// client is a raw HTTP/3 client: a QUIC connection on which the test
// writes frames as it likes.
type client struct {
	t  testing.TB
	qc *quic.Conn
}

// dial connects to ts with quic.DialAddr and opens the control stream.
func (ts *testServer) dial(t testing.TB, conf *quic.Config) *client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	defer cancel()
	qc, err := quic.DialAddr(ctx, ts.addr, ts.cert.clientConfig(), conf)
	if err != nil {
		t.Fatalf("dial %s: %v", ts.addr, err)
	}
	t.Cleanup(func() { qc.CloseWithError(0, "") })
	c := &client{t: t, qc: qc}
	c.openControl()
	return c
}

// dialVia connects to addr over its own quic.Transport on pc (a wrapper
// that counts or drops datagrams).
// It may run on any goroutine: it does not fail the test.
func dialVia(ctx context.Context, t testing.TB, pc net.PacketConn, addr *net.UDPAddr, tc *tls.Config, conf *quic.Config) (*quic.Conn, error) {
	tr := &quic.Transport{Conn: pc}
	t.Cleanup(func() { tr.Close() })
	qc, err := tr.Dial(ctx, addr, tc, conf)
	if err == nil {
		t.Cleanup(func() { qc.CloseWithError(0, "") })
	}
	return qc, err
}

// openControl opens the client's control stream: its type, and an empty
// SETTINGS frame.
func (c *client) openControl() {
	c.t.Helper()
	s, err := c.qc.OpenUniStream()
	if err != nil {
		c.t.Fatalf("open control stream: %v", err)
	}
	if _, err := s.Write(appendFrame([]byte{0x00}, 0x04, nil)); err != nil {
		c.t.Fatalf("write control stream: %v", err)
	}
}

// open opens a request stream, waiting for stream credit within failAfter.
func (c *client) open() *quic.Stream {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	defer cancel()
	s, err := c.qc.OpenStreamSync(ctx)
	if err != nil {
		c.t.Fatalf("open stream: %v", err)
	}
	return s
}

// request opens a stream, writes frames and the FIN, and reads the
// response.
func (c *client) request(frames []byte) (*response, error) {
	c.t.Helper()
	s := c.open()
	s.SetWriteDeadline(time.Now().Add(failAfter))
	if _, err := s.Write(frames); err != nil {
		return nil, err
	}
	s.Close()
	return readResponse(s)
}

// get sends GET path and fails the test unless a response comes.
func (c *client) get(path string) *response {
	c.t.Helper()
	res, err := c.request(headersFrame(getFields(path)))
	if err != nil {
		c.t.Fatalf("GET %s: %v", path, err)
	}
	return res
}

// appendFrame appends an HTTP/3 frame: varint type, varint length,
// payload.
func appendFrame(b []byte, typ uint64, payload []byte) []byte {
	b = quicvarint.Append(b, typ)
	b = quicvarint.Append(b, uint64(len(payload)))
	return append(b, payload...)
}

func headersFrame(f *fields) []byte { return appendFrame(nil, 0x01, f.b) }

// qpackInt appends a prefixed integer (RFC 7541 section 5.1): first holds
// the bits above the n-bit prefix.
func qpackInt(b []byte, first byte, n uint, v uint64) []byte {
	max := uint64(1)<<n - 1
	if v < max {
		return append(b, first|byte(v))
	}
	b = append(b, first|byte(max))
	v -= max
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// fields encodes a QPACK field section without the dynamic table.
type fields struct{ b []byte }

// section starts a field section: Required Insert Count 0, Base 0.
func section() *fields { return &fields{b: []byte{0x00, 0x00}} }

// indexed appends an indexed field line of the static table (17
// ":method GET", 20 ":method POST", 23 ":scheme https", 1 ":path /").
func (f *fields) indexed(i uint64) *fields {
	f.b = qpackInt(f.b, 0xc0, 6, i)
	return f
}

// nameRef appends a literal field line whose name is static entry i.
func (f *fields) nameRef(i uint64, value string) *fields {
	f.b = qpackInt(f.b, 0x50, 4, i)
	f.b = qpackInt(f.b, 0x00, 7, uint64(len(value)))
	f.b = append(f.b, value...)
	return f
}

// literal appends a literal field line with a literal name.
func (f *fields) literal(name, value string) *fields {
	f.b = qpackInt(f.b, 0x20, 3, uint64(len(name)))
	f.b = append(f.b, name...)
	f.b = qpackInt(f.b, 0x00, 7, uint64(len(value)))
	f.b = append(f.b, value...)
	return f
}

// requestFields starts a request's section: :method (static entry),
// :scheme https, :path and :authority.
func requestFields(method uint64, path string) *fields {
	f := section().indexed(method).indexed(23)
	if path == "/" {
		f.indexed(1)
	} else {
		f.nameRef(1, path)
	}
	return f.nameRef(0, "127.0.0.1")
}

func getFields(path string) *fields { return requestFields(17, path) }

// response is a response read frame by frame.
type response struct {
	status int
	fields []qpack.HeaderField
	body   []byte
}

// readResponse reads a response to the stream's end, within failAfter.
func readResponse(s *quic.Stream) (*response, error) {
	r := newResponseReader(s)
	return r.res, r.read(-1)
}

// responseReader reads a response frame by frame, as far as the test
// wants.
type responseReader struct {
	br  *bufio.Reader
	res *response
}

func newResponseReader(s *quic.Stream) *responseReader {
	s.SetReadDeadline(time.Now().Add(failAfter))
	return &responseReader{br: bufio.NewReader(s), res: &response{}}
}

// read reads frames until the body holds at least minBody bytes, or to
// the stream's end when minBody is negative.
func (r *responseReader) read(minBody int) error {
	res := r.res
	for minBody < 0 || len(res.body) < minBody {
		typ, err := quicvarint.Read(r.br)
		if err == io.EOF && res.status != 0 && minBody < 0 {
			return nil
		}
		if err != nil {
			return err
		}
		l, err := quicvarint.Read(r.br)
		if err != nil {
			return err
		}
		if l > 64<<20 {
			return fmt.Errorf("frame 0x%x of %d bytes", typ, l)
		}
		p := make([]byte, l)
		if _, err := io.ReadFull(r.br, p); err != nil {
			return err
		}
		switch typ {
		case 0x00:
			res.body = append(res.body, p...)
		case 0x01:
			if res.status != 0 {
				continue // trailers
			}
			dec := qpack.NewDecoder().Decode(p)
			for {
				hf, err := dec()
				if err == io.EOF {
					break
				}
				if err != nil {
					return fmt.Errorf("QPACK: %w", err)
				}
				if hf.Name == ":status" {
					fmt.Sscan(hf.Value, &res.status)
				}
				res.fields = append(res.fields, hf)
			}
			if res.status == 0 {
				return errors.New("response without :status")
			}
		}
	}
	return nil
}

// streamCode returns the code of a stream reset err carries.
func streamCode(err error) (code quic.StreamErrorCode, remote, ok bool) {
	var se *quic.StreamError
	if errors.As(err, &se) {
		return se.ErrorCode, se.Remote, true
	}
	return 0, false, false
}

// readUntilReset reads s until it fails (within failAfter) and returns the
// error.
func readUntilReset(t testing.TB, s *quic.Stream) error {
	t.Helper()
	s.SetReadDeadline(time.Now().Add(failAfter))
	buf := make([]byte, 64<<10)
	for range 100000 {
		if _, err := s.Read(buf); err != nil {
			return err
		}
	}
	t.Fatalf("stream %d: still readable", s.StreamID())
	return nil
}

// expectReset checks that reading s ends in a reset by the server with
// code.
func expectReset(t testing.TB, s *quic.Stream, code quic.StreamErrorCode) {
	t.Helper()
	err := readUntilReset(t, s)
	got, remote, ok := streamCode(err)
	if !ok || !remote || got != code {
		t.Fatalf("stream %d: read error %v, want a reset by the server with code 0x%x", s.StreamID(), err, uint64(code))
	}
}

// connClosed waits within failAfter for qc's end and returns its cause.
func connClosed(t testing.TB, qc *quic.Conn) error {
	t.Helper()
	select {
	case <-qc.Context().Done():
		return context.Cause(qc.Context())
	case <-time.After(failAfter):
		t.Fatalf("connection still open after %v", failAfter)
		return nil
	}
}

// expectAppClose checks that err is the server's CONNECTION_CLOSE with an
// application error code.
func expectAppClose(t testing.TB, err error, code quic.ApplicationErrorCode) {
	t.Helper()
	var ae *quic.ApplicationError
	if !errors.As(err, &ae) || !ae.Remote || ae.ErrorCode != code {
		t.Fatalf("connection ended with %v, want the server's close with application error 0x%x", err, uint64(code))
	}
}

// waitFor polls cond until it holds, within failAfter.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(failAfter)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond) // a poll interval, bounded by the deadline
	}
}

// udpConn wraps a UDP socket for the tests: it counts datagrams and bytes
// both ways, records the first byte of each datagram received (and when
// the first came), drops written datagrams past dropAfter (0: none), and
// once cut drops every write and closes the socket, so that the endpoint
// on it vanishes without a word (no CONNECTION_CLOSE). With peers set
// (a server's socket), it records per peer address when its first
// datagram was read, and when and what was first written to it.
type udpConn struct {
	net.PacketConn
	dropAfter int64

	written, wroteBytes, readBytes atomic.Int64
	cutOff                         atomic.Bool

	mu      sync.Mutex
	first   []byte    // first byte of each datagram received
	firstAt time.Time // when the first came
	got     chan struct{}
	peers   map[string]*peerRecord
}

// peerRecord is what a server's udpConn saw of one peer address.
type peerRecord struct {
	read, wrote time.Time // the first datagram from it, to it
	wroteFirst  byte      // the first byte of the first datagram to it
}

func newUDPConn(t testing.TB, dropAfter int64) *udpConn {
	return &udpConn{PacketConn: listenUDP(t, "127.0.0.1:0"), dropAfter: dropAfter, got: make(chan struct{})}
}

// peerLocked returns addr's record, made if need be.
func (c *udpConn) peerLocked(addr net.Addr) *peerRecord {
	r := c.peers[addr.String()]
	if r == nil {
		r = &peerRecord{}
		c.peers[addr.String()] = r
	}
	return r
}

// peer returns a copy of what c saw of addr.
func (c *udpConn) peer(addr string) (peerRecord, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.peers[addr]
	if !ok {
		return peerRecord{}, false
	}
	return *r, true
}

func (c *udpConn) ReadFrom(p []byte) (int, net.Addr, error) {
	n, addr, err := c.PacketConn.ReadFrom(p)
	if n > 0 {
		now := time.Now()
		c.readBytes.Add(int64(n))
		c.mu.Lock()
		if len(c.first) == 0 {
			c.firstAt = now
			close(c.got)
		}
		c.first = append(c.first, p[0])
		if c.peers != nil {
			if r := c.peerLocked(addr); r.read.IsZero() {
				r.read = now
			}
		}
		c.mu.Unlock()
	}
	return n, addr, err
}

func (c *udpConn) WriteTo(p []byte, addr net.Addr) (int, error) {
	if c.cutOff.Load() {
		return len(p), nil
	}
	if k := c.written.Add(1); c.dropAfter > 0 && k > c.dropAfter {
		return len(p), nil
	}
	c.wroteBytes.Add(int64(len(p)))
	c.mu.Lock()
	if c.peers != nil {
		if r := c.peerLocked(addr); r.wrote.IsZero() && len(p) > 0 {
			r.wrote, r.wroteFirst = time.Now(), p[0]
		}
	}
	c.mu.Unlock()
	return c.PacketConn.WriteTo(p, addr)
}

// cut makes the endpoint on c vanish: its writes go nowhere and its socket
// closes.
func (c *udpConn) cut() {
	c.cutOff.Store(true)
	c.PacketConn.Close()
}

// firstBytes returns the first byte of each datagram received so far, and
// when the first came.
func (c *udpConn) firstBytes() ([]byte, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]byte(nil), c.first...), c.firstAt
}

// isRetry reports whether a datagram's first byte is a QUIC v1 Retry's
// (long header, type 3).
func isRetry(b byte) bool { return b&0xf0 == 0xf0 }
