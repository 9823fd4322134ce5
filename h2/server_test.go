//lint:file-ignore SA1019 the tests drive the engine with golang.org/x/net/http2's own client on purpose: a second HTTP/2 implementation besides net/http's.

package h2_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/queue-dev/queue/h2"
	"github.com/queue-dev/queue/internal/engine"
	"github.com/queue-dev/queue/internal/testnet"
	"github.com/queue-dev/queue/internal/workers"
	"golang.org/x/net/http2"
)

// seen is a request as its handler saw it.
type seen struct {
	Method        string
	Path          string
	RawQuery      string
	RequestURI    string
	Host          string
	Proto         string
	Header        http.Header
	ContentLength int64
	BodyLen       int
	BodySum       string
}

func sum(p []byte) string {
	h := sha256.Sum256(p)
	return hex.EncodeToString(h[:])
}

// echo answers with what it saw, as JSON, and the response fields the
// request asks for in X-Want-Resp ("name=value" list), then mutates the
// request it was given: none of it may reach a later stream.
func echo(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s := seen{
		Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, RequestURI: r.RequestURI,
		Host: r.Host, Proto: r.Proto, Header: r.Header.Clone(), ContentLength: r.ContentLength,
		BodyLen: len(body), BodySum: sum(body),
	}
	for _, kv := range strings.Split(r.Header.Get("X-Want-Resp"), ",") {
		if name, value, ok := strings.Cut(kv, "="); ok {
			w.Header().Add(name, value)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(s)

	r.Header.Set("X-Mutated", "1")
	r.Header["X-Tag"] = append(r.Header["X-Tag"], "mutated")
	if v := r.Header["User-Agent"]; len(v) > 0 {
		v[0] = "mutated"
	}
	r.URL.RawQuery = "mutated=1"
	r.URL.Path = "/mutated"
	r.Host = "mutated.example"
	r.Trailer = http.Header{"X-Mutated": {"1"}}
	w.Header().Set("X-Leftover", "1") // set after the head went out
}

// TestRequestsOnOneConn sends many requests, one after another and at
// once, on one connection: each handler must see exactly its request, and
// each response carry exactly what its handler set, whatever the streams
// before it left in the reused per-stream state.
func TestRequestsOnOneConn(t *testing.T) {
	ts := startServer(t, newServer(echo))
	c := ts.client(t)

	do := func(i int) error {
		method := http.MethodGet
		var body []byte
		if i%3 == 0 {
			method = http.MethodPost
			body = make([]byte, (i*7919)%(100<<10))
			for j := range body {
				body[j] = byte(i + j)
			}
		}
		path := fmt.Sprintf("/p/%d", i)
		query := ""
		if i%2 == 0 {
			query = fmt.Sprintf("i=%d&x=%s", i, strings.Repeat("q", i%13))
		}
		target := path
		if query != "" {
			target += "?" + query
		}
		req, err := http.NewRequest(method, ts.url(target), bytes.NewReader(body))
		if err != nil {
			return err
		}
		if len(body) == 0 {
			req.Body, req.ContentLength = http.NoBody, 0
		}
		req.Host = fmt.Sprintf("h%d.example", i)
		want := http.Header{
			"X-Tag":                     {fmt.Sprintf("t%d", i)},
			fmt.Sprintf("X-Only-%d", i): {fmt.Sprintf("v%d", i)},
			"User-Agent":                {fmt.Sprintf("ua-%d", i)},
			"X-Want-Resp":               {fmt.Sprintf("X-Resp-%d=r%d,X-Tag=t%d", i, i, i)},
		}
		if i%4 == 0 {
			want["X-Multi"] = []string{fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i)}
		}
		if i%5 == 0 {
			// The client splits cookies into crumbs; the server joins them.
			want["Cookie"] = []string{fmt.Sprintf("a=1; b=%d", i)}
		}
		for k, v := range want {
			req.Header[k] = v
		}
		res, err := c.Do(req)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			return err
		}
		if res.StatusCode != http.StatusOK {
			return fmt.Errorf("request %d: status %d: %s", i, res.StatusCode, b)
		}
		var got seen
		if err := json.Unmarshal(b, &got); err != nil {
			return fmt.Errorf("request %d: %v in %q", i, err, b)
		}
		var errs []string
		check := func(what string, got, want any) {
			if !reflect.DeepEqual(got, want) {
				errs = append(errs, fmt.Sprintf("%s = %#v, want %#v", what, got, want))
			}
		}
		check("method", got.Method, method)
		check("path", got.Path, path)
		check("query", got.RawQuery, query)
		check("RequestURI", got.RequestURI, target)
		check("Host", got.Host, req.Host)
		check("Proto", got.Proto, "HTTP/2.0")
		check("ContentLength", got.ContentLength, int64(len(body)))
		check("body length", got.BodyLen, len(body))
		check("body sum", got.BodySum, sum(body))
		// Content-Length may be in the map or only in ContentLength.
		if v, ok := got.Header["Content-Length"]; ok {
			check("Content-Length", v, []string{strconv.Itoa(len(body))})
			delete(got.Header, "Content-Length")
		}
		check("header", got.Header, want)
		check("X-Tag", res.Header["X-Tag"], []string{fmt.Sprintf("t%d", i)})
		check("X-Resp", res.Header[fmt.Sprintf("X-Resp-%d", i)], []string{fmt.Sprintf("r%d", i)})
		for k := range res.Header {
			if strings.HasPrefix(k, "X-Resp-") && k != fmt.Sprintf("X-Resp-%d", i) || k == "X-Leftover" || k == "X-Mutated" {
				errs = append(errs, fmt.Sprintf("response has another stream's field %s", k))
			}
		}
		if len(errs) > 0 {
			return fmt.Errorf("request %d: %s", i, strings.Join(errs, "; "))
		}
		return nil
	}

	for i := range 60 {
		if err := do(i); err != nil {
			t.Error(err)
		}
	}
	var wg sync.WaitGroup
	errc := make(chan error, 400)
	for g := range 16 {
		wg.Go(func() {
			for j := range 15 {
				if err := do(100 + g*15 + j); err != nil {
					errc <- err
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if n := ts.conns.Load(); n != 1 {
		t.Errorf("%d connections, want 1", n)
	}
}

// TestLargeHeads: request and response heads in HEADERS and CONTINUATION
// frames, and requests past h2.MaxHeaderListSize, which are answered 431
// on their stream while the connection goes on (as limits.go says).
func TestLargeHeads(t *testing.T) {
	big := strings.Repeat("0123456789abcdef", 30<<10/16) // 30 KiB
	ts := startServer(t, newServer(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Big-Response", big)
		fmt.Fprintf(w, "%d %d %d", len(r.Header.Get("X-Big")), len(r.Header.Get("X-Big2")), len(r.Header.Get("X-Huge")))
	}))
	t.Run("within", func(t *testing.T) {
		req, _ := http.NewRequest("GET", ts.url("/"), nil)
		req.Header.Set("X-Big", big)
		res, err := ts.client(t).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if got, want := string(b), fmt.Sprintf("%d 0 0", len(big)); got != want {
			t.Errorf("handler saw %q, want %q", got, want)
		}
		if res.Header.Get("X-Big-Response") != big {
			t.Errorf("response field of %d bytes, want %d", len(res.Header.Get("X-Big-Response")), len(big))
		}
	})
	for _, tc := range []struct {
		name string
		kv   []string
	}{
		{"fields over the list size", []string{"x-big", big, "x-big2", big, "x-big3", big}},
		{"one field over the list size", []string{"x-huge", strings.Repeat(big, 3)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := ts.dialRaw(t)
			rc.handshake()
			rc.headersSplit(1, true, 16<<10, request("GET", "/", tc.kv...)...)
			res := rc.readResponse(1, nil)
			if res.status != "431" {
				t.Errorf("status %q (rst %v %v), want 431", res.status, res.rst, res.rstCode)
			}
			rc.headers(3, true, request("GET", "/")...)
			if res := rc.readResponse(3, nil); res.status != "200" {
				t.Errorf("next stream: status %s", res.status)
			}
		})
	}
}

// TestPathValueNotReused: a handler's r.SetPathValue must not show in a
// later stream's r.PathValue (http.Request's unexported pattern and path
// values are part of the reused request).
func TestPathValueNotReused(t *testing.T) {
	ts := startServer(t, newServer(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/set" {
			r.SetPathValue("leak", "secret")
			return
		}
		io.WriteString(w, r.PathValue("leak"))
	}))
	c := ts.client(t)
	for i := range 20 {
		for _, path := range []string{"/set", "/get"} {
			res, err := c.Get(ts.url(path))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if path == "/get" && len(b) > 0 {
				t.Fatalf("round %d: /get saw PathValue(%q) = %q set by an earlier stream", i, "leak", b)
			}
		}
	}
}

// TestContextCanceledAfterHandler: as with net/http, a request's context
// is canceled when ServeHTTP returns, so that what the handler started on
// it ends.
func TestContextCanceledAfterHandler(t *testing.T) {
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	canceled := make(chan error, 4)
	ts := startServer(t, newServer(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		go func() {
			select {
			case <-ctx.Done():
				canceled <- ctx.Err()
			case <-stop:
			}
		}()
		io.WriteString(w, "ok")
	}))
	c := ts.client(t)
	res, err := c.Get(ts.url("/"))
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(res.Body)
	res.Body.Close()
	if err := testnet.Recv(t, canceled, failAfter, "the request's context to be canceled after ServeHTTP returned"); err == nil {
		t.Errorf("ctx.Err() = nil after Done")
	}
}

// pattern is deterministic bytes for a body of n bytes.
func pattern(n int) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{1, 2, 3})
	r.Read(b)
	return b
}

