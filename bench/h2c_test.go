package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/queue-dev/queue/proxy"
)

// h2cUpstreamEnv makes the test binary an h2c upstream (TestMain): the
// benchmarks below run it as a process of its own, so that its
// allocations are not in theirs.
const h2cUpstreamEnv = "QUEUE_BENCH_H2C_UPSTREAM"

func TestMain(m *testing.M) {
	if os.Getenv(h2cUpstreamEnv) == "1" {
		serveH2CUpstream()
		return
	}
	os.Exit(m.Run())
}

// serveH2CUpstream is net/http's server with h2c prior knowledge as its
// only protocol, answering every request with 1 KiB: its HPACK encoder
// indexes the response fields, so that after the first response they
// come as references to its table (Date, a new literal once a second).
// It prints its address and serves until its stdin closes.
func serveH2CUpstream() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	body := bytes.Repeat([]byte("a"), h2BodyLen)
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{
		Protocols:         &p,
		ReadHeaderTimeout: readHeaderTimeout,
		HTTP2:             &http.HTTP2Config{MaxConcurrentStreams: maxConcurrentStreams},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header()["Content-Type"] = []string{"application/octet-stream"}
			w.Write(body)
		}),
	}
	go srv.Serve(ln)
	fmt.Println(ln.Addr().String())
	io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// startH2CUpstream runs serveH2CUpstream in a process of its own and
// returns its address; the process ends at cleanup.
func startH2CUpstream(b *testing.B) string {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), h2cUpstreamEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatalf("h2c upstream: %v", err)
	}
	return strings.TrimSpace(line)
}

// BenchmarkProxyRawH2C is BenchmarkProxyRaw and BenchmarkProxyRawH2 with
// an h2c upstream: the raw HTTP/1.1 client, and the raw HTTP/2 client,
// to queue, whose h2c client takes the request to net/http's HTTP/2
// server in a process of its own (startH2CUpstream). So B/op and
// allocs/op are queue's alone, its h2c client's included. The allocs/op
// of h1-h2c/1KiB and h2-h2c/1KiB/serial are the figures for "allocations
// per proxied h1->h2c and h2->h2c request".
func BenchmarkProxyRawH2C(b *testing.B) {
	up := startH2CUpstream(b)
	q := newQueue(b, up, proxy.H2C)
	b.Run("h1-h2c/1KiB", func(b *testing.B) {
		benchRawH1(b, q)
	})
	b.Run("h2-h2c/1KiB/serial", func(b *testing.B) {
		benchRawH2(b, q, 1)
	})
	b.Run("h2-h2c/1KiB/m32", func(b *testing.B) {
		benchRawH2(b, q, h2Batch)
	})
}
