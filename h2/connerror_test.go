//lint:file-ignore SA1019 the tests drive the engine with golang.org/x/net/http2's own client on purpose: a second HTTP/2 implementation besides net/http's.

package h2_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/queue-dev/queue/h2"
	"golang.org/x/net/http2"
)

// lingerBound is how long after its GOAWAY a connection closed in error may
// stay open: the server's linger is a second, and the rest is room for a
// machine many times slower than a developer's, under the race detector.
// What the bound tells apart is a linger that the client's writes would
// make last: the client goes on writing for longer than lingerBound
// (junkUntil), so that such a linger would not end within it.
const lingerBound = 10 * time.Second

// tlsConfig returns a server configuration with a fresh self-signed
// certificate, offering h2.
func tlsConfig(t *testing.T) *tls.Config {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "h2 test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		NextProtos:   []string{"h2"},
	}
}

// startServerDone starts srv on plain TCP or, with cfg, TLS; done gets one
// value each time a ServeConn returns.
func startServerDone(t *testing.T, srv *h2.Server, cfg *tls.Config) (*testServer, <-chan time.Time) {
	done := make(chan time.Time, 4)
	ts := startServerFunc(t, srv, func(nc net.Conn) {
		defer func() { done <- time.Now() }()
		if cfg != nil {
			tc := tls.Server(nc, cfg)
			tc.SetDeadline(time.Now().Add(failAfter))
			if err := tc.Handshake(); err != nil {
				nc.Close()
				return
			}
			tc.SetDeadline(time.Time{})
			nc = tc
		}
		srv.ServeConn(nc, nil)
	})
	return ts, done
}

// dial connects a raw client to ts, under TLS when tlsOn is set.
func (ts *testServer) dial(t *testing.T, tlsOn bool) *rawClient {
	t.Helper()
	rc := ts.dialRaw(t)
	if tlsOn {
		tc := tls.Client(rc.nc, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
		if err := tc.Handshake(); err != nil {
			t.Fatalf("TLS handshake: %v", err)
		}
		if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
			t.Fatalf("ALPN %q, want h2", p)
		}
		rc.setConn(tc)
	}
	return rc
}

// junkUntil writes junk to nc from its own goroutine, 4 KiB every 5 ms,
// until a write fails or until, and sends when a write failed (the server
// closed the connection), or the zero time if none did: a client that goes
// on sending whatever the server answered. Its writes are bounded by until
// and nothing else.
func junkUntil(nc net.Conn, until time.Time) <-chan time.Time {
	failed := make(chan time.Time, 1)
	nc.SetWriteDeadline(until)
	go func() {
		junk := bytes.Repeat([]byte{0xff}, 4<<10)
		tick := time.NewTicker(5 * time.Millisecond) // a pace for the junk, not a synchronisation
		defer tick.Stop()
		for time.Now().Before(until) {
			if _, err := nc.Write(junk); err != nil {
				if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
					break // until came: the server never closed
				}
				failed <- time.Now()
				return
			}
			<-tick.C
		}
		failed <- time.Time{}
	}()
	return failed
}

// recvBy receives from ch until deadline; false if nothing came by then.
func recvBy[T any](ch <-chan T, deadline time.Time) (T, bool) {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case v := <-ch:
		return v, true
	case <-timer.C:
		var zero T
		return zero, false
	}
}

