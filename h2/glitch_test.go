//lint:file-ignore SA1019 the tests drive the engine with golang.org/x/net/http2's own client on purpose: a second HTTP/2 implementation besides net/http's.

package h2_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/queue-dev/queue/h2"
	"github.com/queue-dev/queue/internal/testnet"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// held is a handler that answers once its request's context ends (a reset,
// the connection's end) or the test ends.
func held(release <-chan struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}
}

// refuse is a handler that refuses every request with a 400 of its own, as
// queue's proxy refuses a CONNECT (engine.Refuser).
func refuse(w http.ResponseWriter, r *http.Request) {
	if rf, ok := w.(interface{ Refuse() }); ok {
		rf.Refuse()
	}
	w.WriteHeader(http.StatusBadRequest)
}

// writeBlock writes the header block of fields, each encoded as given
// (Sensitive: never indexed), in a HEADERS frame and CONTINUATION frames
// of at most the protocol's default frame size.
func (rc *rawClient) writeBlock(id uint32, end bool, fields ...hpack.HeaderField) {
	rc.t.Helper()
	rc.hbuf.Reset()
	for _, f := range fields {
		rc.enc.WriteField(f)
	}
	b := rc.hbuf.Bytes()
	first := b[:min(len(b), 16384)]
	b = b[len(first):]
	write := func() {
		rc.check(rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndStream: end, EndHeaders: len(b) == 0}))
		for len(b) > 0 {
			n := min(len(b), 16384)
			rc.check(rc.fr.WriteContinuation(id, n == len(b), b[:n]))
			b = b[n:]
		}
	}
	if rc.hold {
		write() // inside a batch already
		return
	}
	rc.batch(write)
}

// pseudo returns a GET's pseudo-fields, never indexed, so that the dynamic
// table holds only what a test puts there.
func pseudo(path string) []hpack.HeaderField {
	f := []hpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "http"}, {Name: ":path", Value: path}, {Name: ":authority", Value: "example.test"}}
	for i := range f {
		f[i].Sensitive = true
	}
	return f
}