// TestLargeBodies moves bodies past the windows in both directions.
func TestLargeBodies(t *testing.T) {
	const up, down = 3 << 20, 5 << 20
	if up <= h2.InitialWindow {
		t.Fatalf("upload of %d is within the window", up)
	}
	download := pattern(down)
	ts := startServer(t, newServer(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/sum":
			b, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			fmt.Fprintf(w, "%d %s", len(b), sum(b))
		case "/drop":
			io.WriteString(w, "dropped")
		case "/download":
			for b := download; len(b) > 0; {
				n := min(len(b), 100_000)
				if _, err := w.Write(b[:n]); err != nil {
					return
				}
				b = b[n:]
			}
		}
	}))
	c := ts.client(t)
	upload := pattern(up)

	post := func(path string) (string, error) {
		res, err := c.Post(ts.url(path), "application/octet-stream", bytes.NewReader(upload))
		if err != nil {
			return "", err
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK {
			return "", fmt.Errorf("status %d: %s", res.StatusCode, b)
		}
		return string(b), err
	}
	t.Run("upload", func(t *testing.T) {
		got, err := post("/sum")
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("%d %s", up, sum(upload)); got != want {
			t.Errorf("handler read %q, want %q", got, want)
		}
	})
	t.Run("download", func(t *testing.T) {
		res, err := c.Get(ts.url("/download"))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != down || sum(b) != sum(download) {
			t.Errorf("downloaded %d bytes (sum %s), want %d (sum %s)", len(b), sum(b), down, sum(download))
		}
	})
	t.Run("unread", func(t *testing.T) {
		// The handler answers without reading: the client gets the
		// response (and RST_STREAM NO_ERROR); what it sent is given back
		// to the connection's window, so a later upload goes through.
		for range 3 {
			got, err := post("/drop")
			if err != nil {
				t.Fatal(err)
			}
			if got != "dropped" {
				t.Errorf("body %q, want %q", got, "dropped")
			}
		}
		got, err := post("/sum")
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("%d %s", up, sum(upload)); got != want {
			t.Errorf("handler read %q, want %q", got, want)
		}
	})
	if n := ts.conns.Load(); n != 1 {
		t.Errorf("%d connections, want 1", n)
	}
}

// TestUnreadUploadsKeepConn: an honest client that uploads to handlers
// that answer without reading has DATA in flight when the server resets
// the stream (NO_ERROR). RFC 9113 section 5.1: frames on a stream the
// endpoint reset must be ignored. They must not count as abuse and close
// the connection.
func TestUnreadUploadsKeepConn(t *testing.T) {
	ts := startServer(t, newServer(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "dropped")
	}))
	c := ts.client(t)
	upload := pattern(1 << 20)
	for i := range 40 {
		res, err := c.Post(ts.url("/drop"), "application/octet-stream", bytes.NewReader(upload))
		if err != nil {
			t.Fatalf("upload %d: %v", i, err)
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || string(b) != "dropped" {
			t.Fatalf("upload %d: body %q, %v", i, b, err)
		}
	}
	if n := ts.conns.Load(); n != 1 {
		t.Errorf("%d connections, want 1: the server closed one", n)
	}
}

// TestInFlightDataAfterReset: a client that sends a request body within
// its windows without waiting has DATA in flight when the handler answers
// without reading and the server resets the stream (NO_ERROR). Those frames
// must be ignored (RFC 9113 section 5.1), not counted as abuse
// (MaxGlitches: the documented glitches do not include them) until the
// connection is closed with ENHANCE_YOUR_CALM.
func TestInFlightDataAfterReset(t *testing.T) {
	ts := startServer(t, newServer(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "dropped")
	}))
	rc := ts.dialRaw(t)
	rc.handshake()
	// 768 KiB a stream: the server's WINDOW_UPDATEs (every 256 KiB) give
	// all of it back, and it is more than the socket buffers hold, so that
	// most of it is still to be read when the handler has answered.
	const frames = 48
	chunk := make([]byte, 16<<10)
	for i := range uint32(100) {
		id := 2*i + 1
		rc.note = fmt.Sprintf("stream %d, after %d streams whose bodies were not read", id, i)
		for n := 0; rc.sendWindow < frames*int64(len(chunk)); n++ {
			if n == 10 {
				t.Fatalf("connection window %d: the server did not give back the dropped DATA", rc.sendWindow)
			}
			rc.sync() // reads the server's WINDOW_UPDATEs
		}
		rc.batch(func() {
			rc.headers(id, false, request("POST", "/")...)
			for j := range frames {
				rc.data(id, j == frames-1, chunk)
			}
		})
		res := rc.readResponse(id, nil)
		if res.status != "200" || string(res.body) != "dropped" {
			t.Fatalf("stream %d: %s %q", id, res.status, res.body)
		}
		for _, f := range rc.sync() {
			if ga, ok := f.(*http2.GoAwayFrame); ok {
				t.Fatalf("GOAWAY %v after %d streams whose bodies were not read", ga.ErrCode, i+1)
			}
		}
	}
}

