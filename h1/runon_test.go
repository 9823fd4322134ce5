package h1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/queue-dev/queue/internal/testnet"
)

// TestLingerBounded: a chunked POST whose first chunk-size line runs on
// with 64 MiB of extension characters (token characters, so only its
// length is wrong) gets its 400 and has its connection cut long before
// the client has sent 8 MiB: what the client sends after the refusal is
// read and dropped (lingerClose) for lingerBytes at most, then the socket
// is closed and the client's writes fail. Both sockets' buffers are kept
// small, so what the client could write is what the server read plus
// what the two buffers hold.
func TestLingerBounded(t *testing.T) {
	t.Parallel()
	const limit = 8 << 20
	lc := net.ListenConfig{Control: bufferSize(syscall.SO_RCVBUF, 64<<10)}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := serveOn(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			w.WriteHeader(http.StatusBadRequest)
		}
	})}, ln)
	d := net.Dialer{Timeout: failAfter, Control: bufferSize(syscall.SO_SNDBUF, 64<<10)}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(failAfter))

	status := make(chan string, 1)
	go func() {
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			line = "read: " + err.Error()
		}
		status <- line
	}()

	if _, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n1;"); err != nil {
		t.Fatal(err)
	}
	ext := bytes.Repeat([]byte("a"), 64<<10)
	sent := 0
	for ; sent < 64<<20; sent += len(ext) {
		if _, err = c.Write(ext); err != nil {
			break
		}
	}
	if !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("after %d bytes of extension the client's write says %v, want the connection cut (EPIPE or ECONNRESET)", sent, err)
	}
	if sent >= limit {
		t.Errorf("the connection was cut after %d bytes of extension, want fewer than %d", sent, limit)
	}
	if got, want := testnet.Recv(t, status, failAfter, "status line"), "HTTP/1.1 400 Bad Request\r\n"; got != want {
		t.Errorf("status line = %q, want %q", got, want)
	}
}

// TestChunkExtensionBudget: chunk extensions are read for nothing, so a
// body may carry 16 bytes of them a line, one more per data byte of the
// line's chunk, and maxChunkExtra bytes beyond that in all. Many one-byte
// chunks with a 1000-byte extension each are refused once the excess
// passes maxChunkExtra (with less read than 32 times the budget); the same
// extension on chunks that carry more data than it is long, and short
// extensions on many one-byte chunks, are not.
func TestChunkExtensionBudget(t *testing.T) {
	t.Parallel()
	ext := ";" + string(bytes.Repeat([]byte("a"), 999))
	body := func(chunks int, size int, ext string) []byte {
		var b bytes.Buffer
		for range chunks {
			fmt.Fprintf(&b, "%x%s\r\n%s\r\n", size, ext, bytes.Repeat([]byte("x"), size))
		}
		b.WriteString("0\r\n\r\n")
		return b.Bytes()
	}
	for _, tt := range []struct {
		name    string
		in      []byte
		wantErr bool
	}{
		{name: "long extensions on one-byte chunks", in: body(1000, 1, ext), wantErr: true},
		{name: "long extensions on large chunks", in: body(1000, 1000, ext)},
		{name: "short extensions on one-byte chunks", in: body(100000, 1, ";name=v")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var d ChunkDecoder
			dst := make([]byte, 64<<10)
			src, read := tt.in, 0
			var err error
			for !d.Trailers() && err == nil && len(src) > 0 {
				// Feed at most 64 KiB at a time, as a connection's buffer does.
				var used int
				_, used, err = d.Decode(dst, src[:min(len(src), 64<<10)])
				src, read = src[used:], read+used
				if used == 0 && err == nil && !d.Trailers() {
					t.Fatalf("no progress at byte %d", read)
				}
			}
			if gotErr := err != nil; gotErr != tt.wantErr {
				t.Fatalf("after %d bytes: err = %v, want an error %v", read, err, tt.wantErr)
			}
			if tt.wantErr && read > 32*maxChunkExtra {
				t.Errorf("refused after %d bytes, want at most %d", read, 32*maxChunkExtra)
			}
			if !tt.wantErr && !d.Trailers() {
				t.Errorf("the last chunk was not reached")
			}
		})
	}
}
