package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/queue-dev/queue/internal/testnet"
	"github.com/queue-dev/queue/overload"
)

// TestOverloadGuard runs queue under a CPU quota that binds (a cpu.stat
// of the test's, whose nr_throttled it raises), with no --concurrency:
// once the guard is on, the upstream sees 16 requests at once and the
// 17th waits; a client that gives up in the backlog meanwhile is never
// sent on; a slot coming free serves the waiter.
func TestOverloadGuard(t *testing.T) {
	t.Parallel()
	stat := filepath.Join(t.TempDir(), "cpu.stat")
	throttled := 0
	bind := func() { // another throttled period
		t.Helper()
		throttled++
		body := fmt.Sprintf("nr_periods 1000\nnr_throttled %d\nthrottled_time 1\n", throttled)
		if err := os.WriteFile(stat, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	bind()

	tokens := make(chan struct{}, overload.Limit)
	up, entered, open := holdUpstream(t, 64, tokens)
	q := startQueueWith(t, nil, func(c *Config) { c.CPUStat = stat }, hostPort(up))
	t.Cleanup(open) // registered after queue's cleanup, so run before it
	q.waitReady(t, true)
	if q.app.guard == nil {
		t.Fatal("no overload guard with a CPU limit")
	}
	c, base := q.client(t, modeH1)

	// The quota binds: the requests look at most once per overload.Look,
	// and one turns the guard on.
	bind()
	for deadline := time.Now().Add(clientTimeout); !q.app.guard.On(); {
		if res, _ := get(t, c, base+"/quick", nil); res.StatusCode != http.StatusOK {
			t.Fatalf("GET /quick: %d", res.StatusCode)
		}
		testnet.Recv(t, entered, clientTimeout, "/quick at the upstream")
		if time.Now().After(deadline) {
			t.Fatal("the guard never came on")
		}
	}

	// Sixteen take the slots and stay at the upstream; the seventeenth
	// waits. Each looks at a quota that has bound again, so that the guard
	// stays on however slow the test runs.
	held := make([]<-chan error, overload.Limit)
	for i := range held {
		bind()
		held[i] = getAsync(c, base+"/hold")
		if p := testnet.Recv(t, entered, clientTimeout, "a held request at the upstream"); p != "/hold" {
			t.Fatalf("the upstream saw %s, want /hold", p)
		}
	}
	bind()
	waiting := getAsync(c, base+"/waiting")
	for deadline := time.Now().Add(clientTimeout); q.app.depth() != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("queue depth %d, want 1: the seventeenth request never queued", q.app.depth())
		}
	}

	// A client whose request waits in the backlog, and who gives up there.
	gone, err := net.Dial("tcp", q.addr.Listen)
	if err != nil {
		t.Fatal(err)
	}
	defer gone.Close()
	if _, err := io.WriteString(gone, "GET /gone HTTP/1.1\r\nHost: app\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	gone.(*net.TCPConn).CloseWrite()
	testnet.WaitPeerClosed(t, gone, clientTimeout)
	// Accepted once the gate lets one through, it is reset (h1's
	// TestGateResetsGoneClient), or, had the accept loop already been
	// waiting in accept when the gate shut, its request waits and is
	// dropped when the engine sees the client gone: no answer either way.
	gone.SetReadDeadline(time.Now().Add(clientTimeout))
	if b, err := io.ReadAll(gone); len(b) != 0 || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the client that gave up got %q, %v; want no answer, and the connection closed", b, err)
	}

	// A slot comes free: the waiter has it, and nothing else came in.
	tokens <- struct{}{}
	if p := testnet.Recv(t, entered, clientTimeout, "the waiter at the upstream"); p != "/waiting" {
		t.Fatalf("the upstream saw %s once a slot came free, want /waiting", p)
	}
	if err := testnet.Recv(t, waiting, clientTimeout, "the waiter's answer"); err != nil {
		t.Fatalf("the waiter: %v", err)
	}
	open()
	for _, h := range held {
		if err := testnet.Recv(t, h, clientTimeout, "a held request's answer"); err != nil {
			t.Fatalf("a held request: %v", err)
		}
	}
	if res, _ := get(t, c, base+"/after", nil); res.StatusCode != http.StatusOK {
		t.Fatalf("GET /after: %d", res.StatusCode)
	}
	if p := testnet.Recv(t, entered, clientTimeout, "/after at the upstream"); p != "/after" {
		t.Fatalf("the upstream saw %s, want /after (never /gone)", p)
	}
}
