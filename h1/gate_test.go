package h1

import (
	"bufio"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/queue-dev/queue/internal/testnet"
)

// testGate is an accept gate the test opens one accept at a time, and
// which reports overloaded.
type testGate struct {
	open       chan struct{}
	overloaded bool
	closed     chan struct{}
}

// startGated starts s with a new gate, and has the cleanup open the gate
// for good before it closes s, so that Serve gets past Wait.
func startGated(t *testing.T, s *Server, overloaded bool) (*testGate, string) {
	g := &testGate{open: make(chan struct{}), overloaded: overloaded, closed: make(chan struct{})}
	s.Gate = g
	addr := startServer(t, s)
	t.Cleanup(func() { close(g.closed) })
	return g, addr
}

func (g *testGate) Wait() bool {
	select {
	case <-g.open:
	case <-g.closed:
	}
	return g.overloaded
}

// TestGateResetsGoneClient: while the gate reports overload, a connection
// whose client closed it while it waited in the backlog is reset at
// accept and its request never reaches the handler; the next one is
// served. Without overload the same half-closed client is answered.
func TestGateResetsGoneClient(t *testing.T) {
	t.Parallel()
	for _, overloaded := range []bool{true, false} {
		t.Run("overloaded="+strconv.FormatBool(overloaded), func(t *testing.T) {
			t.Parallel()
			var served atomic.Int32
			gate, addr := startGated(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				served.Add(1)
				w.Write([]byte(r.URL.Path))
			})}, overloaded)

			gone := dial(t, addr)
			if _, err := gone.Write([]byte("GET /gone HTTP/1.1\r\nHost: a\r\n\r\n")); err != nil {
				t.Fatal(err)
			}
			gone.CloseWrite() // as a client that gave up, or one that half-closes
			testnet.WaitPeerClosed(t, gone, failAfter)
			gate.open <- struct{}{} // accept it
			br := bufio.NewReader(gone)
			if overloaded {
				if !closedByPeer(t, gone, br) {
					t.Errorf("the connection of a client that had gone was not closed")
				}
			} else {
				x, err := readReply(br, http.MethodGet)
				if err != nil || string(x.body) != "/gone" {
					t.Errorf("half-closed client without overload: %v, body %q; want /gone", err, x.body)
				}
			}

			live := dial(t, addr)
			if _, err := live.Write([]byte("GET /live HTTP/1.1\r\nHost: a\r\n\r\n")); err != nil {
				t.Fatal(err)
			}
			gate.open <- struct{}{}
			x, err := readReply(bufio.NewReader(live), http.MethodGet)
			if err != nil || string(x.body) != "/live" {
				t.Fatalf("live client: %v, body %q; want /live", err, x.body)
			}
			want := int32(1)
			if !overloaded {
				want = 2
			}
			if n := served.Load(); n != want {
				t.Errorf("handler ran %d times, want %d", n, want)
			}
		})
	}
}
