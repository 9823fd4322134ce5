package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestContentLength: contentLength finds a response head's Content-Length
// field in any case and reads its value as a non-negative decimal that
// fits an int; a head without one, or with a value that is not such a
// number, is an error.
func TestContentLength(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		head    string
		want    int
		wantErr bool
	}{
		{name: "canonical", head: "HTTP/1.1 200 OK\r\nContent-Length: 1024\r\n\r\n", want: 1024},
		{name: "lower case, no space", head: "HTTP/1.1 200 OK\r\ncontent-length:7\r\n\r\n", want: 7},
		{name: "among others", head: "HTTP/1.1 200 OK\r\nX-A: 1\r\nCONTENT-LENGTH: 0 \r\nX-B: 2\r\n\r\n", want: 0},
		{name: "missing", head: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", wantErr: true},
		{name: "empty value", head: "HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\n", wantErr: true},
		{name: "not a number", head: "HTTP/1.1 200 OK\r\nContent-Length: 1e3\r\n\r\n", wantErr: true},
		{name: "negative", head: "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", wantErr: true},
		{name: "too large", head: "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n", wantErr: true},
		{name: "name in a value", head: "HTTP/1.1 200 OK\r\nX: content-length: 5\r\n\r\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := contentLength([]byte(tt.head))
			if gotErr := err != nil; gotErr != tt.wantErr {
				t.Fatalf("contentLength(%q) error = %v, want error %v", tt.head, err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("contentLength(%q) = %d, want %d", tt.head, got, tt.want)
			}
		})
	}
}

// TestRelay sends requests through the relay the way clients may write them
// (pipelined in one write, a head split across writes, a body behind a
// Content-Length) and checks that the upstream sees each request as it was
// sent, in order, over one upstream connection; with -forward, with the
// forwarding fields added to each.
func TestRelay(t *testing.T) {
	t.Parallel()
	for _, forward := range []bool{false, true} {
		t.Run(map[bool]string{false: "as sent", true: "forward"}[forward], func(t *testing.T) {
			t.Parallel()
			testRelay(t, forward)
		})
	}
}

func testRelay(t *testing.T, forward bool) {
	var (
		fwd   []string
		mu    sync.Mutex
		paths []string
		conns = map[string]bool{}
	)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		b, _ := io.ReadAll(r.Body)
		paths = append(paths, r.Method+" "+r.URL.Path+" "+string(b))
		conns[r.RemoteAddr] = true
		fwd = append(fwd, strings.Join([]string{r.Header.Get("X-Forwarded-For"), r.Header.Get("X-Forwarded-Proto"),
			r.Header.Get("X-Forwarded-Host"), r.Header.Get("Forwarded")}, "|"))
		mu.Unlock()
		_, _ = io.WriteString(w, strings.Repeat("x", 1024))
	}))
	t.Cleanup(up.Close)
	addr := startRelay(t, up, forward, false)

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	writes := []string{
		"GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /c HTTP/1.1\r\nHost: x\r\n\r",
		"\nPOST /d HTTP/1.1\r\nHo",
		"st: x\r\nContent-Length: 5\r\n\r\nhe",
		"llo",
	}
	br := bufio.NewReader(c)
	for i, w := range writes {
		if _, err := io.WriteString(c, w); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	for i := range 4 {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("response %d body: %v", i, err)
		}
		if got, want := resp.StatusCode, http.StatusOK; got != want {
			t.Errorf("response %d status = %d, want %d", i, got, want)
		}
		if got, want := len(body), 1024; got != want {
			t.Errorf("response %d body = %d bytes, want %d", i, got, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if got, want := strings.Join(paths, ","), "GET /a ,GET /b ,GET /c ,POST /d hello"; got != want {
		t.Errorf("upstream saw paths %s, want %s", got, want)
	}
	if got, want := len(conns), 1; got != want {
		t.Errorf("upstream saw %d connections, want %d", got, want)
	}
	want := "|||"
	if forward {
		want = "127.0.0.1|http|" + addr + `|for=127.0.0.1;host="` + addr + `";proto=http`
	}
	for i, got := range fwd {
		if got != want {
			t.Errorf("request %d forwarding fields = %q, want %q", i, got, want)
		}
	}
}

// startRelay runs the relay's accept loop (HTTP/2 with prior knowledge when
// h2c is set) in front of up until the test ends, and returns its address.
func startRelay(t *testing.T, up *httptest.Server, forward, h2c bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- serve(ln, up.Listener.Addr().String(), forward, h2c) }()
	t.Cleanup(func() {
		ln.Close()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("serve did not return within 10s of its listener's close")
		}
	})
	return ln.Addr().String()
}

// TestRelayClosesOnUnknownLength checks that a response the relay cannot
// delimit closes the client connection instead of hanging it.
func TestRelayClosesOnUnknownLength(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.(http.Flusher).Flush() // chunked: no Content-Length
		_, _ = io.WriteString(w, "hello")
	}))
	t.Cleanup(up.Close)
	c, err := net.Dial("tcp", startRelay(t, up, false, false))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read: %v (want the relay to close the connection)", err)
	}
	if len(got) != 0 {
		t.Errorf("relay wrote %q, want nothing", got)
	}
}
