package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestMayReplay is the replay rule's table.
func TestMayReplay(t *testing.T) {
	t.Parallel()
	tests := []struct {
		method string
		header string // a header the request carries
		sent   int
		want   bool
	}{
		{http.MethodGet, "", 0, true},
		{http.MethodPost, "", 0, true}, // nothing of it was written yet
		{http.MethodGet, "", 1, true},
		{http.MethodHead, "", 1, true},
		{http.MethodOptions, "", 1, true},
		{http.MethodTrace, "", 1, true},
		{http.MethodPut, "", 1, true},
		{http.MethodDelete, "", 1, true},
		{http.MethodPost, "", 1, false},
		{http.MethodPatch, "", 1, false},
		{http.MethodConnect, "", 1, false},
		{"PURGE", "", 1, false},
		{http.MethodPost, "Idempotency-Key", 1, true},
		{http.MethodPatch, "X-Idempotency-Key", 1, true},
		{http.MethodGet, "", 2, false}, // never a third time
		{http.MethodPost, "Idempotency-Key", 2, false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s %s sent %d", tt.method, tt.header, tt.sent), func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest(tt.method, "/", nil)
			if tt.header != "" {
				r.Header.Set(tt.header, "k")
			}
			if got := mayReplay(r, tt.sent); got != tt.want {
				t.Errorf("mayReplay = %v, want %v", got, tt.want)
			}
		})
	}
}

// How the fake h2c upstream fails a request, on its HEADERS.
const (
	h2Refuse   = "REFUSED_STREAM"
	h2GoAway   = "GOAWAY below the stream" // last stream id below it, NO_ERROR, then close
	h2Protocol = "PROTOCOL_ERROR reset"
	h2Close    = "close after HEADERS"
	h2Answer   = "answer" // 200, no body
)

// h2Upstream is a raw h2c upstream on x/net's Framer: for each request
// (its HEADERS) it counts the arrival by the request's X-Request-Id and
// does what act says for that arrival (n counts from 1). One goroutine per
// connection reads and writes its frames.
type h2Upstream struct {
	*rawUpstream
	act func(n int) string

	mu   sync.Mutex
	byID map[string]int
}

func startH2Upstream(t *testing.T, act func(n int) string) *h2Upstream {
	t.Helper()
	u := &h2Upstream{act: act, byID: map[string]int{}}
	u.rawUpstream = startRawUpstream(t, u.serve)
	return u
}

func (u *h2Upstream) arrivals(id string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.byID[id]
}

func (u *h2Upstream) serve(c net.Conn, br *bufio.Reader) {
	c.SetDeadline(time.Now().Add(10 * time.Second)) // a bound, should the test fail
	if _, err := io.ReadFull(br, make([]byte, len(http2.ClientPreface))); err != nil {
		return
	}
	fr := http2.NewFramer(c, br)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if fr.WriteSettings() != nil {
		return
	}
	var hbuf bytes.Buffer
	enc := hpack.NewEncoder(&hbuf)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				fr.WritePing(true, f.Data)
			}
		case *http2.GoAwayFrame:
			return
		case *http2.MetaHeadersFrame:
			id := f.PseudoValue("path")
			for _, hf := range f.RegularFields() {
				if hf.Name == "x-request-id" {
					id = hf.Value
				}
			}
			u.mu.Lock()
			u.byID[id]++
			n := u.byID[id]
			u.mu.Unlock()
			s := f.StreamID
			switch u.act(n) {
			case h2Refuse:
				fr.WriteRSTStream(s, http2.ErrCodeRefusedStream)
			case h2Protocol:
				fr.WriteRSTStream(s, http2.ErrCodeProtocol)
			case h2GoAway:
				fr.WriteGoAway(max(s, 2)-2, http2.ErrCodeNo, nil)
				return
			case h2Close:
				return
			default:
				hbuf.Reset()
				enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
				enc.WriteField(hpack.HeaderField{Name: "content-length", Value: "0"})
				fr.WriteHeaders(http2.HeadersFrameParam{StreamID: s, BlockFragment: hbuf.Bytes(), EndStream: true, EndHeaders: true})
			}
		}
	}
}

// TestH2CReplays drives the failures of a stream the upstream did not
// process (REFUSED_STREAM, a GOAWAY whose last stream id is below the
// request's), which the h2c client sends again, and two it does not (a
// PROTOCOL_ERROR reset, the connection closed once the HEADERS were read),
// on the first arrival of each request only and then on every arrival,
// and counts each request's arrivals at the upstream: a GET (PUT, DELETE,
// a keyed POST: mayReplay) arrives at most twice, its body held whole, a
// POST or PATCH exactly once; nothing ever arrives three times.
func TestH2CReplays(t *testing.T) {
	t.Parallel()
	requests := []struct {
		method, body, key string
		replay            bool
	}{
		{http.MethodGet, "", "", true},
		{http.MethodDelete, "", "", true},
		{http.MethodPost, "", "", false},
		{http.MethodPatch, "", "", false},
		{http.MethodPost, "", "k1", true},
		{http.MethodPost, "a body", "", false},
		{http.MethodPut, "a body", "", true}, // idempotent, its body held whole: sent again
	}
	for _, act := range []string{h2Refuse, h2GoAway, h2Protocol, h2Close} {
		for _, always := range []bool{false, true} {
			for _, rq := range requests {
				name := fmt.Sprintf("%s, first arrival, %s %q %s", act, rq.method, rq.body, rq.key)
				if always {
					name = fmt.Sprintf("%s, every arrival, %s %q %s", act, rq.method, rq.body, rq.key)
				}
				// queue's h2c client sends again only a stream the upstream
				// did not process (REFUSED_STREAM, or above a GOAWAY's last
				// stream id: RFC 9113 section 8.7). A PROTOCOL_ERROR reset,
				// or the connection closed once the HEADERS were read, may
				// come after the upstream began the request: never sent
				// again.
				replayed := rq.replay && act != h2Close && act != h2Protocol
				wantCode, wantSeen := 502, 1
				switch {
				case replayed && !always:
					wantCode, wantSeen = 200, 2
				case replayed:
					wantSeen = 2
				}
				// Each round is a request of its own, which the test sends
				// when the one before is answered, so that a GOAWAY or a
				// close fails no other; the client waits for no backoff
				// between two attempts, so every case runs all its rounds.
				const rounds = 5
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					up := startH2Upstream(t, func(n int) string {
						if n == 1 || always {
							return act
						}
						return h2Answer
					})
					p, err := New(Config{Upstream: up.addr, Protocol: H2C, Timeout: 3 * time.Second})
					if err != nil {
						t.Fatal(err)
					}
					srv := httptest.NewServer(p)
					t.Cleanup(func() { srv.Close(); p.Close() })
					c := &http.Client{Timeout: 10 * time.Second}
					for i := range rounds {
						id := fmt.Sprint(i)
						var body io.Reader
						if rq.body != "" {
							body = strings.NewReader(rq.body)
						}
						req, _ := http.NewRequest(rq.method, srv.URL+"/", body)
						req.Header.Set("X-Request-Id", id)
						if rq.key != "" {
							req.Header.Set("Idempotency-Key", rq.key)
						}
						start := time.Now()
						o := do(c, req)
						if o.err != nil || o.code != wantCode {
							t.Errorf("round %d: got %d %q %v after %v, want %d", i, o.code, o.body, o.err, time.Since(start), wantCode)
						}
						if got := up.arrivals(id); got != wantSeen {
							t.Errorf("round %d: arrived %d times, want %d", i, got, wantSeen)
						}
					}
				})
			}
		}
	}
}