// TestTrailers: response trailers, declared or with http.TrailerPrefix,
// and request trailers.
func TestTrailers(t *testing.T) {
	ts := startServer(t, newServer(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/declared":
			w.Header().Set("Trailer", "X-Declared")
			io.WriteString(w, "body")
			w.Header().Set("X-Declared", "d")
			w.Header().Set(http.TrailerPrefix+"X-Prefixed", "p")
		case "/prefix-only":
			io.WriteString(w, "body")
			w.Header().Set(http.TrailerPrefix+"X-Prefixed", "p")
		case "/no-body":
			w.Header().Set(http.TrailerPrefix+"X-Prefixed", "p")
		case "/request":
			if r.Trailer.Get("X-Req-Trailer") != "" {
				http.Error(w, "trailer before the body", http.StatusBadRequest)
				return
			}
			b, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			fmt.Fprintf(w, "%s %s", b, r.Trailer.Get("X-Req-Trailer"))
		}
	}))
	c := ts.client(t)
	for _, tc := range []struct {
		path, body string
		trailer    http.Header
	}{
		{"/declared", "body", http.Header{"X-Declared": {"d"}, "X-Prefixed": {"p"}}},
		{"/prefix-only", "body", http.Header{"X-Prefixed": {"p"}}},
		{"/no-body", "", http.Header{"X-Prefixed": {"p"}}},
	} {
		t.Run(tc.path, func(t *testing.T) {
			res, err := c.Get(ts.url(tc.path))
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			b, err := io.ReadAll(res.Body)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tc.body {
				t.Errorf("body %q, want %q", b, tc.body)
			}
			if !reflect.DeepEqual(res.Trailer, tc.trailer) {
				t.Errorf("trailer %v, want %v", res.Trailer, tc.trailer)
			}
			for k := range res.Header {
				if strings.Contains(k, "Prefixed") || k == "X-Declared" {
					t.Errorf("field %s in the head", k)
				}
			}
		})
	}
	t.Run("request", func(t *testing.T) {
		// Each with trailers, then one without: the reused stream keeps
		// none of the trailers of the one before.
		for i, trailer := range []string{"rt", "rt2", ""} {
			req, _ := http.NewRequest(http.MethodPost, ts.url("/request"), io.NopCloser(strings.NewReader("hello")))
			req.ContentLength = -1
			if trailer != "" {
				req.Trailer = http.Header{"X-Req-Trailer": {trailer}}
			}
			res, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if got, want := string(b), "hello "+trailer; got != want {
				t.Errorf("request %d: handler saw %q, want %q", i, got, want)
			}
		}
	})
}

// TestReadDeadline: a deadline that passes while r.Body.Read waits for a
// client that sends nothing makes the Read fail with
// os.ErrDeadlineExceeded.
func TestReadDeadline(t *testing.T) {
	for _, tc := range []struct {
		name string
		at   func() time.Time
	}{
		{"past", func() time.Time { return time.Now().Add(-time.Second) }},
		{"later", func() time.Time { return time.Now().Add(50 * time.Millisecond) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := startServer(t, newServer(func(w http.ResponseWriter, r *http.Request) {
				errc := make(chan error, 1)
				go func() {
					_, err := r.Body.Read(make([]byte, 10))
					errc <- err
				}()
				if err := http.NewResponseController(w).SetReadDeadline(tc.at()); err != nil {
					io.WriteString(w, "SetReadDeadline: "+err.Error())
					return
				}
				select {
				case err := <-errc:
					if errors.Is(err, os.ErrDeadlineExceeded) {
						io.WriteString(w, "deadline")
					} else {
						fmt.Fprintf(w, "Read returned %v", err)
					}
				case <-time.After(failAfter):
					io.WriteString(w, "Read still waits")
				}
			}))
			rc := ts.dialRaw(t)
			rc.handshake()
			rc.headers(1, false, request("POST", "/")...)
			res := rc.readResponse(1, nil)
			if res.status != "200" || string(res.body) != "deadline" {
				t.Errorf("got %s %q, want 200 \"deadline\"", res.status, res.body)
			}
		})
	}
}

// writeDeadlineServer's handler writes to a client whose window is 0, with
// a write deadline set by setDeadline, and reports the Write's error on
// result.
func writeDeadlineServer(t *testing.T, setDeadline func(*http.ResponseController), result chan<- error) *testServer {
	return startServer(t, newServer(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		w.WriteHeader(http.StatusOK)
		rc.Flush()
		errc := make(chan error, 1)
		go func() {
			_, err := w.Write(make([]byte, 1024))
			errc <- err
		}()
		setDeadline(rc)
		select {
		case err := <-errc:
			result <- err
		case <-time.After(failAfter):
			result <- errors.New("Write still waits")
		}
	}))
}

// TestWriteDeadline: a write deadline that passes while a Write waits on
// the client's flow control makes the Write fail.
func TestWriteDeadline(t *testing.T) {
	result := make(chan error, 1)
	released, release := testnet.Releaser(t)
	ts := writeDeadlineServer(t, func(rc *http.ResponseController) {
		<-released
		rc.SetWriteDeadline(time.Now().Add(-time.Second))
	}, result)
	rc := ts.dialRaw(t)
	rc.handshake(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	rc.headers(1, true, request("GET", "/")...)
	if f, ok := rc.next().(*http2.MetaHeadersFrame); !ok || f.StreamEnded() {
		t.Fatalf("got %v, want the head without END_STREAM", f)
	}
	release()
	if err := testnet.Recv(t, result, failAfter, "the Write"); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("Write returned %v, want os.ErrDeadlineExceeded", err)
	}
}

// TestWriteDeadlineResetsStream: the response of a handler whose Write
// failed on its deadline is cut: the client must see the stream reset,
// not a clean END_STREAM that makes a truncated body look whole (as
// x/net/http2's server does: RST_STREAM INTERNAL_ERROR).
func TestWriteDeadlineResetsStream(t *testing.T) {
	result := make(chan error, 1)
	ts := writeDeadlineServer(t, func(rc *http.ResponseController) {
		rc.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	}, result)
	rc := ts.dialRaw(t)
	rc.handshake(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	rc.headers(1, true, request("GET", "/")...)
	if err := testnet.Recv(t, result, failAfter, "the Write"); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("Write returned %v, want os.ErrDeadlineExceeded", err)
	}
	res := rc.readResponse(1, nil)
	if !res.rst {
		t.Errorf("stream ended cleanly with %d body bytes after the Write failed; want RST_STREAM", len(res.body))
	}
}

// TestResetCancelsContext: RST_STREAM from the client cancels the
// handler's context, and the connection goes on.
func TestResetCancelsContext(t *testing.T) {
	started := make(chan struct{}, 1)
	done := make(chan error, 1)
	ts := startServer(t, newServer(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/block" {
			io.WriteString(w, "ok")
			return
		}
		started <- struct{}{}
		select {
		case <-r.Context().Done():
			done <- r.Context().Err()
		case <-time.After(failAfter):
			done <- errors.New("context not canceled")
		}
	}))
	rc := ts.dialRaw(t)
	rc.handshake()
	rc.headers(1, true, request("GET", "/block")...)
	testnet.Recv(t, started, failAfter, "the handler")
	rc.rst(1, http2.ErrCodeCancel)
	if err := testnet.Recv(t, done, failAfter, "the handler to return"); !errors.Is(err, context.Canceled) {
		t.Errorf("ctx.Err() = %v, want context.Canceled", err)
	}
	rc.headers(3, true, request("GET", "/next")...)
	if res := rc.readResponse(3, nil); res.status != "200" || string(res.body) != "ok" {
		t.Errorf("next stream: %s %q", res.status, res.body)
	}
}

