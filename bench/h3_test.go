package bench

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/queue-dev/queue/proxy"
)

// BenchmarkProxyH3 is an HTTP/3 client -> queue (the request path as
// cmd/queue composes it, served by the ingress's HTTP/3 engine) -> the raw
// HTTP/1.1 upstream, GET /1k. The client is bench/h3load in a child
// process, so that what this process allocates is queue's alone (and the
// upstream's, which allocates nothing): allocs/op and B/op are read from
// runtime.MemStats around the load (allocs/req, B/req); an op is one
// request.
//
//	1KiB/c1s16   one connection, 16 requests in flight
//
// Under go test -cpuprofile the profile is queue's (and the upstream's):
// where an HTTP/3 request's CPU goes.
func BenchmarkProxyH3(b *testing.B) {
	load := buildH3Load(b)
	up := newRawUpstream(b, h2BodyLen)
	addr := newQueueH3(b, up)
	b.Run("1KiB/c1s16", func(b *testing.B) {
		run := func(n int) {
			out, err := exec.Command(load, "-url", "https://"+addr+"/1k", "-c", "1", "-s", "16",
				"-n", strconv.Itoa(n), "-d", "120s").CombinedOutput()
			if err != nil || !strings.Contains(string(out), "errors=0") {
				b.Fatalf("h3load: %v: %s", err, out)
			}
		}
		run(200) // warms the pools, the workers and the upstream connections
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		b.ResetTimer()
		run(b.N)
		b.StopTimer()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(b.N), "allocs/req")
		b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N), "B/req")
	})
}

// buildH3Load builds bench/h3load once for the benchmark.
func buildH3Load(b *testing.B) string {
	b.Helper()
	bin := filepath.Join(b.TempDir(), "h3load")
	if out, err := exec.Command("go", "build", "-o", bin, "./h3load").CombinedOutput(); err != nil {
		b.Fatalf("building h3load: %v: %s", err, out)
	}
	return bin
}

// newQueueH3 starts queue in front of the HTTP/1.1 upstream at up, serving
// HTTP/3 on a UDP socket with a self-signed certificate, and returns the
// socket's address.
func newQueueH3(b *testing.B, up string) string {
	b.Helper()
	srv := newIngress(b, up, proxy.HTTP1)
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.ServeHTTP3(pc, selfSigned(b))
	}()
	b.Cleanup(func() {
		srv.Close()
		<-done
	})
	return pc.LocalAddr().String()
}

// selfSigned returns a TLS configuration with a fresh certificate for
// 127.0.0.1.
func selfSigned(b *testing.B) *tls.Config {
	b.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		b.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
}
