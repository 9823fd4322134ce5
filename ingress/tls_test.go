package ingress

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queue-dev/queue/internal/testnet"
)

// writePair writes a self-signed pair named cn to dir/tls.crt and
// dir/tls.key, or, with cn "garbage", a certificate file that does not load.
func writePair(t *testing.T, dir, cn string) {
	t.Helper()
	certPEM, keyPEM := []byte("garbage"), []byte("garbage")
	if cn != "garbage" {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(1),
			Subject:      pkix.Name{CommonName: cn},
			DNSNames:     []string{"localhost"},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
		keyPEM = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
}

// fakeClock is a clock the test moves by hand.
type fakeClock struct {
	t0 time.Time
	d  atomic.Int64
}

func (c *fakeClock) now() time.Time      { return c.t0.Add(time.Duration(c.d.Load())) }
func (c *fakeClock) set(d time.Duration) { c.d.Store(int64(d)) }

func newTestReloader(t *testing.T) (dir string, c *CertReloader, clock *fakeClock, logs *testnet.SyncBuffer) {
	t.Helper()
	dir = t.TempDir()
	writePair(t, dir, "one")
	clock = &fakeClock{t0: time.Now()}
	logs = &testnet.SyncBuffer{}
	c, err := newCertReloader(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"),
		slog.New(slog.NewTextHandler(logs, nil)), clock.now)
	if err != nil {
		t.Fatal(err)
	}
	return dir, c, clock, logs
}

// handshake runs a TLS handshake against c's configuration over a pipe and
// returns the common name of the certificate served.
func handshake(t *testing.T, c *CertReloader) string {
	t.Helper()
	cc, sc := net.Pipe()
	// A handshake that stalls fails at the deadline rather than hanging.
	deadline := time.Now().Add(10 * time.Second)
	cc.SetDeadline(deadline)
	sc.SetDeadline(deadline)
	srv := tls.Server(sc, c.TLSConfig(0))
	done := make(chan error, 1)
	go func() { done <- srv.Handshake(); sc.Close() }()
	cli := tls.Client(cc, &tls.Config{InsecureSkipVerify: true, ServerName: "localhost"})
	err := cli.Handshake()
	cc.Close()
	if serr := <-done; err == nil {
		err = serr
	}
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	return cli.ConnectionState().PeerCertificates[0].Subject.CommonName
}

// TestCertReloadOnHandshake: the files are re-read by the first handshake
// certCheckPeriod after the last check and not before, a pair that does not
// load is kept out and logged once, and nothing is read between
// handshakes.
func TestCertReloadOnHandshake(t *testing.T) {
	t.Parallel()
	dir, c, clock, logs := newTestReloader(t)
	steps := []struct {
		name         string
		at           time.Duration
		write        string // a pair to write before the handshake, "garbage", or none
		want         string
		wantRejected int // "rejected" log lines so far
	}{
		{name: "the first pair", at: 0, want: "one"},
		{name: "a rotation before the period is not seen", at: 500 * time.Millisecond, write: "two", want: "one"},
		{name: "nor just before the period", at: certCheckPeriod - 1, want: "one"},
		{name: "the first handshake after the period reads it", at: certCheckPeriod, want: "two"},
		{name: "a broken pair before the next period", at: 1500 * time.Millisecond, write: "garbage", want: "two"},
		{name: "a broken pair is kept out and logged", at: 2 * certCheckPeriod, want: "two", wantRejected: 1},
		{name: "and logged once", at: 10 * certCheckPeriod, want: "two", wantRejected: 1},
		{name: "a good pair after a broken one", at: 10*certCheckPeriod + 1, write: "three", want: "two", wantRejected: 1},
		{name: "is read an hour later", at: time.Hour, want: "three", wantRejected: 1},
	}
	rejected := 0 // as the step before left it
	for _, st := range steps {
		if st.write != "" {
			writePair(t, dir, st.write)
		}
		clock.set(st.at)
		// Nothing is read between handshakes: a broken pair is not seen,
		// and not logged, before the next one.
		if got := strings.Count(logs.String(), "new certificate pair rejected"); got != rejected {
			t.Errorf("%s: %d rejections logged before the handshake, want %d", st.name, got, rejected)
		}
		rejected = st.wantRejected
		if got := handshake(t, c); got != st.want {
			t.Errorf("%s: served %q at %v, want %q", st.name, got, st.at, st.want)
		}
		if got := strings.Count(logs.String(), "new certificate pair rejected"); got != st.wantRejected {
			t.Errorf("%s: %d rejections logged, want %d", st.name, got, st.wantRejected)
		}
	}
}

// TestCertReloadConcurrent: handshakes racing after the period each get a
// good pair, the new one is switched to once, every handshake after them
// gets it, and the next check waits for a whole period again.
func TestCertReloadConcurrent(t *testing.T) {
	t.Parallel()
	dir, c, clock, logs := newTestReloader(t)
	writePair(t, dir, "two")
	clock.set(certCheckPeriod)
	const n = 16
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			cert, err := c.GetCertificate(nil)
			if err != nil || cert == nil {
				t.Errorf("GetCertificate = %v, %v", cert, err)
				return
			}
			if cn := cert.Leaf.Subject.CommonName; cn != "one" && cn != "two" {
				t.Errorf("served %q, want one or two", cn)
			}
		})
	}
	wg.Wait()
	if got, want := strings.Count(logs.String(), "certificate reloaded"), 1; got != want {
		t.Errorf("%d reloads logged, want %d", got, want)
	}
	if got, want := handshake(t, c), "two"; got != want {
		t.Errorf("served %q after the racing handshakes, want %q", got, want)
	}
	writePair(t, dir, "three")
	clock.set(2*certCheckPeriod - 1)
	if got, want := handshake(t, c), "two"; got != want {
		t.Errorf("served %q before the next period, want %q", got, want)
	}
	clock.set(2 * certCheckPeriod)
	if got, want := handshake(t, c), "three"; got != want {
		t.Errorf("served %q a period after the racing handshakes, want %q", got, want)
	}
}
