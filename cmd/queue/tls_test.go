package main

import (
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/queue-dev/queue/ingress"
	"github.com/quic-go/quic-go/http3"
)

// TestTLS: ALPN picks HTTP/2 or HTTP/1.1, X-Forwarded-Proto is https, and
// TLS below 1.2 is refused with a protocol_version alert (RFC 8446 section
// 6.2), the same client shaking hands once 1.2 is allowed.
func TestTLS(t *testing.T) {
	t.Parallel()
	q := startTLSQueue(t, hostPort(h1Upstream(t, http.HandlerFunc(echo))))
	for mode, want := range map[string]string{modeTLSH2: "HTTP/2.0", modeTLSH1: "HTTP/1.1"} {
		c, base := q.client(t, mode)
		res, body := get(t, c, base+"/", nil)
		if res.Proto != want {
			t.Errorf("%s: proto %s, want %s", mode, res.Proto, want)
		}
		if !strings.Contains(body, `"X-Forwarded-Proto": [
      "https"`) {
			t.Errorf("%s: upstream did not see X-Forwarded-Proto https: %s", mode, body)
		}
	}
	for _, tt := range []struct {
		max uint16
		ok  bool
	}{{tls.VersionTLS11, false}, {tls.VersionTLS12, true}} {
		conn, err := dialTLS(q.addr.TLS, &tls.Config{RootCAs: q.certPool, ServerName: "localhost",
			MinVersion: tls.VersionTLS10, MaxVersion: tt.max})
		if err == nil {
			conn.Close()
		}
		switch {
		case tt.ok && err != nil:
			t.Errorf("a client of TLS 1.0 to %s: %v, want a handshake", tls.VersionName(tt.max), err)
		case !tt.ok && err == nil:
			t.Errorf("a TLS 1.0 to %s handshake succeeded, want TLS 1.2 at least", tls.VersionName(tt.max))
		case !tt.ok && !strings.Contains(err.Error(), "protocol version"):
			t.Errorf("a client of TLS 1.0 to %s: %v, want a protocol_version alert", tls.VersionName(tt.max), err)
		}
	}
}

// dialTLS shakes hands with addr, bounded: a server that accepts and never
// answers fails the test instead of hanging it.
func dialTLS(addr string, cfg *tls.Config) (*tls.Conn, error) {
	return tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, cfg)
}

// peerCN returns the CommonName of the certificate res came over, or ""
// when it came over none.
func peerCN(res *http.Response) string {
	if res.TLS == nil || len(res.TLS.PeerCertificates) == 0 {
		return ""
	}
	return res.TLS.PeerCertificates[0].Subject.CommonName
}

