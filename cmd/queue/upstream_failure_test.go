package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/queue-dev/queue/proxy"
)

// TestUpstreamIdleCloseRace: an upstream that closes idle keep-alive
// connections after 300 ms, hit about every 300 ms (280 to 320 ms, so that
// some requests land right as the upstream closes). A request that may be
// sent twice (a GET, a POST with Idempotency-Key) and meets a connection
// the upstream just closed is sent again on a new one: the client never
// sees a 502. A plain POST is never sent twice: it may get 502 when it
// lands right on the close. Time passing is what is tested, hence the
// sleeps.
func TestUpstreamIdleCloseRace(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{modeH1, modeH2C} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				fmt.Fprintf(w, "%s %d", r.Method, len(b))
			}))
			up.Config.IdleTimeout = 300 * time.Millisecond
			var accepts atomic.Int64
			up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					accepts.Add(1)
				}
			}
			up.Start()
			t.Cleanup(up.Close)
			q := startQueue(t, hostPort(up), "--probe", "none")
			c, base := q.client(t, mode)
			const rounds = 15 // 15 * ~300ms: under 5 s
			cut := 0
			for i := range rounds {
				if i > 0 {
					time.Sleep(time.Duration(280+10*(i%5)) * time.Millisecond) // around the upstream's idle timeout
				}
				for _, tt := range []struct {
					method string
					body   string
					keyed  bool // Idempotency-Key: may be sent twice
				}{
					{http.MethodGet, "", false},
					{http.MethodPost, "", true},
					{http.MethodPost, strings.Repeat("p", 3000), true},
					{http.MethodPost, strings.Repeat("p", 3000), false},
				} {
					var body io.Reader
					if tt.body != "" {
						body = strings.NewReader(tt.body)
					}
					req, _ := http.NewRequest(tt.method, base+"/", body)
					if tt.keyed {
						req.Header.Set("Idempotency-Key", fmt.Sprint(i))
					}
					res, err := c.Do(req)
					if err != nil {
						t.Errorf("round %d %s: %v", i, tt.method, err)
						continue
					}
					b, err := io.ReadAll(res.Body)
					res.Body.Close()
					if tt.method == http.MethodPost && !tt.keyed && res.StatusCode == 502 {
						cut++
						continue
					}
					if want := fmt.Sprintf("%s %d", tt.method, len(tt.body)); err != nil || res.StatusCode != 200 || string(b) != want {
						t.Errorf("round %d %s (key %v): got %d %q %v, want 200 %q", i, tt.method, tt.keyed, res.StatusCode, b, err, want)
					}
				}
			}
			t.Logf("%d of %d plain POSTs met the close (502)", cut, rounds)
			if n := accepts.Load(); n <= 1 {
				t.Errorf("upstream accepted %d connections: its idle timeout never closed one under queue", n)
			}
		})
	}
}