// TestNotifyCancel: the channel a handler gives NotifyCancel
// (engine.CancelNotifier) gets a value when the client resets the stream,
// with the context's Err set by then, and one given after the reset gets
// it at once. (TestStreamCtxNotify has the rest.)
func TestNotifyCancel(t *testing.T) {
	started := make(chan struct{}, 1)
	done := make(chan error, 2)
	ts := startServer(t, newServer(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/block" {
			io.WriteString(w, "ok")
			return
		}
		cn, ok := w.(engine.CancelNotifier)
		if !ok {
			done <- errors.New("the response writer is not an engine.CancelNotifier")
			return
		}
		defer cn.NotifyCancel(nil)
		ch := make(chan struct{}, 1)
		cn.NotifyCancel(ch)
		started <- struct{}{}
		select {
		case <-ch:
			done <- r.Context().Err()
		case <-time.After(failAfter):
			done <- errors.New("no value on the channel")
		}
		late := make(chan struct{}, 1)
		cn.NotifyCancel(late)
		select {
		case <-late:
			done <- nil
		default:
			done <- errors.New("a channel given after the reset got nothing")
		}
	}))
	rc := ts.dialRaw(t)
	rc.handshake()
	rc.headers(1, true, request("GET", "/block")...)
	testnet.Recv(t, started, failAfter, "the handler")
	rc.rst(1, http2.ErrCodeCancel)
	if err := testnet.Recv(t, done, failAfter, "the handler's wake-up"); !errors.Is(err, context.Canceled) {
		t.Errorf("woken with ctx.Err() = %v, want context.Canceled", err)
	}
	if err := testnet.Recv(t, done, failAfter, "the late channel"); err != nil {
		t.Error(err)
	}
	rc.headers(3, true, request("GET", "/next")...)
	if res := rc.readResponse(3, nil); res.status != "200" || string(res.body) != "ok" {
		t.Errorf("next stream: %s %q", res.status, res.body)
	}
}

// TestPanic: a handler's panic resets its stream with INTERNAL_ERROR; the
// connection goes on.
func TestPanic(t *testing.T) {
	ts := startServer(t, newServer(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/panic":
			panic("boom")
		case "/abort":
			panic(http.ErrAbortHandler)
		case "/panic-after-head":
			w.WriteHeader(http.StatusOK)
			io.WriteString(w, "partial")
			http.NewResponseController(w).Flush()
			panic("boom")
		}
		io.WriteString(w, "ok")
	}))
	rc := ts.dialRaw(t)
	rc.handshake()
	id := uint32(1)
	for _, path := range []string{"/panic", "/abort", "/panic-after-head"} {
		rc.headers(id, true, request("GET", path)...)
		res := rc.readResponse(id, nil)
		if !res.rst || res.rstCode != http2.ErrCodeInternal || res.ended {
			t.Errorf("%s: rst %v code %v ended %v, want RST_STREAM INTERNAL_ERROR", path, res.rst, res.rstCode, res.ended)
		}
		id += 2
		rc.headers(id, true, request("GET", "/ok")...)
		if res := rc.readResponse(id, nil); res.status != "200" || string(res.body) != "ok" {
			t.Errorf("after %s: %s %q", path, res.status, res.body)
		}
		id += 2
	}
}

// TestInformational: 103 with its fields, then the final response.
func TestInformational(t *testing.T) {
	ts := startServer(t, newServer(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Set("X-Final", "1")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "body")
	}))
	rc := ts.dialRaw(t)
	rc.handshake()
	rc.headers(1, true, request("GET", "/")...)
	f, ok := rc.next().(*http2.MetaHeadersFrame)
	if !ok {
		t.Fatalf("first frame %v, want HEADERS", f)
	}
	if got := f.PseudoValue("status"); got != "103" {
		t.Fatalf(":status %s, want 103", got)
	}
	if f.StreamEnded() {
		t.Errorf("END_STREAM on the 103")
	}
	var link string
	for _, hf := range f.RegularFields() {
		if hf.Name == "link" {
			link = hf.Value
		}
	}
	if link != "</style.css>; rel=preload" {
		t.Errorf("103 link %q", link)
	}
	res := rc.readResponse(1, nil)
	if res.status != "200" || string(res.body) != "body" || res.header.Get("x-final") != "1" || !res.ended {
		t.Errorf("final: %s %v %q ended %v", res.status, res.header, res.body, res.ended)
	}
}

// TestInformationalSentAtOnce: a 103 goes out when it is written, not
// with the final response: its point is to reach the client while the
// handler still works on the response.
func TestInformationalSentAtOnce(t *testing.T) {
	started := make(chan struct{}, 1)
	go103, write103 := testnet.Releaser(t)
	released, release := testnet.Releaser(t)
	ts := startServer(t, newServer(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-go103
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		<-released
		io.WriteString(w, "body")
	}))
	rc := ts.dialRaw(t)
	rc.handshake()
	rc.headers(1, true, request("GET", "/")...)
	testnet.Recv(t, started, failAfter, "the handler")
	// Once the PING is acked, the server has read all the client sent and
	// written what that asked for; the client sends nothing more.
	if fs := rc.sync(); len(fs) > 0 {
		t.Fatalf("unexpected frames %v", fs)
	}
	write103()
	f, ok := rc.next().(*http2.MetaHeadersFrame)
	release()
	if !ok || f.PseudoValue("status") != "103" {
		t.Fatalf("got %v, want the 103", f)
	}
	if res := rc.readResponse(1, nil); res.status != "200" {
		t.Errorf("final status %s", res.status)
	}
}

// TestNoBody: HEAD, 204, 304 and a handler that writes nothing: the head
// alone, with END_STREAM, and no DATA.
func TestNoBody(t *testing.T) {
	writeErr := make(chan error, 1)
	ts := startServer(t, newServer(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hello":
			w.Header().Set("Content-Length", "5")
			io.WriteString(w, "hello")
		case "/204", "/304":
			code, _ := strconv.Atoi(r.URL.Path[1:])
			w.WriteHeader(code)
			_, err := io.WriteString(w, "x")
			writeErr <- err
		case "/nothing":
		}
	}))
	rc := ts.dialRaw(t)
	rc.handshake()
	for i, tc := range []struct {
		method, path, status, cl string
	}{
		{"HEAD", "/hello", "200", "5"},
		{"GET", "/204", "204", ""},
		{"GET", "/304", "304", ""},
		{"GET", "/nothing", "200", "0"},
		{"HEAD", "/nothing", "200", ""},
	} {
		id := uint32(2*i + 1)
		rc.headers(id, true, request(tc.method, tc.path)...)
		res := rc.readResponse(id, nil)
		if res.status != tc.status || !res.endOnHead || len(res.frames) != 1 {
			t.Errorf("%s %s: status %s, END_STREAM on the head %v, %d frames; want %s and the head alone",
				tc.method, tc.path, res.status, res.endOnHead, len(res.frames), tc.status)
		}
		if got := res.header.Get("content-length"); got != tc.cl && !(tc.cl == "" && got == "0") {
			t.Errorf("%s %s: content-length %q, want %q", tc.method, tc.path, got, tc.cl)
		}
		if strings.HasPrefix(tc.path, "/204") || strings.HasPrefix(tc.path, "/304") {
			if err := testnet.Recv(t, writeErr, failAfter, "the handler's Write"); !errors.Is(err, http.ErrBodyNotAllowed) {
				t.Errorf("%s: Write returned %v, want http.ErrBodyNotAllowed", tc.path, err)
			}
		}
		for _, f := range rc.sync() {
			if f.Header().StreamID == id {
				t.Errorf("%s %s: frame %v after END_STREAM", tc.method, tc.path, f)
			}
		}
	}
}

