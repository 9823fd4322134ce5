package main

import (
	"io"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"
)

// TestConcurrencyLimit: with --concurrency 1 and --queue-depth 1, three
// slow requests give one 503 and two 200s, whatever the interleaving; the
// upstream never sees two at once; probes are never queued.
func TestConcurrencyLimit(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var mu sync.Mutex
	inside, most := 0, 0
	up := h1Upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		inside++
		most = max(most, inside)
		mu.Unlock()
		<-release
		mu.Lock()
		inside--
		mu.Unlock()
		io.WriteString(w, "ok")
	}))
	q := startQueue(t, hostPort(up), "--concurrency", "1", "--queue-depth", "1")
	q.waitReady(t, true)
	codes := make(chan int, 3)
	for range 3 {
		go func() {
			res, err := http.Get("http://" + q.addr.Listen + "/")
			if err != nil {
				codes <- -1
				return
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode == 503 && string(b) != "Service Unavailable" {
				codes <- -2
				return
			}
			codes <- res.StatusCode
		}()
	}
	// One is refused at once; its 503 arrives while the others are held.
	var got []int
	select {
	case c := <-codes:
		got = append(got, c)
	case <-time.After(10 * time.Second):
		t.Fatal("no request was refused while the slot and the queue were full")
	}
	// A probe is answered even now.
	if code, _, _ := probeStatus(t, q, map[string]string{"User-Agent": "kube-probe/1.31"}); code != 200 {
		t.Errorf("probe while the queue is full = %d, want 200", code)
	}
	if q.app.depth() != 1 {
		t.Errorf("queue depth = %d, want 1", q.app.depth())
	}
	close(release)
	for range 2 {
		got = append(got, <-codes)
	}
	sort.Ints(got)
	if got[0] != 200 || got[1] != 200 || got[2] != 503 {
		t.Errorf("statuses %v, want [200 200 503]", got)
	}
	if most != 1 {
		t.Errorf("the upstream saw %d requests at once, want 1", most)
	}
}