// TestUpstreamDiesMidResponse: the upstream sends a head and 100 bytes,
// flushed, then dies (an HTTP/1.1 upstream closes its connection; an h2c
// upstream resets the stream): the response is cut, never ended cleanly
// and never given a status of queue's own (docs/contract.md, errors).
//
// When the upstream dies only once the client has the head ("after the
// head": it holds its connection until then, so the head must come through
// while it does), the client gets the 200, the 100 bytes or a prefix of
// them, and then an error. When it dies at once, the head, the bytes and
// the end may reach queue in one read, and queue writes nothing of a
// response it has not flushed yet: the client then gets the cut in place
// of the head (the connection closed, the stream reset), or else, if the
// head went out first, what the first case gets.
func TestUpstreamDiesMidResponse(t *testing.T) {
	t.Parallel()
	var held sync.Map // the id query parameter: a channel closed when its upstream is to die
	handler := func(h2c bool) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("framing") == "length" {
				w.Header().Set("Content-Length", "1000")
			}
			io.WriteString(w, strings.Repeat("a", 100))
			w.(http.Flusher).Flush()
			if ch, ok := held.Load(r.URL.Query().Get("id")); ok {
				select {
				case <-ch.(chan struct{}):
				case <-r.Context().Done():
				}
			}
			if h2c {
				panic(http.ErrAbortHandler) // resets the stream
			}
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				panic(err)
			}
			conn.Close()
		}
	}
	qs := map[string]*testQueue{
		"http1": startQueue(t, hostPort(h1Upstream(t, handler(false)))),
		"h2c":   startQueue(t, hostPort(h2cUpstream(t, handler(true))), "--upstream-protocol", "h2c"),
	}
	// cut reports an error that is the cut of a response in place of its
	// head, as the client's mode shows it.
	cut := func(mode string, err error) bool {
		if mode == modeH2C {
			var se http2.StreamError
			return errors.As(err, &se)
		}
		return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
	}
	for _, up := range []string{"http1", "h2c"} {
		for _, framing := range []string{"length", "chunked"} {
			for _, mode := range []string{modeH1, modeH2C} {
				for _, when := range []string{"after the head", "at once"} {
					t.Run(up+"/"+framing+"/"+mode+"/"+when, func(t *testing.T) {
						t.Parallel()
						c, base := qs[up].client(t, mode)
						target := base + "/?framing=" + framing
						die := func() {}
						if when == "after the head" {
							ch := make(chan struct{})
							held.Store(t.Name(), ch)
							die = sync.OnceFunc(func() { close(ch) })
							defer die()
							target += "&id=" + url.QueryEscape(t.Name())
						}
						res, err := c.Get(target)
						die()
						if err != nil {
							if when == "after the head" {
								t.Fatalf("request failed before the response head, which the upstream had flushed and held: %v", err)
							}
							if !cut(mode, err) {
								t.Fatalf("request failed before the response head with %v (%T), want the cut of the response", err, err)
							}
							t.Logf("cut before the head: %v", err)
							return
						}
						defer res.Body.Close()
						b, err := io.ReadAll(res.Body)
						if err == nil {
							t.Fatalf("status %d, read %d body bytes and a clean end; want a read error", res.StatusCode, len(b))
						}
						if res.StatusCode != 200 {
							t.Errorf("status %d, want 200 (the upstream's, then cut)", res.StatusCode)
						}
						if len(b) > 100 || strings.Trim(string(b), "a") != "" {
							t.Errorf("got %d body bytes %.20q, want a prefix of the 100 the upstream sent", len(b), b)
						}
						switch mode {
						case modeH1:
							if !errors.Is(err, io.ErrUnexpectedEOF) {
								t.Errorf("read error %v, want unexpected EOF", err)
							}
						case modeH2C:
							var se http2.StreamError
							if !errors.As(err, &se) {
								t.Errorf("read error %v (%T), want an HTTP/2 stream error", err, err)
							}
						}
					})
				}
			}
		}
	}
}

// rawListener serves every accepted connection with serve on its own
// goroutine until the test ends.
func rawListener(t *testing.T, serve func(c *net.TCPConn, n int64)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := int64(0); ; n++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				serve(c.(*net.TCPConn), n)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return ln.Addr().String()
}

// readRequestHead reads up to the empty line that ends a request head.
func readRequestHead(br *bufio.Reader) error {
	for range 1000 {
		line, err := br.ReadString('\n')
		if err != nil {
			return err
		}
		if line == "\r\n" || line == "\n" {
			return nil
		}
	}
	return errors.New("head too long")
}

func countFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count open files: %v", err)
	}
	return len(ents)
}

