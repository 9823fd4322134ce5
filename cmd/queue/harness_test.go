//lint:file-ignore SA1019 the tests drive queue with golang.org/x/net/http2's own client on purpose: a second HTTP/2 implementation besides net/http's.

package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"
	"golang.org/x/net/http2"

	"github.com/queue-dev/queue/internal/testnet"
)

// TestMain lets the test binary act as the queue command itself when
// QUEUE_TEST_MAIN=1, so exit codes and signals are tested on a real process
// without a separate build.
func TestMain(m *testing.M) {
	if os.Getenv("QUEUE_TEST_MAIN") == "1" {
		os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// queueCmd returns a command that runs queue with args in a child process.
func queueCmd(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "QUEUE_TEST_MAIN=1")
	return cmd
}

// childTimeout bounds a child process that is expected to exit by itself
// (a configuration error, --version, a nested go command's short run).
const childTimeout = time.Minute

// runCmd runs cmd to its end and returns Wait's error; a child still
// running after within is killed and the test fails, rather than hanging
// until go test's own timeout.
func runCmd(t *testing.T, cmd *exec.Cmd, within time.Duration) error {
	t.Helper()
	cmd.WaitDelay = time.Second // once killed, do not wait on pipes a grandchild holds
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Args, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(within):
		cmd.Process.Kill()
		<-done
		t.Fatalf("%s still running after %v", cmd.Args, within)
		return nil
	}
}

// clientTimeout bounds every exchange of the clients the harness makes (a
// request, its response and its body): a regression that leaves a request
// hanging fails the test with the client's timeout error instead of
// hanging until go test's own timeout. A test that wants a shorter bound
// sets its own.
const clientTimeout = 30 * time.Second

// testQueue is a queue serving in this process on loopback ports.
type testQueue struct {
	app  *app
	addr addrs
	logs *testnet.SyncBuffer
	// cert is the CA that signed the serving certificate (TLS only).
	certPool *x509.CertPool
}

// startQueue starts queue in front of upstream (host:port) with extra
// flags; every port is 127.0.0.1:0. It stops when the test ends.
func startQueue(t *testing.T, upstream string, args ...string) *testQueue {
	t.Helper()
	return startQueueEnv(t, nil, upstream, args...)
}

// startQueueEnv is startQueue with an environment for the configuration.
func startQueueEnv(t *testing.T, env map[string]string, upstream string, args ...string) *testQueue {
	t.Helper()
	return startQueueWith(t, env, nil, upstream, args...)
}

// startQueueWith is startQueue with an environment and a function that may
// change the parsed Config (settings that are not flags, such as
// ReadHeaderTimeout) before queue starts.
func startQueueWith(t *testing.T, env map[string]string, mutate func(*Config), upstream string, args ...string) *testQueue {
	t.Helper()
	base := []string{
		"--upstream", upstream,
		"--listen", "127.0.0.1:0",
		"--admin-listen", "127.0.0.1:0",
		"--stats-listen", "127.0.0.1:0",
		"--metrics-listen", "127.0.0.1:0",
		"--drain-quiet-period", "0s",
		"--drain-timeout", "5s",
	}
	cfg, err := parseConfig(append(base, args...), func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("parseConfig: %v", err)
	}
	// Not a flag: --tls-listen without a certificate is a configuration
	// error, and most tests have none.
	cfg.TLSListen = "127.0.0.1:0"
	if mutate != nil {
		mutate(&cfg)
	}
	logs := &testnet.SyncBuffer{}
	logger := newLogger(Config{LogFormat: "json", LogLevel: "debug"}, logs)
	a, err := newApp(cfg, logger)
	if err != nil {
		t.Fatalf("newApp: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		// --drain-timeout bounds the drain; this bounds a drain that
		// would not end all the same.
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(time.Minute):
			t.Errorf("serve did not return within a minute of the cancel")
		}
		if t.Failed() {
			t.Logf("queue logs:\n%s", logs.String())
		}
	})
	return &testQueue{app: a, addr: a.addrs(), logs: logs}
}

// h1Upstream starts an HTTP/1.1 upstream.
func h1Upstream(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s
}

// holdUpstream starts an HTTP/1.1 upstream that sends each request's
// path to entered (buffered n) and answers "ok", holding a request for
// /hold until a token comes on tokens (nil: never), release is called, or
// the request is cancelled. Register release's cleanup after queue's
// (t.Cleanup), so that it runs first.
func holdUpstream(t *testing.T, n int, tokens <-chan struct{}) (up *httptest.Server, entered <-chan string, release func()) {
	t.Helper()
	ch := make(chan string, n)
	released, open := testnet.Releaser(t)
	up = h1Upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ch <- r.URL.Path
		if r.URL.Path == "/hold" {
			select {
			case <-tokens:
			case <-released:
			case <-r.Context().Done():
			}
		}
		io.WriteString(w, "ok")
	}))
	return up, ch, open
}