// TestConnErrorCloses: a connection error is answered with GOAWAY and its
// code, after which the client reads the end of the connection (not a
// reset), and the server closes the socket within its linger (lingerBound)
// however much the client goes on writing: the client's writes fail, and
// ServeConn returns. One case for each way a connection error is
// found: a frame header alone (a first frame that is not SETTINGS, whose
// payload never comes; a frame over MaxFrameSize, header only), a frame's
// payload (a header block HPACK cannot decode), and the glitch budget
// (empty DATA frames).
func TestConnErrorCloses(t *testing.T) {
	cases := []struct {
		name string
		code http2.ErrCode
		send func(rc *rawClient)
	}{
		{"first frame not SETTINGS", http2.ErrCodeProtocol, func(rc *rawClient) {
			// The preface, then a DATA frame's header and 10 of its 100
			// bytes: the rest never comes.
			rc.wbuf.WriteString(http2.ClientPreface)
			rc.wbuf.Write([]byte{0, 0, 100, byte(http2.FrameData), 0, 0, 0, 0, 1})
			rc.wbuf.Write(make([]byte, 10))
			rc.flush()
		}},
		{"frame over MaxFrameSize", http2.ErrCodeFrameSize, func(rc *rawClient) {
			rc.handshake()
			n := h2.MaxFrameSize + 1
			rc.wbuf.Write([]byte{byte(n >> 16), byte(n >> 8), byte(n), byte(http2.FramePing), 0, 0, 0, 0, 0})
			rc.flush()
		}},
		{"HPACK decoding error", http2.ErrCodeCompression, func(rc *rawClient) {
			rc.handshake()
			// An indexed field of index 0 (RFC 7541 section 6.1).
			rc.check(rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0x80}, EndStream: true, EndHeaders: true}))
			rc.flush()
		}},
		{"glitch budget", http2.ErrCodeEnhanceYourCalm, func(rc *rawClient) {
			rc.handshake()
			rc.batch(func() {
				rc.headers(1, false, request("POST", "/upload")...)
				for range h2.MaxGlitches + 1 {
					rc.check(rc.fr.WriteData(1, false, nil))
				}
			})
		}},
	}
	for _, tlsOn := range []bool{false, true} {
		transport := "tcp"
		if tlsOn {
			transport = "tls"
		}
		for _, tc := range cases {
			t.Run(transport+"/"+tc.name, func(t *testing.T) {
				t.Parallel() // each lingers a second; the package's other tests wait for the lot
				srv := newServer(func(w http.ResponseWriter, r *http.Request) {
					io.Copy(io.Discard, r.Body)
				})
				var cfg *tls.Config
				if tlsOn {
					cfg = tlsConfig(t)
				}
				ts, done := startServerDone(t, srv, cfg)
				rc := ts.dial(t, tlsOn)
				tc.send(rc)
				var ga *http2.GoAwayFrame
				for ga == nil {
					f, err := rc.fr.ReadFrame()
					if err != nil {
						t.Fatalf("read frame: %v (want GOAWAY %v)", err, tc.code)
					}
					ga, _ = f.(*http2.GoAwayFrame)
				}
				at := time.Now()
				if ga.ErrCode != tc.code {
					t.Errorf("GOAWAY %v, want %v", ga.ErrCode, tc.code)
				}
				// The client writes for longer than the bound: a server that
				// lingered while the client writes would not close within it.
				failed := junkUntil(rc.nc, at.Add(lingerBound+time.Second))
				// The server's side is shut after its GOAWAY: the client
				// reads the end of the connection, not a reset.
				for {
					f, err := rc.fr.ReadFrame()
					if err == nil {
						t.Logf("after the GOAWAY: %v", f)
						continue
					}
					if !errors.Is(err, io.EOF) {
						t.Errorf("after the GOAWAY the read ended with %v, want EOF", err)
					}
					break
				}
				if end, ok := recvBy(done, at.Add(lingerBound)); !ok {
					t.Errorf("ServeConn still running %v after the GOAWAY, want it returned within its linger", lingerBound)
				} else {
					t.Logf("ServeConn returned %v after the GOAWAY", end.Sub(at))
				}
				f, ok := recvBy(failed, at.Add(lingerBound+time.Second+failAfter))
				switch {
				case !ok:
					t.Errorf("the junk writer did not stop")
				case f.IsZero():
					t.Errorf("the client's writes never failed: the server did not close the connection")
				case f.Sub(at) > lingerBound:
					t.Errorf("the client's writes failed %v after the GOAWAY, want within %v", f.Sub(at), lingerBound)
				}
			})
		}
	}
}