// TestDeclaredLength: a response shorter than its Content-Length is reset,
// not ended; one longer is cut at it, and Write reports
// http.ErrContentLength.
func TestDeclaredLength(t *testing.T) {
	type writes struct {
		n   []int
		err []error
	}
	result := make(chan writes, 1)
	ts := startServer(t, newServer(func(w http.ResponseWriter, r *http.Request) {
		var sizes []int
		switch r.URL.Path {
		case "/short":
			sizes = []int{5}
		case "/none":
			sizes = nil
		case "/long":
			sizes = []int{15}
		case "/long-later":
			sizes = []int{10, 5}
		case "/long-empty":
			sizes = []int{10, 0}
		}
		w.Header().Set("Content-Length", "10")
		var got writes
		for _, n := range sizes {
			n, err := w.Write(bytes.Repeat([]byte("x"), n))
			got.n = append(got.n, n)
			got.err = append(got.err, err)
		}
		if r.URL.Path == "/none" {
			w.WriteHeader(http.StatusOK)
		}
		result <- got
	}))
	rc := ts.dialRaw(t)
	rc.handshake()
	id := uint32(1)
	for _, path := range []string{"/short", "/none"} {
		rc.headers(id, true, request("GET", path)...)
		testnet.Recv(t, result, failAfter, "the handler")
		res := rc.readResponse(id, nil)
		if !res.rst || res.ended {
			t.Errorf("%s: ended %v (body %q), rst %v; want RST_STREAM and no END_STREAM", path, res.ended, res.body, res.rst)
		}
		id += 2
	}
	for _, tc := range []struct {
		path string
		n    []int
		err  []error
	}{
		{"/long", []int{10}, []error{http.ErrContentLength}},
		{"/long-later", []int{10, 0}, []error{nil, http.ErrContentLength}},
		{"/long-empty", []int{10, 0}, []error{nil, nil}},
	} {
		rc.headers(id, true, request("GET", tc.path)...)
		got := testnet.Recv(t, result, failAfter, "the handler")
		if !reflect.DeepEqual(got.n, tc.n) || !reflect.DeepEqual(got.err, tc.err) {
			t.Errorf("%s: Write returned %v %v, want %v %v", tc.path, got.n, got.err, tc.n, tc.err)
		}
		res := rc.readResponse(id, nil)
		if !res.ended || string(res.body) != "xxxxxxxxxx" {
			t.Errorf("%s: ended %v rst %v body %q, want the 10 bytes declared", tc.path, res.ended, res.rst, res.body)
		}
		// Nothing may follow END_STREAM on the stream.
		for _, f := range rc.sync() {
			if f.Header().StreamID == id {
				t.Errorf("%s: frame %v after END_STREAM", tc.path, f)
			}
		}
		id += 2
	}
}

// TestShutdown drains a connection with a stream in flight: GOAWAY with
// 2^31-1 and a PING, a stream opened meanwhile served, then the final
// GOAWAY; a stream past it is not served; the stream in flight ends; the
// connection closes and Shutdown returns nil.
func TestShutdown(t *testing.T) {
	released, release := testnet.Releaser(t)
	started := make(chan string, 10)
	ts := startServer(t, newServer(func(w http.ResponseWriter, r *http.Request) {
		started <- r.URL.Path
		if r.URL.Path == "/block" {
			<-released
		}
		io.WriteString(w, "done "+r.URL.Path)
	}))
	rc := ts.dialRaw(t)
	rc.handshake()
	rc.headers(1, true, request("GET", "/block")...)
	if got := testnet.Recv(t, started, failAfter, "the handler"); got != "/block" {
		t.Fatalf("handler saw %s", got)
	}

	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), failAfter)
		defer cancel()
		shut <- ts.srv.Shutdown(ctx)
	}()

	ga, ok := rc.next().(*http2.GoAwayFrame)
	if !ok || ga.LastStreamID != 1<<31-1 || ga.ErrCode != http2.ErrCodeNo {
		t.Fatalf("got %v, want GOAWAY 2^31-1 NO_ERROR", ga)
	}
	ping, ok := rc.next().(*http2.PingFrame)
	if !ok || ping.IsAck() {
		t.Fatalf("got %v, want a PING", ping)
	}
	// Sent before the client saw the final GOAWAY: served.
	rc.headers(3, true, request("GET", "/between")...)
	if res := rc.readResponse(3, nil); res.status != "200" || string(res.body) != "done /between" {
		t.Errorf("stream 3: %s %q", res.status, res.body)
	}
	rc.ping(true, ping.Data)
	ga, ok = rc.next().(*http2.GoAwayFrame)
	if !ok || ga.LastStreamID != 3 || ga.ErrCode != http2.ErrCodeNo {
		t.Fatalf("got %v, want GOAWAY 3 NO_ERROR", ga)
	}
	rc.headers(5, true, request("GET", "/never")...)
	// The server has read it once the PING is acked: it does not close
	// the connection with it unread.
	for _, f := range rc.sync() {
		if f.Header().StreamID == 5 {
			if _, ok := f.(*http2.RSTStreamFrame); !ok {
				t.Errorf("stream 5 past the final GOAWAY: %v", f)
			}
		}
	}
	release()
	res := rc.readResponse(1, func(f http2.Frame) {
		if f.Header().StreamID == 5 {
			if _, ok := f.(*http2.RSTStreamFrame); !ok {
				t.Errorf("stream 5 past the final GOAWAY: %v", f)
			}
		}
	})
	if res.status != "200" || string(res.body) != "done /block" || !res.ended {
		t.Errorf("stream 1: %s %q ended %v", res.status, res.body, res.ended)
	}
	rc.expectEOF()
	if err := testnet.Recv(t, shut, failAfter, "Shutdown"); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	close(started)
	for p := range started {
		if p != "/between" {
			t.Errorf("handler saw %s", p)
		}
	}
}

// TestShutdownNoPingAck: a client that never acks the drain's PING still
// gets the final GOAWAY, and an idle connection then closes.
func TestShutdownNoPingAck(t *testing.T) {
	ts := startServer(t, newServer(func(w http.ResponseWriter, r *http.Request) {}))
	rc := ts.dialRaw(t)
	rc.handshake()
	rc.headers(1, true, request("GET", "/")...)
	if res := rc.readResponse(1, nil); res.status != "200" {
		t.Fatalf("status %s", res.status)
	}
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), failAfter)
		defer cancel()
		shut <- ts.srv.Shutdown(ctx)
	}()
	rc.expectDrain(1, false)
	if err := testnet.Recv(t, shut, failAfter, "Shutdown"); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

// TestShutdownDeadline: when ctx ends before the streams do, Shutdown
// closes the connections, cancels their handlers and returns ctx's error.
func TestShutdownDeadline(t *testing.T) {
	started := make(chan struct{}, 1)
	handlerErr := make(chan error, 1)
	ts := startServer(t, newServer(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		select {
		case <-r.Context().Done():
			handlerErr <- r.Context().Err()
		case <-time.After(failAfter):
			handlerErr <- errors.New("context not canceled")
		}
	}))
	rc := ts.dialRaw(t)
	rc.handshake()
	rc.headers(1, true, request("GET", "/")...)
	testnet.Recv(t, started, failAfter, "the handler")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- ts.srv.Shutdown(ctx) }()
	if err := testnet.Recv(t, shut, failAfter, "Shutdown"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown: %v, want context.DeadlineExceeded", err)
	}
	if err := testnet.Recv(t, handlerErr, failAfter, "the handler"); err == nil || err.Error() == "context not canceled" {
		t.Errorf("handler: %v", err)
	}
	rc.expectEOF()
}

