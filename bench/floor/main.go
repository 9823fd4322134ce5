// Command floor is the floor of a Go relay: the least work any Go HTTP/1.1
// proxy does per request, measured by bench/compare.sh as the "floor" peer
// so that queue's cost can be read against what no Go proxy can go below.
//
// Per client connection it runs one goroutine and holds one upstream
// connection of its own (dialled at the first request, kept alive, never
// pooled or shared). Per request it pays only the netpoller, the goroutine's
// wake-ups, two reads and two writes, each a raw system call as in queue's
// engine:
//
//   - read from the client until the bytes seen so far contain "\r\n\r\n",
//     the end of a request head, and then as many body bytes as its
//     Content-Length says (none without one), parsing nothing else;
//   - write those bytes upstream unchanged, in one write (with -forward,
//     the forwarding fields queue's contract asks for go in before the
//     head's last line break: X-Forwarded-For, -Proto, -Host and
//     Forwarded, their values made once per connection from the client's
//     address and the listening address, so that a harness's upstream
//     parses what it parses behind queue);
//   - read the upstream's response head and then as many body bytes as its
//     Content-Length says, the one number a relay must parse to find the
//     end of a keep-alive message;
//   - write those bytes back to the client unchanged, with no header added.
//
// It is not a proxy: nothing is checked or rewritten, and anything it does
// not expect (a head over 64 KiB, a chunked message, a response without
// Content-Length) closes the connection. It runs every HTTP/1.1 scenario
// of the comparison (GET 1 KiB and 64 KiB, POST 16 KiB), and with
// -h2c-listen the h2c one (GET 1 KiB over HTTP/2, h2c.go).
//
//	floor -listen 127.0.0.1:18019 -upstream 127.0.0.1:18010 [-forward] [-h2c-listen 127.0.0.1:18119]
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/queue-dev/queue/internal/netio"
)

var headEnd = []byte("\r\n\r\n")

const (
	// bufSize is the first size of each connection's buffers; they double
	// while a head does not fit, and grow at once to a whole message when
	// its Content-Length says it does not fit, so that a body is read in as
	// few reads as the socket allows.
	bufSize = 4 << 10
	// maxHead bounds a request or response head.
	maxHead = 64 << 10
	// maxBody bounds the Content-Length the relay accepts.
	maxBody = 16 << 20
)

func main() {
	listen := flag.String("listen", "127.0.0.1:18019", "host:port to accept HTTP/1.1 clients on")
	upstream := flag.String("upstream", "127.0.0.1:18010", "host:port of the HTTP/1.1 upstream")
	forward := flag.Bool("forward", false, "add queue's four forwarding fields to each request")
	h2cListen := flag.String("h2c-listen", "", "host:port to accept HTTP/2 clients with prior knowledge on (h2c.go); empty: none")
	flag.Parse()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(os.Stderr, "floor: %v\n", err)
		os.Exit(1)
	}
	if *h2cListen != "" {
		h2ln, err := net.Listen("tcp", *h2cListen)
		if err != nil {
			fmt.Fprintf(os.Stderr, "floor: %v\n", err)
			os.Exit(1)
		}
		go func() {
			if err := serve(h2ln, *upstream, *forward, true); err != nil {
				fmt.Fprintf(os.Stderr, "floor: %v\n", err)
				os.Exit(1)
			}
		}()
	}
	if err := serve(ln, *upstream, *forward, false); err != nil {
		fmt.Fprintf(os.Stderr, "floor: %v\n", err)
		os.Exit(1)
	}
}

