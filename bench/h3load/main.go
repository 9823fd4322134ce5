// Command h3load is an HTTP/3 load generator, for the rows of the
// comparison that h2load cannot run (Debian's h2load has no HTTP/3): C
// connections, each with S requests in flight at once, GET one URL for a
// fixed time, on quic-go's client. It prints the requests completed, the
// errors and the response bytes, one line, for a harness to parse:
//
//	h3load -url https://127.0.0.1:8112/1k -c 8 -s 16 -d 10s
//	requests=199360 errors=0 bytes=204144640 seconds=10.00
//
// Each stream runs on a goroutine of its own, reading the whole body before
// its next request. The run stops at -d, or at -n requests if set; both
// bound it. Certificates are not verified (the harness's are self-signed).
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go/http3"
)

func main() {
	url := flag.String("url", "https://127.0.0.1:8112/1k", "the URL to GET")
	conns := flag.Int("c", 8, "connections")
	streams := flag.Int("s", 16, "requests in flight on each connection")
	d := flag.Duration("d", 10*time.Second, "how long to run")
	n := flag.Int64("n", 0, "stop after this many requests (0: run for -d)")
	flag.Parse()
	if *conns < 1 || *streams < 1 || *d <= 0 {
		fmt.Fprintln(os.Stderr, "h3load: -c and -s must be at least 1, -d positive")
		os.Exit(2)
	}
	r := run(*url, *conns, *streams, *d, *n)
	fmt.Println(r)
	if r.requests == 0 {
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

// run loads url from conns connections with streams requests in flight on
// each, for d or until n requests (n > 0) completed.
func run(url string, conns, streams int, d time.Duration, n int64) result {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var requests, errs, bytes atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range conns {
		// One Transport per connection: quic-go's keeps one connection a
		// host, and the streams share it.
		tr := &http3.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
		defer tr.Close()
		client := &http.Client{Transport: tr}
		for range streams {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
					if err != nil {
						errs.Add(1)
						return
					}
					res, err := client.Do(req)
					if err != nil {
						if ctx.Err() == nil {
							errs.Add(1)
						}
						continue
					}
					k, err := io.Copy(io.Discard, res.Body)
					res.Body.Close()
					bytes.Add(k)
					switch {
					case err != nil && ctx.Err() == nil, err == nil && res.StatusCode != http.StatusOK:
						errs.Add(1)
					case err == nil:
						if requests.Add(1) == n {
							cancel()
						}
					}
				}
			}()
		}
	}
	wg.Wait()
	return result{requests: requests.Load(), errors: errs.Load(), bytes: bytes.Load(), elapsed: time.Since(start)}
}
