package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/queue-dev/queue/internal/testnet"
)

// TestConcurrencyLimit: with --concurrency 1 and --queue-depth 1, three
// slow requests give one 503 and two 200s, whatever the interleaving: the
// 503 comes first, while the other two are held (one at the upstream, one
// queued); the upstream never sees two at once; probes are never queued.
func TestConcurrencyLimit(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var releaseOnce sync.Once
	open := func() { releaseOnce.Do(func() { close(release) }) }
	var mu sync.Mutex
	inside, most := 0, 0
	up := h1Upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		inside++
		most = max(most, inside)
		mu.Unlock()
		select {
		case <-release:
		case <-r.Context().Done():
		}
		mu.Lock()
		inside--
		mu.Unlock()
		io.WriteString(w, "ok")
	}))
	q := startQueue(t, hostPort(up), "--concurrency", "1", "--queue-depth", "1")
	// Registered after queue's cleanup, so run before it: a test that
	// fails early does not leave requests held for queue's drain.
	t.Cleanup(open)
	q.waitReady(t, true)
	c, base := q.client(t, modeH1)
	// Each request sends its status, or -1 with what went wrong; not
	// t.Errorf, as a request may end after a failed test has.
	type answer struct {
		code int
		err  string
	}
	codes := make(chan answer, 3)
	for range 3 {
		go func() {
			res, err := c.Get(base + "/")
			if err != nil {
				codes <- answer{-1, err.Error()}
				return
			}
			b, err := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode == 503 && (err != nil || string(b) != "Service Unavailable") {
				codes <- answer{-1, fmt.Sprintf("503 with body %q (%v), want Service Unavailable", b, err)}
				return
			}
			codes <- answer{res.StatusCode, ""}
		}()
	}
	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	defer cancel()
	next := func(what string) int {
		t.Helper()
		select {
		case a := <-codes:
			if a.err != "" {
				t.Errorf("request %s: %s", what, a.err)
			}
			return a.code
		case <-ctx.Done():
			t.Fatalf("no answer %s within %v", what, clientTimeout)
			return 0
		}
	}
	// One is refused at once; its 503 arrives while the others are held.
	got := []int{next("while the slot and the queue were full")}
	if got[0] != 503 {
		t.Errorf("first answer %d while the slot and the queue were full, want 503", got[0])
	}
	// A probe is answered even now.
	if res, _ := get(t, c, base+"/", map[string]string{"User-Agent": "kube-probe/1.31"}); res.StatusCode != 200 {
		t.Errorf("probe while the queue is full = %d, want 200", res.StatusCode)
	}
	if q.app.depth() != 1 {
		t.Errorf("queue depth = %d, want 1", q.app.depth())
	}
	open()
	for range 2 {
		got = append(got, next("after the release"))
	}
	slices.Sort(got)
	if !slices.Equal(got, []int{200, 200, 503}) {
		t.Errorf("statuses %v, want [200 200 503]", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if most != 1 {
		t.Errorf("the upstream saw %d requests at once, want 1", most)
	}
}

// TestQueuedClientLeft: a request whose client leaves while it waits for a
// slot is never sent to the upstream, also when the slot comes free right
// after, before the HTTP/1.1 engine's watcher would have looked at the
// connection: the request behind it is the next the upstream sees.
func TestQueuedClientLeft(t *testing.T) {
	t.Parallel()
	up, entered, open := holdUpstream(t, 3, nil)
	q := startQueue(t, hostPort(up), "--concurrency", "1", "--queue-depth", "2")
	// Registered after queue's cleanup, so run before it.
	t.Cleanup(open)
	q.waitReady(t, true)
	c, base := q.client(t, modeH1)

	// The first request takes the slot and holds it at the upstream.
	held := getAsync(c, base+"/hold")
	if p := testnet.Recv(t, entered, clientTimeout, "the held request at the upstream"); p != "/hold" {
		t.Fatalf("the upstream saw %s first, want /hold", p)
	}

	// The second queues behind it on a connection of its own, and leaves.
	conn, err := net.Dial("tcp", q.addr.Listen)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, "GET /left HTTP/1.1\r\nHost: app\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(clientTimeout); q.app.depth() != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("queue depth %d, want 1: the second request never queued", q.app.depth())
		}
	}
	conn.Close()
	open() // the slot comes free at once

	if err := testnet.Recv(t, held, clientTimeout, "the held request's answer"); err != nil {
		t.Fatalf("held request: %v", err)
	}
	// A third goes after the second: once it is answered, the second has
	// had its slot and been sent on, or not.
	if res, body := get(t, c, base+"/after", nil); res.StatusCode != 200 || body != "ok" {
		t.Fatalf("request after: %d %q, want 200 ok", res.StatusCode, body)
	}
	if p := testnet.Recv(t, entered, clientTimeout, "the request after"); p != "/after" {
		t.Errorf("the upstream saw %s after /hold, want /after: the request whose client left was sent on", p)
	}
}