// TestLeakUpstreamFailures: an upstream that resets, one that answers
// garbage and one that stalls (--response-start-timeout 300ms) get
// 502/502/504 with their texts; after 200 such requests the goroutines
// and open files return to where they were.
//
// Not parallel: it counts the process's goroutines and files.
func TestLeakUpstreamFailures(t *testing.T) {
	reset := rawListener(t, func(c *net.TCPConn, n int64) {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n%2 == 1 {
			readRequestHead(bufio.NewReader(c)) // reset after the request, else before
		}
		c.SetLinger(0)
		c.Close()
	})
	garbage := rawListener(t, func(c *net.TCPConn, _ int64) {
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if readRequestHead(bufio.NewReader(c)) == nil {
			io.WriteString(c, "SSH-2.0-OpenSSH_9.2\r\nnot http at all\r\n\r\n")
		}
	})
	stall := rawListener(t, func(c *net.TCPConn, _ int64) {
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.Copy(io.Discard, c) // never answers; ends when queue closes
	})
	tests := []struct {
		name     string
		q        *testQueue
		wantCode int
		wantBody string
	}{
		{"reset", startQueue(t, reset, "--probe", "none"), 502, "Bad Gateway"},
		{"garbage", startQueue(t, garbage, "--probe", "none"), 502, "Bad Gateway"},
		{"stall", startQueue(t, stall, "--probe", "none", "--response-start-timeout", "300ms"), 504, "Gateway Timeout"},
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 32, DisableCompression: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	check := func(i int) error {
		tt := tests[i%len(tests)]
		// POST without a body: net/http's client does not retry it, so
		// every failure of queue's shows.
		res, err := c.Post("http://"+tt.q.addr.Listen+"/", "", nil)
		if err != nil {
			return fmt.Errorf("%s: %w", tt.name, err)
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || res.StatusCode != tt.wantCode || string(b) != tt.wantBody {
			return fmt.Errorf("%s: got %d %q %v, want %d %q", tt.name, res.StatusCode, b, err, tt.wantCode, tt.wantBody)
		}
		return nil
	}
	for i := range tests { // warm up: lazily started goroutines are in the baseline
		if err := check(i); err != nil {
			t.Fatal(err)
		}
	}
	tr.CloseIdleConnections()
	baseG, baseFD := runtime.NumGoroutine(), countFDs(t)

	const total, workers = 200, 16
	var (
		next     atomic.Int64
		mu       sync.Mutex
		failures []string
		wg       sync.WaitGroup
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < total; i = int(next.Add(1)) - 1 {
				if err := check(i); err != nil {
					mu.Lock()
					failures = append(failures, err.Error())
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Errorf("%d of %d requests got the wrong answer, e.g. %s", len(failures), total, failures[0])
	}
	tr.CloseIdleConnections()

	const slack = 10
	var g, fd int
	deadline := time.Now().Add(5 * time.Second)
	for {
		g, fd = runtime.NumGoroutine(), countFDs(t)
		if g <= baseG+slack && fd <= baseFD+slack {
			break
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Errorf("after %d failing requests: %d goroutines (baseline %d), %d open files (baseline %d); want within +%d\n%s",
				total, g, baseG, fd, baseFD, slack, buf[:runtime.Stack(buf, true)])
			break
		}
		time.Sleep(20 * time.Millisecond) // polling the process's counters, which give no signal
	}
	t.Logf("goroutines %d -> %d, open files %d -> %d", baseG, g, baseFD, fd)
}

// TestUpstreamRestart: the upstream goes away and comes back on the same
// address. Readiness follows by itself, requests in the gap get a quick
// 502 (with --upstream-retry-window 0: TestUpstreamRestartWithinWindow has
// the default), and once it is back requests are served again.
func TestUpstreamRestart(t *testing.T) {
	t.Parallel()
	for _, proto := range []string{"http1", "h2c"} {
		t.Run(proto, func(t *testing.T) {
			t.Parallel()
			addr := freeAddr(t)
			serveOn := func(ln net.Listener, generation string) *http.Server {
				srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					io.WriteString(w, generation)
				})}
				if proto == "h2c" {
					var p http.Protocols
					p.SetUnencryptedHTTP2(true)
					srv.Protocols = &p
				}
				go srv.Serve(ln)
				return srv
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			srv := serveOn(ln, "first")
			t.Cleanup(func() { srv.Close() })
			q := startQueue(t, addr, "--upstream-protocol", proto, "--upstream-retry-window", "0")
			q.waitReady(t, true)
			c, base := q.client(t, modeH1)
			if res, body := get(t, c, base+"/", nil); res.StatusCode != 200 || body != "first" {
				t.Fatalf("before the restart: %d %q, want 200 first", res.StatusCode, body)
			}

			srv.Close()
			// A refused connect gets its 502 at once: a queue that retried
			// it as --upstream-retry-window's default does would hold the
			// request for that window (proxy.DefaultRetryWindow) first.
			gap := func(when string) {
				t.Helper()
				for i := range 3 {
					start := time.Now()
					res, body := get(t, c, base+"/", nil)
					if took := time.Since(start); took >= proxy.DefaultRetryWindow {
						t.Errorf("%s, request %d took %v, want a 502 before a retry window (%v) could pass", when, i, took, proxy.DefaultRetryWindow)
					}
					if res.StatusCode != 502 || body != "Bad Gateway" {
						t.Errorf("%s, request %d: %d %q, want 502 Bad Gateway", when, i, res.StatusCode, body)
					}
				}
			}
			gap("upstream gone")
			q.waitReady(t, false)
			if code, _ := adminGet(t, q, "/ready"); code != 503 {
				t.Errorf("/ready with the upstream gone = %d, want 503", code)
			}
			gap("upstream gone, unready")

			var ln2 net.Listener
			for i := 0; ; i++ { // the port was ours a moment ago; retry briefly
				if ln2, err = net.Listen("tcp", addr); err == nil {
					break
				}
				if i == 20 {
					t.Fatalf("listen again on %s: %v", addr, err)
				}
				time.Sleep(50 * time.Millisecond)
			}
			srv2 := serveOn(ln2, "second")
			t.Cleanup(func() { srv2.Close() })
			q.waitReady(t, true)
			if res, body := get(t, c, base+"/", nil); res.StatusCode != 200 || body != "second" {
				t.Errorf("after the restart: %d %q, want 200 second", res.StatusCode, body)
			}
		})
	}
}

// TestUpstreamRestartWithinWindow: nothing listens at the upstream's
// address while requests arrive (GETs, and POSTs with a body), as between
// a restarting upstream's exit and its listen; the requests wait for it,
// counted as active, and it comes up on that address within
// --upstream-retry-window (its default, 3 s): every request is answered,
// none gets 502. (The connections of the upstream that went away are
// TestUpstreamStaleStreamedBody's and TestUpstreamIdleCloseRace's
// business.)
func TestUpstreamRestartWithinWindow(t *testing.T) {
	t.Parallel()
	for _, proto := range []string{"http1", "h2c"} {
		t.Run(proto, func(t *testing.T) {
			t.Parallel()
			addr := freeAddr(t)
			q := startQueue(t, addr, "--upstream-protocol", proto, "--probe", "none")
			c, base := q.client(t, modeH1)
			const n = 6
			results := make(chan string, n)
			for i := range n {
				go func() {
					method, body := http.MethodGet, ""
					if i%2 == 1 {
						method, body = http.MethodPost, strings.Repeat("b", 1000*i)
					}
					req, _ := http.NewRequest(method, base+"/", strings.NewReader(body))
					res, err := c.Do(req)
					if err != nil {
						results <- fmt.Sprintf("%s: %v", method, err)
						return
					}
					b, err := io.ReadAll(res.Body)
					res.Body.Close()
					if want := fmt.Sprintf("%s %d", method, len(body)); err != nil || res.StatusCode != 200 || string(b) != want {
						results <- fmt.Sprintf("%s: got %d %q %v, want 200 %q", method, res.StatusCode, b, err, want)
						return
					}
					results <- ""
				}()
			}
			// The requests wait for the upstream, counted as active; polled,
			// as nothing announces them.
			for deadline := time.Now().Add(proxy.DefaultRetryWindow); q.app.stats.Active() < n; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%d requests active, want %d waiting for the upstream", q.app.stats.Active(), n)
				}
			}
			var ln net.Listener
			var err error
			for i := 0; ; i++ { // the port was ours a moment ago; retry briefly
				if ln, err = net.Listen("tcp", addr); err == nil {
					break
				}
				if i == 20 {
					t.Fatalf("listen on %s: %v", addr, err)
				}
				time.Sleep(50 * time.Millisecond)
			}
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n, _ := io.Copy(io.Discard, r.Body)
				fmt.Fprintf(w, "%s %d", r.Method, n)
			})}
			if proto == "h2c" {
				var p http.Protocols
				p.SetUnencryptedHTTP2(true)
				srv.Protocols = &p
			}
			go srv.Serve(ln)
			t.Cleanup(func() { srv.Close() })
			for range n {
				if r := <-results; r != "" {
					t.Error(r)
				}
			}
		})
	}
}