// TestGlitchBudget: each kind of abuse the glitch budget counts ends its
// connection with GOAWAY ENHANCE_YOUR_CALM once it is past the budget, by
// the weight of its kind, and the server's counts move.
func TestGlitchBudget(t *testing.T) {
	bomb := hpack.HeaderField{Name: "x-bomb", Value: strings.Repeat("b", 4000)}
	oversized := append(pseudo("/big"), hpack.HeaderField{Name: "x-big", Value: strings.Repeat("v", h2.MaxHeaderListSize), Sensitive: true})
	for _, tc := range []struct {
		name    string
		handler func(release <-chan struct{}) http.HandlerFunc
		// send sends the abuse; the connection must then get GOAWAY
		// ENHANCE_YOUR_CALM.
		send func(rc *rawClient)
	}{
		{"rapid reset", held, func(rc *rawClient) {
			rc.batch(func() {
				for i := range h2.MaxGlitches + 1 {
					id := uint32(2*i + 1)
					rc.headers(id, true, request("GET", "/rr")...)
					rc.rst(id, http2.ErrCodeCancel)
				}
			})
		}},
		{"refused streams", held, func(rc *rawClient) {
			rc.batch(func() {
				for i := range h2.MaxConcurrentStreams + h2.MaxGlitches + 1 {
					rc.headers(uint32(2*i+1), true, request("GET", "/held")...)
				}
			})
		}},
		{"empty CONTINUATION frames", held, func(rc *rawClient) {
			rc.batch(func() {
				rc.check(rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, EndStream: true}))
				for range h2.MaxGlitches {
					rc.check(rc.fr.WriteContinuation(1, false, nil))
				}
			})
		}},
		{"WINDOW_UPDATE of 0 on a stream", held, func(rc *rawClient) {
			rc.batch(func() {
				rc.headers(1, true, request("GET", "/held")...)
				for range h2.MaxGlitches + 1 {
					rc.check(rc.fr.WriteWindowUpdate(1, 0))
				}
			})
		}},
		{"WINDOW_UPDATE on a closed stream", func(<-chan struct{}) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {}
		}, func(rc *rawClient) {
			rc.headers(1, true, request("GET", "/")...)
			rc.readResponse(1, nil)
			rc.batch(func() {
				for range h2.MaxGlitches + 1 {
					rc.check(rc.fr.WriteWindowUpdate(1, 1))
				}
			})
		}},
		{"PRIORITY frames", held, func(rc *rawClient) {
			rc.batch(func() {
				for range h2.MaxGlitches + 1 {
					rc.check(rc.fr.WritePriority(3, http2.PriorityParam{Weight: 1}))
				}
			})
		}},
		{"PING flood", held, func(rc *rawClient) {
			// In one write: the acknowledgements queue up behind each
			// other.
			rc.batch(func() {
				for range 5 * h2.MaxGlitches {
					rc.check(rc.fr.WritePing(false, [8]byte{'f', 'l', 'o', 'o', 'd'}))
				}
			})
		}},
		{"SETTINGS flood", held, func(rc *rawClient) {
			rc.batch(func() {
				for range 5 * h2.MaxGlitches {
					rc.check(rc.fr.WriteSettings())
				}
			})
		}},
		{"malformed requests", held, func(rc *rawClient) {
			rc.batch(func() {
				for i := range h2.MaxGlitches/h2.GlitchRefused + 1 {
					rc.headers(uint32(2*i+1), true, request("GET", "/upper", "X-Upper", "v")...)
				}
			})
		}},
		{"requests the handler refuses", func(<-chan struct{}) http.HandlerFunc { return refuse }, func(rc *rawClient) {
			// One after another: the budget is spent as the handlers run.
			for i := range h2.MaxGlitches/h2.GlitchRefused + 1 {
				id := uint32(2*i + 1)
				rc.headers(id, true, request("GET", "/refused")...)
				if res := rc.readResponse(id, nil); res.status != "400" {
					rc.t.Fatalf("stream %d: status %q, want 400", id, res.status)
				}
			}
			rc.headers(uint32(2*(h2.MaxGlitches/h2.GlitchRefused+1)+1), true, request("GET", "/one-more")...)
		}},
		{"oversized heads", held, func(rc *rawClient) {
			for i := range h2.MaxGlitches/h2.GlitchHeadTooLarge + 1 {
				id := uint32(2*i + 1)
				rc.writeBlock(id, true, oversized...)
				if i == h2.MaxGlitches/h2.GlitchHeadTooLarge {
					break // the budget is spent: GOAWAY
				}
				if res := rc.readResponse(id, nil); res.status != "431" {
					rc.t.Fatalf("stream %d: status %q, want 431", id, res.status)
				}
			}
		}},
		{"HPACK bomb", func(<-chan struct{}) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {}
		}, func(rc *rawClient) {
			// The bomb's field goes into the table with a request that is
			// served, then every block references it again and again.
			rc.writeBlock(1, true, append(pseudo("/seed"), bomb)...)
			if res := rc.readResponse(1, nil); res.status != "200" {
				rc.t.Fatalf("seed: status %q", res.status)
			}
			fields := pseudo("/bomb")
			for range 2*h2.MaxHeaderListSize/int(bomb.Size()) + 1 {
				fields = append(fields, bomb)
			}
			rc.batch(func() {
				for i := range 5 {
					rc.writeBlock(uint32(2*i+3), true, fields...)
				}
			})
			rc.note = "a bomb answered 431: the connection must end at the first"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release, _ := testnet.Releaser(t)
			srv := newServer(tc.handler(release))
			ts := startServer(t, srv)
			rc := ts.dialRaw(t)
			rc.handshake()
			tc.send(rc)
			// Every frame before the GOAWAY may be a response, a reset or
			// an acknowledgement, but a 431 after an HPACK bomb.
			for {
				f := rc.readRaw()
				if ga, ok := f.(*http2.GoAwayFrame); ok {
					if ga.ErrCode != http2.ErrCodeEnhanceYourCalm {
						t.Errorf("GOAWAY %v, want ENHANCE_YOUR_CALM", ga.ErrCode)
					}
					break
				}
				if mh, ok := f.(*http2.MetaHeadersFrame); ok && rc.note != "" && mh.PseudoValue("status") == "431" {
					t.Errorf("%s", rc.note)
				}
			}
			rc.expectEOF()
			if g, closed := srv.Glitches(); g == 0 || closed != 1 {
				t.Errorf("Glitches() = %d, %d; want some, and one connection closed", g, closed)
			}
		})
	}
}

// TestGlitchBudgetHonest: what an honest client may do now and then costs
// it its connection no more: one header list over the limit (its 431, and
// the connection goes on), a PING at a time, the few PRIORITY frames some
// browsers send, streams it cancels among streams that are served.
func TestGlitchBudgetHonest(t *testing.T) {
	release, _ := testnet.Releaser(t)
	srv := newServer(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/held" {
			held(release)(w, r)
			return
		}
		w.Write([]byte("ok"))
	})
	ts := startServer(t, srv)
	rc := ts.dialRaw(t)
	rc.handshake()
	rc.writeBlock(1, true, append(pseudo("/big"), hpack.HeaderField{Name: "x-big", Value: strings.Repeat("v", h2.MaxHeaderListSize), Sensitive: true})...)
	if res := rc.readResponse(1, nil); res.status != "431" {
		t.Fatalf("oversized head: status %q, want 431", res.status)
	}
	rc.batch(func() {
		for id := uint32(3); id <= 11; id += 2 {
			rc.check(rc.fr.WritePriority(id, http2.PriorityParam{Weight: 200}))
		}
	})
	id := uint32(13)
	for i := range 300 {
		if i%3 == 0 {
			// Cancelled before its response: the server sends nothing
			// more on it.
			rc.headers(id, true, request("GET", "/held")...)
			rc.rst(id, http2.ErrCodeCancel)
		} else {
			rc.headers(id, true, request("GET", "/")...)
			if res := rc.readResponse(id, nil); res.status != "200" {
				t.Fatalf("stream %d: status %q", id, res.status)
			}
		}
		id += 2
		if i%10 == 0 {
			rc.sync()
		}
	}
	rc.headers(id, true, request("GET", "/last")...)
	if res := rc.readResponse(id, nil); res.status != "200" {
		t.Fatalf("last stream: status %q", res.status)
	}
	if g, closed := srv.Glitches(); closed != 0 {
		t.Errorf("Glitches() = %d, %d; want no connection closed", g, closed)
	}
}
