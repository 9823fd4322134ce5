package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestRelayH2C sends 64 concurrent GETs with net/http's client over h2c
// (prior knowledge) through the relay's h2c listener and checks each
// answer (status, body, the upstream's fields, which net/http's client
// takes only in lower case, a Date the relay adds) and what the upstream saw: the
// request line, Host from :authority, the client's fields, and with
// -forward the forwarding fields; over at most as many upstream
// connections as there were streams at once.
func TestRelayH2C(t *testing.T) {
	t.Parallel()
	for _, forward := range []bool{false, true} {
		t.Run(map[bool]string{false: "as sent", true: "forward"}[forward], func(t *testing.T) {
			t.Parallel()
			testRelayH2C(t, forward)
		})
	}
}

func testRelayH2C(t *testing.T, forward bool) {
	const n = 64
	var (
		mu    sync.Mutex
		seen  []string
		conns = map[string]bool{}
	)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, strings.Join([]string{r.Method, r.URL.Path, r.Proto, r.Host, r.Header.Get("X-Test"),
			r.Header.Get("X-Forwarded-For"), r.Header.Get("X-Forwarded-Proto"), r.Header.Get("X-Forwarded-Host"),
			r.Header.Get("Forwarded")}, "|"))
		conns[r.RemoteAddr] = true
		mu.Unlock()
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("X-Upstream", "yes")
		_, _ = io.WriteString(w, strings.Repeat("x", 1024))
	}))
	t.Cleanup(up.Close)
	addr := startRelay(t, up, forward, true)
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true) // prior knowledge
	tr := &http.Transport{Protocols: &protos}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}

	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/p"+strings.Repeat("x", i%3), nil)
			if err != nil {
				errs <- err
				return
			}
			req.Header.Set("X-Test", "t")
			resp, err := client.Do(req)
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			switch {
			case err != nil:
				errs <- err
			case resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2:
				errs <- &mismatch{"status and protocol", resp.Status + " " + resp.Proto, "200 OK HTTP/2.0"}
			case len(body) != 1024:
				errs <- &mismatch{"body length", strconv.Itoa(len(body)), "1024"}
			case resp.Header.Get("X-Upstream") != "yes" || resp.Header.Get("Content-Type") != "application/octet-stream":
				errs <- &mismatch{"upstream fields", strings.Join([]string{resp.Header.Get("X-Upstream"), resp.Header.Get("Content-Type")}, ","), "yes,application/octet-stream"}
			case resp.Header.Get("Date") == "":
				errs <- &mismatch{"Date", "", "a Date"}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(seen) != n {
		t.Fatalf("upstream saw %d requests, want %d", len(seen), n)
	}
	fwd := "||||"
	if forward {
		fwd = "|127.0.0.1|http|" + addr + `|for=127.0.0.1;host="` + addr + `";proto=http`
	}
	for _, got := range seen {
		if !strings.HasPrefix(got, "GET|/p") || !strings.HasSuffix(got, "|HTTP/1.1|"+addr+"|t"+fwd) {
			t.Errorf("upstream saw %q, want GET|/p…|HTTP/1.1|%s|t%s", got, addr, fwd)
		}
	}
	if len(conns) > n {
		t.Errorf("upstream saw %d connections for %d streams", len(conns), n)
	}
}

type mismatch struct{ what, got, want string }

func (m *mismatch) Error() string { return m.what + ": got " + m.got + ", want " + m.want }