// TestDrainStreaming: SIGTERM under steady load with server-sent-event
// streams and slow requests in flight when the listeners close. Every
// request and stream completes whole (each stream gets every event), and
// the process exits 0.
func TestDrainStreaming(t *testing.T) {
	t.Parallel()
	const events = 30 // one every 50 ms: 1.5 s
	var arrived atomic.Int64
	arrivedCh := make(chan struct{}, 16)
	up := h1Upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/sse":
			arrived.Add(1)
			arrivedCh <- struct{}{}
			w.Header().Set("Content-Type", "text/event-stream")
			tick := time.NewTicker(50 * time.Millisecond) // the stream's own pace
			defer tick.Stop()
			for i := range events {
				fmt.Fprintf(w, "data: %d\n\n", i)
				w.(http.Flusher).Flush()
				if i == events-1 {
					break
				}
				select {
				case <-tick.C:
				case <-r.Context().Done():
					return
				}
			}
		case "/slow":
			arrived.Add(1)
			arrivedCh <- struct{}{}
			select {
			case <-time.After(800 * time.Millisecond): // the upstream's work
			case <-r.Context().Done():
				return
			}
			io.WriteString(w, "slow done")
		default:
			io.WriteString(w, "ok")
		}
	}))
	args, listen, admin := processArgs(t, hostPort(up), "--drain-quiet-period", "300ms", "--drain-timeout", "10s")
	cmd, lines := startProcess(t, args...)
	waitHTTP(t, "http://"+admin+"/ready", 200)

	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 15 * time.Second}
	var (
		stop       atomic.Bool
		sent, good atomic.Int64
		mu         sync.Mutex
		failures   []string
		wg         sync.WaitGroup
	)
	fail := func(format string, a ...any) {
		mu.Lock()
		failures = append(failures, fmt.Sprintf(format, a...))
		mu.Unlock()
	}
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < 100000 && !stop.Load(); n++ {
				sent.Add(1)
				// POST without a body: net/http does not retry it, so a
				// connection dropped under a request shows as a failure.
				res, err := c.Post("http://"+listen+"/", "", nil)
				if err != nil {
					fail("short request: %v", err)
					continue
				}
				b, err := io.ReadAll(res.Body)
				res.Body.Close()
				if err != nil || res.StatusCode != 200 || string(b) != "ok" {
					fail("short request: %d %q %v", res.StatusCode, b, err)
					continue
				}
				good.Add(1)
			}
		}()
	}
	waitSent := func(n int64) {
		deadline := time.Now().Add(10 * time.Second)
		for sent.Load() < n {
			if time.Now().After(deadline) {
				stop.Store(true)
				t.Fatalf("load stalled at %d requests", sent.Load())
			}
			time.Sleep(time.Millisecond) // waiting for the load to build up
		}
	}
	waitSent(100)
	cmd.Process.Signal(syscall.SIGTERM)
	waitLine(t, lines, "signal received")
	waitSent(sent.Load() + 100) // traffic goes on during the quiet period

	var long sync.WaitGroup
	for range 3 {
		long.Add(2)
		go func() {
			defer long.Done()
			// Its own client: one connection per stream.
			sc := &http.Client{Transport: &http.Transport{}, Timeout: 15 * time.Second}
			res, err := sc.Get("http://" + listen + "/sse")
			if err != nil {
				fail("sse: %v", err)
				return
			}
			defer res.Body.Close()
			var got []string
			s := bufio.NewScanner(res.Body)
			for s.Scan() {
				if l := s.Text(); l != "" {
					got = append(got, l)
				}
			}
			if err := s.Err(); err != nil {
				fail("sse: %d events, then %v", len(got), err)
				return
			}
			if len(got) != events {
				fail("sse: %d events, want %d: %v", len(got), events, got)
				return
			}
			for i, l := range got {
				if l != fmt.Sprintf("data: %d", i) {
					fail("sse: event %d is %q", i, l)
					return
				}
			}
		}()
		go func() {
			defer long.Done()
			sc := &http.Client{Transport: &http.Transport{}, Timeout: 15 * time.Second}
			res, err := sc.Post("http://"+listen+"/slow", "", nil)
			if err != nil {
				fail("slow: %v", err)
				return
			}
			b, err := io.ReadAll(res.Body)
			res.Body.Close()
			if err != nil || res.StatusCode != 200 || string(b) != "slow done" {
				fail("slow: %d %q %v", res.StatusCode, b, err)
			}
		}()
	}
	timeout := time.After(10 * time.Second)
	for range 6 { // all six reached the upstream before the load stops
		select {
		case <-arrivedCh:
		case <-timeout:
			stop.Store(true)
			t.Fatalf("only %d of 6 long requests reached the upstream", arrived.Load())
		}
	}
	stop.Store(true)
	wg.Wait()
	long.Wait()
	if code := waitExit(t, cmd, 15*time.Second); code != 0 {
		t.Errorf("exit status %d, want 0", code)
	}
	t.Logf("%d short requests, %d good; %d failures", sent.Load(), good.Load(), len(failures))
	for i, f := range failures {
		if i == 5 {
			t.Errorf("... and %d more", len(failures)-5)
			break
		}
		t.Errorf("failed: %s", f)
	}
}

