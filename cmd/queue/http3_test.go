package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"
)

// h3Client returns an HTTP/3 client for q's UDP port and its base URL.
func h3Client(t *testing.T, q *testQueue) (*http.Client, string) {
	t.Helper()
	tr := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: q.certPool, ServerName: "localhost"}}
	t.Cleanup(func() { tr.Close() })
	return &http.Client{Transport: tr, Timeout: clientTimeout}, "https://" + q.addr.TLS
}

// TestHTTP3: with TLS on and no other flag, a quic-go client gets a GET, a
// 1 MiB POST echoed intact and 200 concurrent requests (streams of the
// one connection quic-go's transport keeps to a server) answered through
// queue; the upstream sees X-Forwarded-Proto https; the
// TCP TLS port's responses carry Alt-Svc for h3 and the HTTP/3 ones do not.
func TestHTTP3(t *testing.T) {
	t.Parallel()
	up := h1Upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			io.Copy(w, r.Body)
			return
		}
		w.Write([]byte(r.Header.Get("X-Forwarded-Proto")))
	}))
	q := startTLSQueue(t, hostPort(up))
	c, base := h3Client(t, q)

	res, err := c.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		t.Fatalf("GET over HTTP/3: reading the body: %v", err)
	}
	if res.Proto != "HTTP/3.0" || string(body) != "https" || res.Header.Get("Alt-Svc") != "" {
		t.Errorf("GET over HTTP/3: %s, body %q, Alt-Svc %q; want HTTP/3.0, https, none", res.Proto, body, res.Header.Get("Alt-Svc"))
	}

	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	res, err = c.Post(base+"/echo", "application/octet-stream", bytes.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || !bytes.Equal(got, big) {
		t.Errorf("1 MiB POST echoed: %d bytes, %v; want the same 1 MiB", len(got), err)
	}

	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := c.Get(base + "/")
			if err == nil {
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusOK {
					err = &statusError{res.StatusCode}
				}
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("one of 200 concurrent streams: %v", err)
		}
	}

	tc, tbase := q.client(t, modeTLSH2)
	res, _ = get(t, tc, tbase+"/", nil)
	if v := res.Header.Get("Alt-Svc"); !strings.HasPrefix(v, `h3=":`) {
		t.Errorf("TLS over TCP: Alt-Svc %q, want h3 on the port", v)
	}
}

type statusError struct{ code int }

func (e *statusError) Error() string { return http.StatusText(e.code) }

// TestHTTP3Streaming: over HTTP/3, a request body streams to the upstream
// (its first piece arrives there before the client sends the next) and
// the upstream's pieces stream back as it flushes them (each reaches the
// client before the upstream writes the next), to an HTTP/1.1 and an h2c
// upstream; the request's trailers reach an HTTP/1.1 upstream.
func TestHTTP3Streaming(t *testing.T) {
	t.Parallel()
	firstPiece := make(chan struct{}, 2)
	next := make(chan struct{}, 2)
	qs := upstreams(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/trailers":
			b, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "%s %s", b, r.Trailer.Get("X-Sum"))
		case "/upload":
			buf := make([]byte, 5)
			if _, err := io.ReadFull(r.Body, buf); err != nil || string(buf) != "ping0" {
				http.Error(w, "first piece", http.StatusBadRequest)
				return
			}
			firstPiece <- struct{}{}
			rest, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "%s%s", buf, rest)
		case "/download":
			for i := range 3 {
				fmt.Fprintf(w, "pong%d", i)
				w.(http.Flusher).Flush()
				select {
				case <-next:
				case <-time.After(10 * time.Second):
					return
				}
			}
		}
	}))
	for _, up := range []string{"http1", "h2c"} {
		t.Run("upload-to-"+up, func(t *testing.T) {
			c, base := qs[up].client(t, modeH3)
			pr, pw := io.Pipe()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/upload", pr)
			go func() {
				io.WriteString(pw, "ping0")
				select {
				case <-firstPiece:
					io.WriteString(pw, "ping1")
					pw.Close()
				case <-ctx.Done():
					pw.CloseWithError(ctx.Err())
				}
			}()
			res, body := do(t, c, req)
			if res.StatusCode != 200 || body != "ping0ping1" {
				t.Errorf("status %d, body %q; want the first piece upstream before the second was sent", res.StatusCode, body)
			}
		})
		t.Run("download-from-"+up, func(t *testing.T) {
			c, base := qs[up].client(t, modeH3)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/download", nil)
			res, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			got := make([]byte, 5)
			for i := range 3 {
				if _, err := io.ReadFull(res.Body, got); err != nil || string(got) != fmt.Sprintf("pong%d", i) {
					t.Fatalf("piece %d: %q, %v; want it before the upstream writes the next", i, got, err)
				}
				next <- struct{}{}
			}
		})
	}
	t.Run("request-trailers", func(t *testing.T) {
		t.Parallel()
		c, base := qs["http1"].client(t, modeH3)
		req, _ := http.NewRequest(http.MethodPost, base+"/trailers", io.MultiReader(strings.NewReader("abc")))
		req.Trailer = http.Header{"X-Sum": {"42"}}
		res, body := do(t, c, req)
		if res.StatusCode != 200 || body != "abc 42" {
			t.Errorf("status %d, upstream saw %q; want the body and trailer X-Sum 42", res.StatusCode, body)
		}
	})
}
