// Command chunks measures what chunk framing costs a proxy: it sends one
// POST whose body is -n chunks of -size bytes each (Transfer-Encoding:
// chunked) over one TCP connection, reads the response, and prints the
// bytes sent, the time taken and the status. With -get it sends a GET
// instead and reads the whole response body, for an upstream that answers
// with many small chunks (bench/upstream's /chunks).
//
// The framing is streamed from one pre-built buffer of whole chunks, so
// that the sender costs little next to the proxy it loads: 8 M one-byte
// chunks are about 46 MiB of framing, written in 1 MiB writes. The run
// stops by itself after -timeout, whatever the server does.
//
//	chunks -target 127.0.0.1:8012 -n 8000000 -size 1 -path /discard
//	chunks -target 127.0.0.1:8012 -get -path '/chunks?n=8000000&size=1'
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"
)

func main() {
	target := flag.String("target", "127.0.0.1:8012", "host:port to send to")
	n := flag.Int("n", 8000000, "chunks in the body")
	size := flag.Int("size", 1, "bytes of data in each chunk")
	path := flag.String("path", "/", "request target")
	get := flag.Bool("get", false, "send a GET and read the response body instead of sending one")
	timeout := flag.Duration("timeout", 60*time.Second, "bound on the whole run")
	flag.Parse()
	if *n < 0 || *size < 1 {
		fmt.Fprintln(os.Stderr, "chunks: -n must be 0 or more and -size 1 or more")
		os.Exit(2)
	}
	if err := run(*target, *path, *n, *size, *get, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "chunks:", err)
		os.Exit(1)
	}
}

func run(target, path string, n, size int, get bool, timeout time.Duration) error {
	c, err := net.DialTimeout("tcp", target, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	start := time.Now()

	if get {
		head := "GET " + path + " HTTP/1.1\r\nHost: " + target + "\r\nConnection: close\r\n\r\n"
		if _, err := io.WriteString(c, head); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		status, body, err := readResponse(c)
		if err != nil {
			return err
		}
		fmt.Printf("status %d received %d body bytes in %v\n", status, body, time.Since(start).Round(time.Millisecond))
		return nil
	}

	// The response is read as it comes: a server that refuses the body
	// answers before it has read it all.
	type result struct {
		status int
		body   int64
		err    error
	}
	res := make(chan result, 1)
	go func() {
		status, body, err := readResponse(c)
		res <- result{status, body, err}
	}()
	sent, werr := send(c, target, path, n, size)
	r := <-res
	elapsed := time.Since(start)
	if r.err != nil {
		return errors.Join(r.err, werr)
	}
	if werr != nil {
		fmt.Printf("write stopped after %d bytes: %v\n", sent, werr)
	}
	fmt.Printf("sent %d bytes (%d chunks of %d), response after %v; status %d\n", sent, n, size, elapsed.Round(time.Millisecond), r.status)
	return nil
}

// send writes the request head and the chunked body, and returns the bytes
// written.
func send(c net.Conn, target, path string, n, size int) (int64, error) {
	head := "POST " + path + " HTTP/1.1\r\nHost: " + target + "\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
	sent := int64(0)
	m, err := io.WriteString(c, head)
	sent += int64(m)
	if err != nil {
		return sent, err
	}
	one := []byte(strconv.FormatInt(int64(size), 16) + "\r\n")
	for range size {
		one = append(one, 'x')
	}
	one = append(one, "\r\n"...)
	per := max(1, (1<<20)/len(one)) // chunks in one write
	buf := make([]byte, 0, per*len(one))
	for range per {
		buf = append(buf, one...)
	}
	for left := n; left > 0; {
		k := min(left, per)
		m, err := c.Write(buf[:k*len(one)])
		sent += int64(m)
		if err != nil {
			return sent, err
		}
		left -= k
	}
	m, err = io.WriteString(c, "0\r\n\r\n")
	sent += int64(m)
	return sent, err
}

// readResponse reads one response and its body, and returns the status and
// the body's length.
func readResponse(c net.Conn) (int, int64, error) {
	res, err := http.ReadResponse(bufio.NewReaderSize(c, 64<<10), nil)
	if err != nil {
		return 0, 0, fmt.Errorf("read response: %w", err)
	}
	defer res.Body.Close()
	body, err := io.Copy(io.Discard, res.Body)
	if err != nil {
		return res.StatusCode, body, fmt.Errorf("read response body: %w", err)
	}
	return res.StatusCode, body, nil
}