// h2cUpstream starts an upstream that speaks only HTTP/2 with prior
// knowledge.
func h2cUpstream(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	s := httptest.NewUnstartedServer(h)
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	s.Config.Protocols = &p
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func hostPort(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }

// Client modes: how a test client talks to queue.
const (
	modeH1    = "h1"     // HTTP/1.1 on the serving port
	modeH2C   = "h2c"    // HTTP/2 with prior knowledge on the serving port
	modeTLSH2 = "tls-h2" // HTTP/2 over TLS (ALPN h2)
	modeTLSH1 = "tls-h1" // HTTP/1.1 over TLS (ALPN http/1.1)
	modeH3    = "h3"     // HTTP/3 on the TLS port's number over UDP
)

// client returns an HTTP client for mode and the base URL to use with it.
func (q *testQueue) client(t *testing.T, mode string) (*http.Client, string) {
	t.Helper()
	switch mode {
	case modeH1:
		tr := &http.Transport{DisableCompression: true}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, Timeout: clientTimeout}, "http://" + q.addr.Listen
	case modeH2C:
		tr := &http2.Transport{
			AllowHTTP:          true,
			DisableCompression: true,
			DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, network, addr)
			},
		}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, Timeout: clientTimeout}, "http://" + q.addr.Listen
	case modeTLSH2, modeTLSH1:
		if q.certPool == nil {
			t.Fatalf("mode %s needs startTLSQueue", mode)
		}
		cfg := &tls.Config{RootCAs: q.certPool, ServerName: "localhost"}
		tr := &http.Transport{TLSClientConfig: cfg, DisableCompression: true, ForceAttemptHTTP2: mode == modeTLSH2}
		if mode == modeTLSH1 {
			cfg.NextProtos = []string{"http/1.1"}
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, Timeout: clientTimeout}, "https://" + q.addr.TLS
	case modeH3:
		if q.certPool == nil {
			t.Fatalf("mode %s needs startTLSQueue", mode)
		}
		tr := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: q.certPool, ServerName: "localhost"}, DisableCompression: true}
		t.Cleanup(func() { tr.Close() })
		return &http.Client{Transport: tr, Timeout: clientTimeout}, "https://" + q.addr.TLS
	}
	t.Fatalf("unknown mode %q", mode)
	return nil, ""
}

// startTLSQueue starts queue with a fresh certificate for "localhost".
func startTLSQueue(t *testing.T, upstream string, args ...string) *testQueue {
	t.Helper()
	dir := t.TempDir()
	pool := writeCert(t, dir, "one")
	q := startQueue(t, upstream, append([]string{
		"--tls-cert", filepath.Join(dir, "tls.crt"), "--tls-key", filepath.Join(dir, "tls.key"),
	}, args...)...)
	q.certPool = pool
	return q
}

// writeCert writes a self-signed certificate for localhost and 127.0.0.1
// with the given CommonName to dir/tls.crt and dir/tls.key, and returns a
// pool that trusts it.
func writeCert(t *testing.T, dir, cn string) *x509.CertPool {
	t.Helper()
	certPEM, keyPEM := makeCert(t, cn)
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(certPEM) {
		t.Fatal("the certificate just made does not parse")
	}
	return pool
}

func makeCert(t *testing.T, cn string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cn},
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// get sends a GET and returns the response with its body read (see do).
func get(t *testing.T, c *http.Client, url string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	return do(t, c, req)
}

// getAsync sends GET url through c on a goroutine of its own and returns a
// channel that gets the outcome: nil once the body has been read to its
// end, or what failed. Unlike get, it may be left running while the test
// does other things (a request held at the upstream).
func getAsync(c *http.Client, url string) <-chan error {
	done := make(chan error, 1)
	go func() {
		res, err := c.Get(url)
		if err == nil {
			_, err = io.ReadAll(res.Body)
			res.Body.Close()
		}
		done <- err
	}()
	return done
}

// do sends req through c and returns the response with its body read. The
// exchange is bounded by clientTimeout whatever c is (http.DefaultClient
// has no timeout), on top of any deadline req already has. Like get, it
// fails the test with t.Fatalf: call it from the test's goroutine only.
func do(t *testing.T, c *http.Client, req *http.Request) (*http.Response, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(req.Context(), clientTimeout)
	defer cancel()
	req = req.WithContext(ctx)
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("read body of %s: %v", req.URL, err)
	}
	return res, string(b)
}