// TestUpstreamIdleTimeout: the pool after a burst is back to what the
// steady load needs once the idle timeout has passed. A burst of 16
// requests, held at the upstream until all have arrived, opens 16 upstream
// connections at once; with no traffic after it, queue
// (--upstream-idle-timeout 200ms) closes all 16, though the upstream would
// keep them open forever; the next request dials a new one.
func TestUpstreamIdleTimeout(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{modeH1, modeH2C} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			const burst = 16
			var (
				arrived         atomic.Int64
				all             = make(chan struct{}) // closed when the burst has arrived
				accepts, closes atomic.Int64
			)
			up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if n := arrived.Add(1); n == burst {
					close(all)
				}
				select {
				case <-all:
				case <-time.After(5 * time.Second): // the bound, should the burst never gather
					t.Errorf("a request waited 5 s for the burst: %d of %d arrived", arrived.Load(), burst)
				}
				io.WriteString(w, "ok")
			}))
			// No IdleTimeout: a connection that closes was closed by queue.
			up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				switch s {
				case http.StateNew:
					accepts.Add(1)
				case http.StateClosed:
					closes.Add(1)
				}
			}
			up.Start()
			t.Cleanup(up.Close)
			q := startQueue(t, hostPort(up), "--probe", "none", "--upstream-idle-timeout", "200ms")
			c, base := q.client(t, mode)
			c.Timeout = 10 * time.Second

			var wg sync.WaitGroup
			for i := range burst {
				wg.Go(func() {
					res, err := c.Get(base + "/")
					if err != nil {
						t.Errorf("burst request %d: %v", i, err)
						return
					}
					b, err := io.ReadAll(res.Body)
					res.Body.Close()
					if err != nil || res.StatusCode != 200 || string(b) != "ok" {
						t.Errorf("burst request %d: got %d %q %v, want 200 \"ok\"", i, res.StatusCode, b, err)
					}
				})
			}
			wg.Wait()
			if t.Failed() {
				return
			}

			// Bounded poll of an asynchronous close: queue's retire timer
			// closes the idle connections 200 ms (and the pool's slack)
			// after the burst, and the upstream notices when it reads EOF.
			deadline := time.Now().Add(5 * time.Second)
			for closes.Load() < burst && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if got, want := accepts.Load(), int64(burst); got != want {
				t.Errorf("upstream accepted %d connections for the burst, want %d", got, want)
			}
			if got, want := closes.Load(), int64(burst); got != want {
				t.Fatalf("upstream saw %d connections closed 5 s after the burst, want %d: the idle timeout did not shrink the pool", got, want)
			}

			if res, body := get(t, c, base+"/", nil); res.StatusCode != 200 || body != "ok" {
				t.Errorf("after the idle timeout: got %d %q, want 200 \"ok\"", res.StatusCode, body)
			}
			if got, want := accepts.Load(), int64(burst+1); got != want {
				t.Errorf("upstream accepted %d connections, want %d: one new for the request after the idle timeout", got, want)
			}
		})
	}
}

