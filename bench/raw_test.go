package bench

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"strconv"
	"testing"

	"github.com/queue-dev/queue/proxy"
)

// BenchmarkProxyRaw measures queue alone: its client and upstream are raw
// TCP loops that allocate nothing (a fixed request written, a response read
// by its Content-Length; a fixed response to each request head), so that
// B/op and allocs/op are queue's own. Its allocs/op is the figure for
// "allocations per proxied h1->h1 request".
func BenchmarkProxyRaw(b *testing.B) {
	up := newRawUpstream(b, 1<<10)
	q := newQueue(b, up, proxy.HTTP1)
	b.Run("h1-h1/1KiB", func(b *testing.B) {
		benchRawH1(b, q)
	})
}

// benchRawH1 is one keep-alive connection to queue at q sending GET /1k
// and reading each response by its Content-Length, from a fixed request,
// so that the client allocates nothing: B/op and allocs/op are queue's.
func benchRawH1(b *testing.B, q string) {
	c, err := net.Dial("tcp", q)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	req := []byte("GET /1k HTTP/1.1\r\nHost: bench\r\nUser-Agent: raw\r\nAccept: */*\r\n\r\n")
	br := bufio.NewReaderSize(c, 64<<10)
	exchange := func() {
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		if err := readRawResponse(br); err != nil {
			b.Fatal(err)
		}
	}
	for range 100 {
		exchange() // warm the pools and the upstream connection
	}
	b.ReportAllocs()
	for b.Loop() {
		exchange()
	}
}

// readRawResponse reads one response head and its Content-Length body.
func readRawResponse(br *bufio.Reader) error {
	n := -1
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(line) <= 2 {
			break
		}
		if v, ok := bytes.CutPrefix(line, []byte("Content-Length: ")); ok {
			n = 0
			for _, c := range bytes.TrimSpace(v) {
				n = n*10 + int(c-'0')
			}
		}
	}
	if n < 0 {
		return io.ErrUnexpectedEOF
	}
	_, err := br.Discard(n)
	return err
}

// newRawUpstream answers every request head with a fixed response of size
// bytes, on as many connections as come.
func newRawUpstream(b *testing.B, size int) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	res := []byte("HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: " + strconv.Itoa(size) + "\r\n\r\n")
	res = append(res, bytes.Repeat([]byte("a"), size)...)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 16<<10)
				have := 0
				for {
					n, err := c.Read(buf[have:])
					if err != nil {
						return
					}
					have += n
					for {
						i := bytes.Index(buf[:have], []byte("\r\n\r\n"))
						if i < 0 {
							break
						}
						copy(buf, buf[i+4:have])
						have -= i + 4
						if _, err := c.Write(res); err != nil {
							return
						}
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}