// TestIdleTimeout: an idle connection gets GOAWAY NO_ERROR and is closed.
func TestIdleTimeout(t *testing.T) {
	srv := newServer(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	srv.IdleTimeout = 300 * time.Millisecond
	ts := startServer(t, srv)
	rc := ts.dialRaw(t)
	rc.handshake()
	rc.headers(1, true, request("GET", "/")...)
	if res := rc.readResponse(1, nil); res.status != "200" {
		t.Fatalf("status %s", res.status)
	}
	rc.expectGoAway(http2.ErrCodeNo)
}

// TestIdleTimeoutAfterLongStream: the connection idles out after a stream
// that was still open when the client sent its last frame (the read loop
// then waits on a client that sends nothing more).
func TestIdleTimeoutAfterLongStream(t *testing.T) {
	released, release := testnet.Releaser(t)
	srv := newServer(func(w http.ResponseWriter, r *http.Request) {
		<-released
		io.WriteString(w, "ok")
	})
	srv.IdleTimeout = 300 * time.Millisecond
	ts := startServer(t, srv)
	rc := ts.dialRaw(t)
	p := [8]byte{'l', 'a', 's', 't'}
	rc.batch(func() {
		rc.preface()
		rc.headers(1, true, request("GET", "/")...)
		rc.ping(false, p)
	})
	// The PING's ack is written after the read loop read all the client
	// sent, with the stream open; the client sends nothing more.
	for {
		if f, ok := rc.next().(*http2.PingFrame); ok && f.IsAck() && f.Data == p {
			break
		}
	}
	release()
	if res := rc.readResponse(1, nil); res.status != "200" {
		t.Fatalf("status %s", res.status)
	}
	rc.expectGoAway(http2.ErrCodeNo)
}

// TestPeerGone: a connection whose client is gone ends, whatever it was
// doing when the client left. The case that hid it: the client's last
// frame and its FIN or reset arrive while the read loop is busy with the
// frame before (here held inside it: HoldConns), so that the readiness of
// both is taken at once and the read that follows returns the frame's bytes
// alone; the end then gives no readiness of its own, and only another read
// finds it (connReader.session). Every ServeConn must return within
// failAfter, the default idle timeout (two minutes) being far longer.
func TestPeerGone(t *testing.T) {
	const conns = 4
	for _, tc := range []struct {
		name string
		// busy: a stream's handler is running while the client leaves, and
		// is let go only after it left.
		busy bool
		// last sends the client's last frame; reset ends the connection
		// with a reset, else the client shuts its side down (FIN).
		last  func(rc *rawClient)
		reset bool
		// writeFails: the connection is ended as a failed write ends it,
		// before the read loop goes on.
		writeFails bool
	}{
		// Idle, then a frame that asks for no answer, and the end.
		{name: "idle, FIN", last: windowUpdate},
		{name: "idle, reset", last: windowUpdate, reset: true},
		// A stream runs: its handler writes nothing that would meet the
		// end before the client has left.
		{name: "busy, FIN", busy: true, last: windowUpdate},
		{name: "busy, stream reset, FIN", busy: true, last: func(rc *rawClient) { rc.rst(1, http2.ErrCodeCancel) }},
		// A stream runs, and a write fails on the reset socket before the
		// read loop reads the client's last frame: the writer shuts the
		// connection down, which must wake the read loop once it waits
		// (connReader.shutdown).
		{name: "busy, reset, write failed", busy: true, last: windowUpdate, reset: true, writeFails: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			released, release := testnet.Releaser(t)
			started := make(chan struct{}, conns)
			srv := newServer(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/busy" {
					started <- struct{}{}
					<-released
				}
				io.WriteString(w, "ok")
			})
			ended := make(chan struct{}, conns)
			ts := startServerFunc(t, srv, func(nc net.Conn) {
				srv.ServeConn(nc, nil)
				ended <- struct{}{}
			})
			rcs := make([]*rawClient, conns)
			for i := range rcs {
				rc := ts.dialRaw(t)
				rc.handshake()
				if tc.busy {
					rc.headers(1, true, request("GET", "/busy")...)
					testnet.Recv(t, started, failAfter, "the handler to start")
				} else {
					rc.headers(1, true, request("GET", "/")...)
					if res := rc.readResponse(1, nil); res.status != "200" {
						t.Fatalf("status %s", res.status)
					}
				}
				rcs[i] = rc
			}
			for i, rc := range rcs {
				// The PING's ack is written once the read loop, before it
				// waits, has let go of the mutex (conn.idle): holding it
				// then keeps the read loop inside the next frame.
				p := [8]byte{'s', 'y', 'n', 'c', byte(i)}
				rc.ping(false, p)
				for {
					if f, ok := rc.next().(*http2.PingFrame); ok && f.IsAck() && f.Data == p {
						break
					}
				}
			}
			var once sync.Once
			unlock := h2.HoldConns(srv)
			t.Cleanup(func() { once.Do(unlock) }) // a failing wait must not leave them held
			for _, rc := range rcs {
				windowUpdate(rc) // the read loops read it, and wait for the mutex
			}
			waitSockets(t, srv, "the frame read", func(unread int, _ bool) bool { return unread == 0 })
			for _, rc := range rcs {
				tc.last(rc)
				tcp := rc.nc.(*net.TCPConn)
				if tc.reset {
					tcp.SetLinger(0)
					tcp.Close()
				} else {
					tcp.CloseWrite()
				}
			}
			waitSockets(t, srv, "the peer's end", func(_ int, ended bool) bool { return ended })
			if tc.writeFails {
				h2.EndHeld(srv)
			}
			once.Do(unlock)
			release()
			for i := range conns {
				testnet.Recv(t, ended, failAfter, fmt.Sprintf("connection %d of %d to end", i+1, conns))
			}
		})
	}
}

// TestLiveness: a busy connection whose client sends nothing more and
// answers no PING (a peer gone without a FIN or a reset, or whose end came
// unseen) ends an idle timeout and a PING timeout later, and its stream's
// handler is let go; a client that answers keeps its connection.
func TestLiveness(t *testing.T) {
	for _, answer := range []bool{false, true} {
		t.Run(fmt.Sprintf("answers %v", answer), func(t *testing.T) {
			gone := make(chan struct{}, 1)
			srv := newServer(func(w http.ResponseWriter, r *http.Request) {
				<-r.Context().Done()
				gone <- struct{}{}
			})
			srv.IdleTimeout = 200 * time.Millisecond
			ended := make(chan struct{}, 1)
			ts := startServerFunc(t, srv, func(nc net.Conn) {
				srv.ServeConn(nc, nil)
				ended <- struct{}{}
			})
			rc := ts.dialRaw(t)
			rc.handshake()
			rc.headers(1, true, request("GET", "/")...)
			pings := 0
			for pings < 3 {
				f, err := rc.fr.ReadFrame()
				if err != nil {
					if answer {
						t.Fatalf("connection ended after %d PINGs answered: %v", pings, err)
					}
					break
				}
				if p, ok := f.(*http2.PingFrame); ok && !p.IsAck() {
					pings++
					if answer {
						rc.ping(true, p.Data)
					}
				}
			}
			if answer {
				return // three liveness PINGs answered, the connection still open
			}
			if pings != 1 {
				t.Errorf("%d PINGs before the end, want 1", pings)
			}
			testnet.Recv(t, ended, failAfter, "the connection to end")
			testnet.Recv(t, gone, failAfter, "the handler's context to be canceled")
		})
	}
}

