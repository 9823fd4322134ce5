package main

import (
	"bytes"
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/quic-go/quic-go/http3"
)

// h3Client returns an HTTP/3 client for q's UDP port and its base URL.
func h3Client(t *testing.T, q *testQueue) (*http.Client, string) {
	t.Helper()
	tr := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: q.certPool, ServerName: "localhost"}}
	t.Cleanup(func() { tr.Close() })
	return &http.Client{Transport: tr}, "https://" + q.addr.TLS
}

// TestHTTP3: with TLS on and no other flag, a quic-go client gets a GET, a
// 1 MiB POST echoed intact and 200 concurrent streams on one connection
// answered through queue; the upstream sees X-Forwarded-Proto https; the
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
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
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
