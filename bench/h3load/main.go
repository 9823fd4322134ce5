// Command h3load is an HTTP/3 load generator, for the rows of the
// comparison that h2load cannot run (Debian's h2load has no HTTP/3): C
// connections, each with S requests in flight at once, GET one URL for a
// fixed time. It prints the requests completed, the errors and the
// response bytes, one line, for a harness to parse:
//
//	h3load -url https://127.0.0.1:8112/1k -c 8 -s 16 -d 10s
//	requests=199360 errors=0 bytes=204144640 seconds=10.00
//
// It speaks HTTP/3 itself over quic-go's QUIC transport, as lean as
// h2load is for HTTP/2, so that the load it puts on its own CPU does not
// decide the figures: a request is one HEADERS frame encoded once, with
// the stream's FIN; a response is read to the stream's end, and counts as
// good when its first frame is HEADERS whose first field is :status 200
// (QPACK's static entry 25, as every server sends it), and it has a body.
// Each connection's requests are written together by one goroutine, those
// of every stream that came free since it last ran (as h2load writes the
// requests of one turn of its event loop, so that they share packets), and
// each response is read to its end on a goroutine of its own. The run stops at -d, or at -n requests if set;
// both bound it. Certificates are not verified (the harness's are
// self-signed).
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"runtime"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/quicvarint"
)

func main() {
	target := flag.String("url", "https://127.0.0.1:8112/1k", "the URL to GET")
	conns := flag.Int("c", 8, "connections")
	streams := flag.Int("s", 16, "requests in flight on each connection")
	d := flag.Duration("d", 10*time.Second, "how long to run")
	n := flag.Int64("n", 0, "stop after this many requests (0: run for -d)")
	cpuprofile := flag.String("cpuprofile", "", "write the load generator's own CPU profile to this file")
	flag.Parse()
	u, err := url.Parse(*target)
	if err != nil || u.Scheme != "https" || *conns < 1 || *streams < 1 || *d <= 0 {
		fmt.Fprintln(os.Stderr, "h3load: -url must be https://HOST:PORT/PATH; -c and -s at least 1, -d positive")
		os.Exit(2)
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "h3load:", err)
			os.Exit(2)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	r := run(u, *conns, *streams, *d, *n)
	fmt.Println(r)
	if r.requests == 0 {
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

type result struct {
	requests, errors, bytes int64
	elapsed                 time.Duration
}

func (r result) String() string {
	return fmt.Sprintf("requests=%d errors=%d bytes=%d seconds=%.2f", r.requests, r.errors, r.bytes, r.elapsed.Seconds())
}

// request encodes a GET of u as a HEADERS frame: QPACK with no dynamic
// table, :method GET and :scheme https from the static table, :authority
// and :path as literals with static names.
func request(u *url.URL) []byte {
	lit := func(b []byte, index byte, v string) []byte {
		b = append(b, 0x50|index) // literal, static name reference (index < 15)
		if len(v) >= 127 {
			panic("h3load: URL too long")
		}
		b = append(b, byte(len(v)))
		return append(b, v...)
	}
	p := []byte{0, 0, 0xc0 | 17, 0xc0 | 23} // prefix, :method GET, :scheme https
	p = lit(p, 0, u.Host)
	p = lit(p, 1, u.RequestURI())
	b := quicvarint.Append(nil, 0x01)
	b = quicvarint.Append(b, uint64(len(p)))
	return append(b, p...)
}

// settings is the client's control stream: its type and an empty
// SETTINGS frame.
var settings = []byte{0x00, 0x04, 0x00}

var errResponse = errors.New("not a 200 response")

// run loads u from conns connections with streams requests in flight on
// each, for d or until n requests (n > 0) completed.
func run(u *url.URL, conns, streams int, d time.Duration, n int64) result {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	req := request(u)
	var requests, errs, bytes atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	tc := &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h3"}}
	for range conns {
		qc, err := quic.DialAddr(ctx, u.Host, tc, &quic.Config{MaxIdleTimeout: d + 10*time.Second})
		if err != nil {
			fmt.Fprintln(os.Stderr, "h3load:", err)
			errs.Add(1)
			continue
		}
		defer qc.CloseWithError(0x100, "")
		ctrl, err := qc.OpenUniStream()
		if err == nil {
			_, err = ctrl.Write(settings)
		}
		if err != nil {
			errs.Add(1)
			continue
		}
		c := &loadConn{qc: qc, req: req, wake: make(chan struct{}, 1), opened: make(chan *quic.Stream, streams), errs: &errs}
		c.free.Store(int64(streams))
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.writer(ctx)
		}()
		c.wake <- struct{}{}
		for range streams {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]byte, 64<<10)
				for {
					var str *quic.Stream
					select {
					case str = <-c.opened:
					case <-ctx.Done():
						return
					}
					k, err := read(str, buf)
					bytes.Add(k)
					switch {
					case err != nil && ctx.Err() == nil:
						errs.Add(1)
					case err == nil:
						if requests.Add(1) == n {
							cancel()
						}
					}
					c.release()
				}
			}()
		}
	}
	wg.Wait()
	return result{requests: requests.Load(), errors: errs.Load(), bytes: bytes.Load(), elapsed: time.Since(start)}
}

// loadConn is one connection's requests. Its writer sends the requests of
// every stream that came free since it last ran, together, as h2load sends
// the requests of one turn of its event loop: the streams' readers hand
// their streams back (release) and wake it; it yields once, so that the
// readers ready to run hand theirs back too, then opens a stream for each
// and writes its request, and quic-go packs them into as few packets as
// they fit. A reader reads one stream's response to its end.
type loadConn struct {
	qc     *quic.Conn
	req    []byte
	free   atomic.Int64 // streams to open
	wake   chan struct{}
	opened chan *quic.Stream
	errs   *atomic.Int64
}

func (c *loadConn) release() {
	if c.free.Add(1) == 1 {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

func (c *loadConn) writer(ctx context.Context) {
	for {
		select {
		case <-c.wake:
		case <-ctx.Done():
			return
		}
		runtime.Gosched()
		for k := c.free.Swap(0); k > 0; k-- {
			str, err := c.qc.OpenStreamSync(ctx)
			if err == nil {
				_, err = str.Write(c.req)
			}
			if err != nil {
				if ctx.Err() == nil {
					c.errs.Add(1) // the connection failed: its streams stop
				}
				return
			}
			str.Close()
			c.opened <- str
		}
	}
}

// read reads a response to the stream's end, returning the bytes read.
func read(str *quic.Stream, buf []byte) (int64, error) {
	var total int64
	for {
		k, err := str.Read(buf)
		if total == 0 && k > 0 && !isOK(buf[:k]) {
			str.CancelRead(0x10c)
			return int64(k), errResponse
		}
		total += int64(k)
		if err == io.EOF {
			if total == 0 {
				return 0, errResponse
			}
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// isOK reports whether a response starts with a HEADERS frame whose first
// field is :status 200, indexed from the static table.
func isOK(b []byte) bool {
	t, n, err := quicvarint.Parse(b)
	if err != nil || t != 0x01 {
		return false
	}
	l, m, err := quicvarint.Parse(b[n:])
	if err != nil {
		return false
	}
	p := b[n+m:]
	return len(p) >= 3 && l >= 3 && p[2] == 0xc0|25
}