// TestCertRotation: new handshakes, over TCP and over QUIC, get a
// rewritten pair, an open connection keeps working, and a broken pair is
// logged and ignored. How soon (the first handshake a second after the
// last check re-reads the files) is ingress's TestCertReloadOnHandshake's,
// on a clock of its own; here the wait is bounded for a loaded machine and
// the time it took is logged.
func TestCertRotation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeCert(t, dir, "one")
	up := h1Upstream(t, http.HandlerFunc(echo))
	q := startQueue(t, hostPort(up), "--tls-cert", filepath.Join(dir, "tls.crt"), "--tls-key", filepath.Join(dir, "tls.key"))

	insecure := &tls.Config{InsecureSkipVerify: true, ServerName: "localhost"}
	served := func() string {
		t.Helper()
		conn, err := dialTLS(q.addr.TLS, insecure)
		if err != nil {
			t.Fatalf("handshake: %v", err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	// waitFor polls new handshakes until the certificate is cn, within
	// 20 s: ten times the 2 s a re-read takes at most, for a loaded machine.
	waitFor := func(cn string) time.Duration {
		t.Helper()
		start := time.Now()
		for time.Since(start) < 20*time.Second {
			if served() == cn {
				return time.Since(start)
			}
			time.Sleep(20 * time.Millisecond) // polling new handshakes, bounded
		}
		t.Fatalf("still serving %q 20 s after writing %q", served(), cn)
		return 0
	}
	if got := served(); got != "one" {
		t.Fatalf("serving %q, want one", got)
	}
	// An HTTP/2 connection opened before the rotation.
	tr := &http.Transport{TLSClientConfig: insecure, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: clientTimeout}
	if res, _ := get(t, c, "https://"+q.addr.TLS+"/", nil); res.Proto != "HTTP/2.0" || peerCN(res) != "one" {
		t.Fatalf("before the rotation: %s, certificate %q; want HTTP/2.0 and one", res.Proto, peerCN(res))
	}

	writeCert(t, dir, "two")
	took := waitFor("two")
	// HTTP/3 on the same port's number serves the same pair: new QUIC
	// handshakes get the new certificate too.
	h3 := &http3.Transport{TLSClientConfig: insecure}
	defer h3.Close()
	if res, _ := get(t, &http.Client{Transport: h3, Timeout: clientTimeout}, "https://"+q.addr.TLS+"/", nil); res.Proto != "HTTP/3.0" ||
		peerCN(res) != "two" {
		t.Errorf("HTTP/3 after the rotation: %s, certificate %q; want HTTP/3.0 and two", res.Proto, peerCN(res))
	}
	t.Logf("new certificate served %v after the write", took)
	res, _ := get(t, c, "https://"+q.addr.TLS+"/", nil)
	if res.StatusCode != 200 || peerCN(res) != "one" {
		t.Errorf("open connection: status %d, certificate %q; want 200 on the old connection", res.StatusCode, peerCN(res))
	}

	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Only a handshake re-reads the files: keep handshaking until the
	// broken pair is seen and logged.
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(q.logs.String(), "new certificate pair rejected") {
		if time.Now().After(deadline) {
			t.Fatal("a broken pair was not logged within 20 s")
		}
		if got := served(); got != "two" {
			t.Fatalf("with a broken pair written: serving %q, want the last good one (two)", got)
		}
		time.Sleep(20 * time.Millisecond) // polling the log, bounded
	}
	if got := served(); got != "two" {
		t.Errorf("after a broken pair: serving %q, want the last good one (two)", got)
	}
}

// TestKnativeTLSFloor: in Knative mode the TLS floor is 1.3 when
// QUEUE_PROXY_TLS_MIN_VERSION is unset, as Knative's queue-proxy has it, and
// 1.2 under a ceiling of 1.2; standalone it stays 1.2. Each case shakes
// hands with a client that speaks TLS 1.2 only and with one that speaks 1.3.
func TestKnativeTLSFloor(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pool := writeCert(t, dir, "knative")
	certs, err := ingress.NewCertReloader(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		env      map[string]string
		v12, v13 bool // a TLS 1.2-only client, a TLS 1.3-only client gets in
	}{
		{name: "standalone", env: map[string]string{}, v12: true, v13: true},
		{name: "Knative mode", env: map[string]string{"SERVING_REVISION": "r"}, v13: true},
		{name: "Knative mode, floor 1.2", env: map[string]string{"SERVING_REVISION": "r", "QUEUE_PROXY_TLS_MIN_VERSION": "1.2"}, v12: true, v13: true},
		{name: "Knative mode, ceiling 1.2", env: map[string]string{"SERVING_REVISION": "r", "QUEUE_PROXY_TLS_MAX_VERSION": "1.2"}, v12: true},
		{name: "standalone, floor 1.3", env: map[string]string{"QUEUE_PROXY_TLS_MIN_VERSION": "1.3"}, v13: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.env["USER_PORT"] = "8080"
			c, err := parseConfig(nil, env(tt.env))
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range []struct {
				version uint16
				want    bool
			}{{tls.VersionTLS12, tt.v12}, {tls.VersionTLS13, tt.v13}} {
				cc, sc := net.Pipe()
				// Bounds both ends' handshakes: a deadlock fails the test.
				cc.SetDeadline(time.Now().Add(10 * time.Second))
				sc.SetDeadline(time.Now().Add(10 * time.Second))
				srv := tls.Server(sc, certs.ServerTLSConfig(c.tlsOptions()))
				done := make(chan error, 1)
				go func() { done <- srv.Handshake(); sc.Close() }()
				cli := tls.Client(cc, &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: v.version, MaxVersion: v.version})
				err := cli.Handshake()
				cc.Close()
				<-done
				if errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatalf("a %s-only client: handshake %v, want it to end either way within 10 s", tls.VersionName(v.version), err)
				}
				if got := err == nil; got != v.want {
					t.Errorf("a %s-only client: handshake error %v, want success %v", tls.VersionName(v.version), err, v.want)
				}
			}
		})
	}
}