// serve accepts connections until ln is closed and relays each on its own
// goroutine, adding the forwarding fields when forward is set; HTTP/2 with
// prior knowledge when h2c is set. It returns nil once ln is closed.
func serve(ln net.Listener, upstream string, forward, h2c bool) error {
	relay2 := &h2Relay{upstream: upstream}
	for {
		c, err := ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		if err != nil {
			// Out of file descriptors, most likely: back off rather than spin,
			// as net/http's server does.
			fmt.Fprintf(os.Stderr, "floor: accept: %v\n", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		var fields []byte
		if forward {
			fields = forwardFields(c.RemoteAddr(), ln.Addr())
		}
		if h2c {
			go relay2.serveConn(newRawConn(c), fields)
			continue
		}
		go relay(newRawConn(c), upstream, fields)
	}
}

// rawConn reads and writes a TCP connection with raw system calls, as
// queue's engine does (internal/netio says why): a call through net.Conn
// wakes the runtime's monitor thread whenever the process was idle.
type rawConn struct {
	net.Conn
	raw syscall.RawConn
	fn  func(uintptr) bool // c.read, bound once
	vw  netio.VecWriter
	p   []byte
	n   int
	err error
}

func newRawConn(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	rc := &rawConn{Conn: c, raw: raw}
	rc.fn = rc.read
	rc.vw.Reset(raw)
	return rc
}

func (c *rawConn) Read(p []byte) (int, error) {
	c.p, c.n, c.err = p, 0, nil
	if err := c.raw.Read(c.fn); err != nil {
		return 0, err
	}
	c.p = nil
	return c.n, c.err
}

func (c *rawConn) read(fd uintptr) bool {
	n, again, err := netio.ReadFD(fd, c.p)
	if again {
		return false
	}
	c.n, c.err = n, err
	return true
}

func (c *rawConn) Write(p []byte) (int, error) { return c.vw.Write(p) }

// forwardFields returns the forwarding fields queue sends for a client at
// peer that reached it at local, over plain HTTP, each line ending in CRLF.
func forwardFields(peer, local net.Addr) []byte {
	ip := peer.String()
	if a, ok := peer.(*net.TCPAddr); ok {
		ip = a.IP.String()
	}
	host := local.String()
	return []byte("X-Forwarded-For: " + ip + "\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: " + host +
		"\r\nForwarded: for=" + ip + ";host=\"" + host + "\";proto=http\r\n")
}

// relay answers the requests of one client connection until either side
// closes or breaks the protocol. fields, when not empty, go into each
// request's head before its last line break.
func relay(client net.Conn, upstream string, fields []byte) {
	defer client.Close()
	var up net.Conn
	defer func() {
		if up != nil {
			up.Close()
		}
	}()
	in := make([]byte, 0, bufSize)
	var resp []byte
	for {
		end, err := readHead(client, &in)
		if err != nil {
			return
		}
		n, err := contentLength(in[:end])
		if errors.Is(err, errNoLength) {
			n, err = 0, nil // a request without a body
		}
		if err != nil {
			return
		}
		total := end + n
		in = fit(in, total)
		for len(in) < total {
			if err := readMore(client, &in, total); err != nil {
				return
			}
		}
		if up == nil {
			if up, err = net.Dial("tcp", upstream); err != nil {
				return
			}
			up = newRawConn(up)
			resp = make([]byte, 0, bufSize)
		}
		if err := send(up, in[:total], end, fields); err != nil {
			return
		}
		// Keep what follows the request: a pipelined next one.
		in = in[:copy(in, in[total:])]
		if resp, err = readResponse(up, resp[:0]); err != nil {
			return
		}
		if _, err := client.Write(resp); err != nil {
			return
		}
	}
}

// send writes one request, whose head is msg[:end], to w in one write,
// with fields inserted before the head's final CRLF.
func send(w net.Conn, msg []byte, end int, fields []byte) error {
	if len(fields) == 0 {
		_, err := w.Write(msg)
		return err
	}
	bufs := [][]byte{msg[:end-2], fields, msg[end-2:]}
	if rc, ok := w.(*rawConn); ok {
		_, err := rc.vw.Writev(bufs)
		return err
	}
	nb := net.Buffers(bufs)
	_, err := nb.WriteTo(w)
	return err
}

// readHead reads from r into *buf until it holds "\r\n\r\n" and returns the
// offset just past it. *buf may already hold bytes; it grows up to maxHead.
func readHead(r net.Conn, buf *[]byte) (int, error) {
	from := 0
	for {
		if i := bytes.Index((*buf)[from:], headEnd); i >= 0 {
			return from + i + len(headEnd), nil
		}
		// The terminator may straddle two reads: search again from 3 bytes
		// before the end of what was searched.
		from = max(len(*buf)-len(headEnd)+1, 0)
		if err := readMore(r, buf, maxHead); err != nil {
			return 0, err
		}
	}
}

// readResponse reads one response from r: its head, then the number of body
// bytes its Content-Length gives. It returns buf holding exactly the response.
func readResponse(r net.Conn, buf []byte) ([]byte, error) {
	end, err := readHead(r, &buf)
	if err != nil {
		return buf, err
	}
	n, err := contentLength(buf[:end])
	if err != nil {
		return buf, err
	}
	total := end + n
	buf = fit(buf, total)
	for len(buf) < total {
		if err := readMore(r, &buf, total); err != nil {
			return buf, err
		}
	}
	if len(buf) > total {
		return buf, errors.New("upstream sent bytes past its response")
	}
	return buf, nil
}

// readMore appends one read from r to *buf, doubling its capacity (up to
// limit) when it is full.
// fit returns buf with room for n bytes, the bytes it holds kept.
func fit(buf []byte, n int) []byte {
	if cap(buf) >= n {
		return buf
	}
	grown := make([]byte, len(buf), n)
	copy(grown, buf)
	return grown
}

func readMore(r net.Conn, buf *[]byte, limit int) error {
	b := *buf
	if len(b) == cap(b) {
		if cap(b) >= limit {
			return fmt.Errorf("message over %d bytes", limit)
		}
		grown := make([]byte, len(b), min(max(2*cap(b), bufSize), limit))
		copy(grown, b)
		b = grown
	}
	n, err := r.Read(b[len(b):cap(b)])
	*buf = b[:len(b)+n]
	if n > 0 {
		return nil
	}
	return err
}

// contentLength finds the Content-Length field of a head (field
// names are case-insensitive) and returns its value. It allocates nothing.
func contentLength(head []byte) (int, error) {
	const name = "content-length:"
	for len(head) > 0 {
		line := head
		if i := bytes.Index(head, headEnd[:2]); i >= 0 {
			line, head = head[:i], head[i+2:]
		} else {
			head = nil
		}
		if len(line) <= len(name) || !bytes.EqualFold(line[:len(name)], []byte(name)) {
			continue
		}
		digits := bytes.TrimSpace(line[len(name):])
		if len(digits) == 0 {
			break
		}
		n := 0
		for _, c := range digits {
			if c < '0' || c > '9' || n > maxBody {
				return 0, fmt.Errorf("bad Content-Length %q", digits)
			}
			n = n*10 + int(c-'0')
		}
		if n > maxBody {
			return 0, fmt.Errorf("content length %d over %d", n, maxBody)
		}
		return n, nil
	}
	return 0, errNoLength
}

// errNoLength is a head without a Content-Length field.
var errNoLength = errors.New("no Content-Length")