// TestConnFreed: a connection that ended is garbage, even when a stream's
// handler left a deadline far ahead (as the proxy leaves a read deadline on
// a body that failed): an armed deadline timer must not hold the stream,
// and with it the connection and its buffers, until it fires.
func TestConnFreed(t *testing.T) {
	started := make(chan struct{}, 4)
	srv := newServer(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		rc.SetReadDeadline(time.Now().Add(time.Hour))
		rc.SetWriteDeadline(time.Now().Add(time.Hour))
		started <- struct{}{}
		io.Copy(io.Discard, r.Body) // fails when the connection goes
	})
	ts := startServer(t, srv)
	var rcs []*rawClient
	for range 4 {
		rc := ts.dialRaw(t)
		rc.handshake()
		rc.headers(1, false, request("POST", "/")...)
		testnet.Recv(t, started, failAfter, "the handler to start")
		rcs = append(rcs, rc)
	}
	var freed atomic.Int32
	if n := h2.WatchConns(srv, &freed); n != len(rcs) {
		t.Fatalf("%d connections, want %d", n, len(rcs))
	}
	for _, rc := range rcs {
		rc.nc.Close()
	}
	for deadline := time.Now().Add(failAfter); freed.Load() < int32(len(rcs)); {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d connections freed after they ended", freed.Load(), len(rcs))
		}
		runtime.GC() // a cleanup runs after a collection finds its object unreachable
		time.Sleep(10 * time.Millisecond)
	}
}

func windowUpdate(rc *rawClient) { rc.check(rc.fr.WriteWindowUpdate(0, 1)); rc.flush() }

// waitSockets waits until ok holds for the socket of every connection srv
// serves: a state of the kernel's, which no event announces.
func waitSockets(t *testing.T, srv *h2.Server, what string, ok func(unread int, ended bool) bool) {
	t.Helper()
	for deadline := time.Now().Add(failAfter); ; {
		unread, ended := h2.SocketStates(srv)
		all := true
		for i := range unread {
			all = all && ok(unread[i], ended[i])
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: unread %v, ended %v", what, unread, ended)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestUpgrade serves a connection upgraded from HTTP/1.1 (h2c): the
// upgrading request is stream 1.
func TestUpgrade(t *testing.T) {
	for _, tc := range []struct {
		name       string
		requestURI string
	}{
		// As the HTTP/1.1 server hands it over.
		{"server request", "/up?q=1"},
		// As http.NewRequest makes it: no RequestURI.
		{"client request", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprintf(w, "%s %s %s %s %s", r.Method, r.URL.Path, r.URL.RawQuery, r.Host, r.Header.Get("X-Up"))
			})
			ts := startServerFunc(t, srv, func(nc net.Conn) {
				req, err := http.NewRequest("GET", "http://x/up?q=1", nil)
				if err != nil {
					panic(err)
				}
				req.RequestURI = tc.requestURI
				req.Header.Set("X-Up", "yes")
				srv.ServeConn(nc, &h2.ConnOptions{Upgrade: req, Settings: []byte{}})
			})
			rc := ts.dialRaw(t)
			if f, ok := rc.readRaw().(*http2.SettingsFrame); !ok || f.IsAck() {
				t.Fatalf("first frame %v, want SETTINGS", f)
			}
			rc.preface()
			res := rc.readResponse(1, nil)
			if got, want := string(res.body), "GET /up q=1 x yes"; res.status != "200" || got != want {
				t.Errorf("got %s %q, want 200 %q", res.status, got, want)
			}
			rc.headers(3, true, request("GET", "/next")...)
			if res := rc.readResponse(3, nil); res.status != "200" || !strings.HasPrefix(string(res.body), "GET /next") {
				t.Errorf("stream 3: %s %q", res.status, res.body)
			}
		})
	}
}

// TestProtocolErrors: malformed frames and requests from a raw client.
func TestProtocolErrors(t *testing.T) {
	called := make(chan string, 100)
	ts := startServer(t, newServer(func(w http.ResponseWriter, r *http.Request) {
		called <- r.URL.Path
		io.ReadAll(r.Body)
		io.WriteString(w, "ok")
	}))
	drain := func() []string {
		var paths []string
		for {
			select {
			case p := <-called:
				paths = append(paths, p)
			default:
				return paths
			}
		}
	}
	connErrors := []struct {
		name string
		send func(rc *rawClient)
		code http2.ErrCode
	}{
		{"DATA on stream 0", func(rc *rawClient) { rc.data(0, false, []byte("x")) }, http2.ErrCodeProtocol},
		{"DATA on an idle stream", func(rc *rawClient) { rc.data(5, false, []byte("x")) }, http2.ErrCodeProtocol},
		{"frame over MaxFrameSize", func(rc *rawClient) {
			// The header alone: the server reads no more of it.
			n := h2.MaxFrameSize + 1
			rc.nc.Write([]byte{byte(n >> 16), byte(n >> 8), byte(n), byte(http2.FrameData), 0, 0, 0, 0, 1})
		}, http2.ErrCodeFrameSize},
		{"HEADERS on an even stream", func(rc *rawClient) { rc.headers(2, true, request("GET", "/even")...) }, http2.ErrCodeProtocol},
	}
	for _, tc := range connErrors {
		t.Run(tc.name, func(t *testing.T) {
			rc := ts.dialRaw(t)
			rc.handshake()
			tc.send(rc)
			rc.expectGoAway(tc.code)
		})
	}

	streamErrors := []struct {
		name string
		send func(rc *rawClient)
	}{
		{"uppercase field name", func(rc *rawClient) {
			rc.headers(1, true, request("GET", "/upper", "X-Upper", "v")...)
		}},
		{"connection-specific field", func(rc *rawClient) {
			rc.headers(1, true, request("GET", "/connection", "connection", "keep-alive")...)
		}},
		{"content-length longer than DATA", func(rc *rawClient) {
			rc.headers(1, false, request("POST", "/cl", "content-length", "5")...)
			rc.data(1, true, []byte("abc"))
		}},
		{"content-length shorter than DATA", func(rc *rawClient) {
			rc.headers(1, false, request("POST", "/cl", "content-length", "2")...)
			rc.data(1, true, []byte("abc"))
		}},
		{"second HEADERS without END_STREAM", func(rc *rawClient) {
			rc.headers(1, false, request("POST", "/twice")...)
			rc.headers(1, false, "x-more", "1")
		}},
		{"pseudo-field in trailers", func(rc *rawClient) {
			rc.headers(1, false, request("POST", "/trailers")...)
			rc.headers(1, true, ":path", "/again")
		}},
	}
	for _, tc := range streamErrors {
		t.Run(tc.name, func(t *testing.T) {
			rc := ts.dialRaw(t)
			rc.handshake()
			tc.send(rc)
			res := rc.readResponse(1, nil)
			if !res.rst || res.rstCode != http2.ErrCodeProtocol || res.ended {
				t.Errorf("rst %v code %v ended %v, want RST_STREAM PROTOCOL_ERROR", res.rst, res.rstCode, res.ended)
			}
			// The connection goes on.
			rc.headers(3, true, request("GET", "/after")...)
			if res := rc.readResponse(3, nil); res.status != "200" {
				t.Errorf("next stream: status %s", res.status)
			}
			for _, p := range drain() {
				if p != "/after" && p != "/cl" && p != "/twice" && p != "/trailers" {
					t.Errorf("handler saw the malformed request %s", p)
				}
			}
		})
	}
}