// TestUpstreamStaleStreamedBody: the idle-close race, end to end, made
// deterministic: the upstream answers the first request on each connection
// with keep-alive, and closes the connection unanswered when the next
// request on it arrives, so every request on a reused connection meets a
// stale one. A POST whose body queue streams (chunked, from a pipe) cannot
// be sent again and gets 502, with no second attempt; so does a POST whose
// small body queue holds (a POST is never sent twice). A PUT whose small
// body queue holds is replayed on a new connection and gets 200: another
// idle connection is in the pool then, stale too, so a replay that took it
// instead of dialing would fail too. --upstream-idle-timeout 0: no
// connection expires while the test runs, however slowly.
func TestUpstreamStaleStreamedBody(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{modeH1, modeH2C} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			type counts struct{ seen, cut int } // requests whose head arrived; those closed unanswered
			var (
				accepts atomic.Int64
				mu      sync.Mutex
				byPath  = map[string]counts{}
				pairs   atomic.Int64
				paired  = make(chan struct{}) // closed when the three /pair requests have arrived
			)
			record := func(path string, cut bool) {
				mu.Lock()
				defer mu.Unlock()
				n := byPath[path]
				n.seen++
				if cut {
					n.cut++
				}
				byPath[path] = n
			}
			check := func(when string, wantAccepts int64, want map[string]counts) {
				t.Helper()
				if got := accepts.Load(); got != wantAccepts {
					t.Errorf("%s: upstream accepted %d connections, want %d", when, got, wantAccepts)
				}
				mu.Lock()
				defer mu.Unlock()
				for path, w := range want {
					if got := byPath[path]; got != w {
						t.Errorf("%s: upstream saw %s %d times, cut %d; want %d, cut %d", when, path, got.seen, got.cut, w.seen, w.cut)
					}
				}
			}
			addr := rawListener(t, func(c *net.TCPConn, _ int64) {
				defer c.Close()
				accepts.Add(1)
				c.SetDeadline(time.Now().Add(10 * time.Second)) // a bound, should the test fail
				br := bufio.NewReader(c)
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				record(req.URL.Path, false)
				if req.URL.Path == "/pair" {
					if pairs.Add(1) == 3 {
						close(paired)
					}
					select {
					case <-paired:
					case <-time.After(5 * time.Second): // the bound, should the three never gather
						t.Errorf("a /pair request waited 5 s for the others")
					}
				}
				n, err := io.Copy(io.Discard, req.Body)
				if err != nil {
					return
				}
				body := fmt.Sprintf("%s %s %d", req.Method, req.URL.Path, n)
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
				// The next request on this connection is closed unanswered,
				// its body unread: as if the upstream's idle timeout had
				// closed the connection just as the request was sent.
				if req, err = http.ReadRequest(br); err != nil {
					return
				}
				record(req.URL.Path, true)
			})
			q := startQueue(t, addr, "--probe", "none", "--upstream-idle-timeout", "0s")
			c, base := q.client(t, mode)
			c.Timeout = 10 * time.Second

			if res, body := get(t, c, base+"/warm", nil); res.StatusCode != 200 || body != "GET /warm 0" {
				t.Fatalf("GET /warm: got %d %q, want 200 \"GET /warm 0\"", res.StatusCode, body)
			}

			// The body's first KiB goes out with the head; the rest waits
			// for the response, so the upstream's close meets a body in
			// flight that queue no longer has whole. The client's timeout
			// bounds the wait for the response, and so the body's.
			pr, pw := io.Pipe()
			answered := make(chan struct{})
			go func() {
				pw.Write(make([]byte, 1<<10))
				<-answered // the rest of the body never comes
				pw.CloseWithError(io.ErrUnexpectedEOF)
			}()
			req, err := http.NewRequest(http.MethodPost, base+"/stream", pr)
			if err != nil {
				t.Fatal(err)
			}
			res, err := c.Do(req)
			close(answered)
			if err != nil {
				t.Fatalf("streamed POST /stream: %v", err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if got, want := res.StatusCode, http.StatusBadGateway; got != want || string(b) != "Bad Gateway" {
				t.Errorf("streamed POST on a stale connection: got %d %q, want %d \"Bad Gateway\"", got, b, want)
			}
			check("after the streamed POST", 1, map[string]counts{
				"/warm":   {seen: 1},
				"/stream": {seen: 1, cut: 1}, // not sent again
			})

			// A fresh round: three connections made idle at once, all stale.
			var wg sync.WaitGroup
			for i := range 3 {
				wg.Go(func() {
					res, err := c.Get(base + "/pair")
					if err != nil {
						t.Errorf("GET /pair %d: %v", i, err)
						return
					}
					b, err := io.ReadAll(res.Body)
					res.Body.Close()
					if err != nil || res.StatusCode != 200 || string(b) != "GET /pair 0" {
						t.Errorf("GET /pair %d: got %d %q %v, want 200 \"GET /pair 0\"", i, res.StatusCode, b, err)
					}
				})
			}
			wg.Wait()
			if t.Failed() {
				return
			}

			const small = "a small body"
			req, err = http.NewRequest(http.MethodPost, base+"/small", strings.NewReader(small))
			if err != nil {
				t.Fatal(err)
			}
			res, body := do(t, c, req)
			if res.StatusCode != 502 || body != "Bad Gateway" {
				t.Errorf("POST /small with a held body on a stale connection: got %d %q, want 502 \"Bad Gateway\"", res.StatusCode, body)
			}
			req, err = http.NewRequest(http.MethodPut, base+"/small", strings.NewReader(small))
			if err != nil {
				t.Fatal(err)
			}
			res, body = do(t, c, req)
			if want := fmt.Sprintf("PUT /small %d", len(small)); res.StatusCode != 200 || body != want {
				t.Errorf("PUT /small with a held body on a stale connection: got %d %q, want 200 %q", res.StatusCode, body, want)
			}
			check("after the POST and the replayed PUT", 5, map[string]counts{
				"/warm":   {seen: 1},
				"/stream": {seen: 1, cut: 1},
				"/pair":   {seen: 3},
				"/small":  {seen: 3, cut: 2}, // the POST cut; the PUT cut, then answered on a new one
			})
		})
	}
}