// TestGoroutines: once the connections are gone, the server's goroutines
// are too (its idle workers retire within 2*workers.Idle).
func TestGoroutines(t *testing.T) {
	base := runtime.NumGoroutine()
	ts := startServer(t, newServer(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, r.URL.Path)
	}))
	var trs []*http2.Transport
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for range 8 {
		tr := ts.transport(t)
		trs = append(trs, tr)
		c := &http.Client{Transport: tr, Timeout: failAfter}
		wg.Go(func() {
			// One request first, so that the client has its connection
			// before five goroutines ask for one at once: a client may
			// dial again while its first dial is under way (net/http's,
			// which x/net's wraps from Go 1.27, does).
			res, err := c.Get(ts.url("/first"))
			if err != nil {
				errc <- err
				return
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			var inner sync.WaitGroup
			for g := range 5 {
				inner.Go(func() {
					for i := range 50 {
						path := fmt.Sprintf("/%d/%d", g, i)
						var body io.Reader
						if i%2 == 0 {
							body = strings.NewReader(path)
						}
						req, _ := http.NewRequest(http.MethodPost, ts.url(path), body)
						res, err := c.Do(req)
						if err != nil {
							errc <- err
							return
						}
						b, _ := io.ReadAll(res.Body)
						res.Body.Close()
						if string(b) != path {
							errc <- fmt.Errorf("%s: body %q", path, b)
							return
						}
					}
				})
			}
			inner.Wait()
		})
	}
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
	if n := ts.conns.Load(); n != 8 {
		t.Errorf("%d connections, want 8", n)
	}
	for _, tr := range trs {
		tr.CloseIdleConnections()
	}
	// Goroutines going away is no event to wait on: it is polled, within
	// the workers' retirement and failAfter beyond it.
	deadline := time.Now().Add(2*workers.Idle + failAfter)
	n := runtime.NumGoroutine()
	for n > base+3 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		n = runtime.NumGoroutine()
	}
	if n > base+3 {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Errorf("%d goroutines, %d before the connections:\n%s", n, base, buf)
	}
}

// TestClientGoAway: frames a client sends after its GOAWAY (h2spec 7/1:
// one with an unknown error code, then a PING) are still read and
// answered; the connection is not cut under them.
func TestClientGoAway(t *testing.T) {
	ts := startServer(t, newServer(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	rc := ts.dialRaw(t)
	rc.handshake()
	p := [8]byte{'a', 'f', 't', 'e', 'r'}
	rc.batch(func() {
		rc.check(rc.fr.WriteGoAway(0, http2.ErrCode(0xff), nil))
		rc.ping(false, p)
	})
	for {
		if f, ok := rc.next().(*http2.PingFrame); ok && f.IsAck() && f.Data == p {
			return
		}
	}
}

// TestClientGoAwayDrains: an idle connection whose client sent GOAWAY is
// drained as at Shutdown (GOAWAY, PING, the final GOAWAY) and closed by
// the server, and Shutdown then has nothing to wait for.
func TestClientGoAwayDrains(t *testing.T) {
	ts := startServer(t, newServer(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	rc := ts.dialRaw(t)
	rc.handshake()
	rc.headers(1, true, request("GET", "/")...)
	if res := rc.readResponse(1, nil); res.status != "200" {
		t.Fatalf("status %s", res.status)
	}
	rc.check(rc.fr.WriteGoAway(0, http2.ErrCodeNo, nil))
	rc.flush()
	rc.expectDrain(1, true)
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	defer cancel()
	if err := ts.srv.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

// stuckConn is a server connection whose writes, once stuck is set, never
// complete: each waits for its write deadline, as a write to a client that
// does not read does. end is the deadline that ended the first of them. A
// stuck write only takes from SetWriteDeadline (an atomic load, a
// receive on a channel with room for every send), never gives to it, so
// that the race detector sees the writer and the goroutine that sets the
// deadline as the real socket would leave them: unordered.
type stuckConn struct {
	net.Conn
	stuck   atomic.Bool
	entered chan struct{} // closed when the first stuck write starts
	once    sync.Once
	dl      atomic.Int64 // the write deadline, Unix nanoseconds, or 0
	changed chan byte    // a deadline was set; room for every set (not struct{}: see newStuckConn)
	mu      sync.Mutex
	end     time.Time
}

// newStuckConn wraps nc. The race detector orders a buffered channel's
// sends and receives slot by slot, and a channel of empty elements has one
// slot for all: a stuck write's receive would then order the writer before
// the next SetWriteDeadline.
func newStuckConn(nc net.Conn) *stuckConn {
	return &stuckConn{Conn: nc, entered: make(chan struct{}), changed: make(chan byte, 64)}
}

func (c *stuckConn) SetWriteDeadline(t time.Time) error {
	var n int64
	if !t.IsZero() {
		n = t.UnixNano()
	}
	c.dl.Store(n)
	select {
	case c.changed <- 0:
	default:
	}
	return c.Conn.SetWriteDeadline(t)
}

func (c *stuckConn) Write(p []byte) (int, error) {
	if !c.stuck.Load() {
		return c.Conn.Write(p)
	}
	c.once.Do(func() { close(c.entered) })
	for {
		dl := c.dl.Load()
		if dl == 0 {
			<-c.changed
			continue
		}
		d := time.Until(time.Unix(0, dl))
		if d <= 0 {
			c.mu.Lock()
			if c.end.IsZero() {
				c.end = time.Unix(0, dl)
			}
			c.mu.Unlock()
			return 0, os.ErrDeadlineExceeded
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-c.changed:
		}
		t.Stop()
	}
}

// unorderedWrite writes p to nc with the bare system call. syscall.Write
// tells the race detector that every write happens before every later
// read in the process, which would order this test's goroutine, and so the
// server's writer it heard from, before the server's read loop: a client
// in another process, as in production, orders nothing.
func unorderedWrite(t *testing.T, nc net.Conn, p []byte) {
	t.Helper()
	rc, err := nc.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var errno syscall.Errno
	rc.Write(func(fd uintptr) bool {
		_, _, errno = syscall.Syscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		return errno != syscall.EAGAIN
	})
	if errno != 0 {
		t.Fatalf("write: %v", errno)
	}
}

// TestConnErrorCutsStuckWrite: a connection error while a write to the
// client is stuck bounds that write by the GOAWAY's short deadline (a
// second), not the minute of WriteTimeout, and the connection closes: an
// invalid preface while the server's SETTINGS are stuck (under -race this
// covers the writer's deadline bookkeeping, which the GOAWAY touched during
// the write), and DATA on stream 0 while a response is. The deadline is
// compared with half of WriteTimeout, which tells the two apart with room
// for a slow machine between the error and the deadline it sets.
func TestConnErrorCutsStuckWrite(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(rc *rawClient, sc *stuckConn) (errAt time.Time)
	}{
		{"invalid preface", func(rc *rawClient, sc *stuckConn) time.Time {
			testnet.Recv(t, sc.entered, failAfter, "the SETTINGS write")
			errAt := time.Now()
			unorderedWrite(t, rc.nc, []byte("PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n"))
			return errAt
		}},
		{"DATA on stream 0", func(rc *rawClient, sc *stuckConn) time.Time {
			rc.handshake()
			sc.stuck.Store(true)
			rc.headers(1, true, request("GET", "/")...)
			testnet.Recv(t, sc.entered, failAfter, "the response's write")
			errAt := time.Now()
			rc.data(0, false, []byte("x"))
			return errAt
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conns := make(chan *stuckConn, 1)
			srv := newServer(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
			ts := startServerFunc(t, srv, func(nc net.Conn) {
				c := newStuckConn(nc)
				c.stuck.Store(tc.name == "invalid preface")
				conns <- c
				srv.ServeConn(c, nil)
			})
			rc := ts.dialRaw(t)
			sc := testnet.Recv(t, conns, failAfter, "the connection")
			errAt := tc.run(rc, sc)
			rc.expectEOF()
			sc.mu.Lock()
			end := sc.end
			sc.mu.Unlock()
			if bound := h2.WriteTimeout / 2; end.IsZero() || end.Sub(errAt) > bound {
				t.Errorf("the stuck write ended at its deadline %v after the error, want the GOAWAY's (under %v)", end.Sub(errAt), bound)
			}
		})
	}
}
