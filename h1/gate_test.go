package h1

import (
	"bufio"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

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

// TestGateGoneTakeNoTurn: while overloaded, the connections of clients that
// have gone, at the head of the backlog, are all reset on one turn of the
// gate, and the live one behind them is served on that turn, as a whole
// connection: its address is the client's and it carries a second
// request.
func TestGateGoneTakeNoTurn(t *testing.T) {
	t.Parallel()
	var served atomic.Int32
	gate, addr := startGated(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		w.Write([]byte(r.URL.Path + " from " + r.RemoteAddr))
	})}, true)

	var gone []*net.TCPConn
	for range 3 {
		c := dial(t, addr)
		if _, err := c.Write([]byte("GET /gone HTTP/1.1\r\nHost: a\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		c.CloseWrite()
		testnet.WaitPeerClosed(t, c, failAfter)
		gone = append(gone, c)
	}
	live := dial(t, addr)
	gate.open <- struct{}{} // one turn
	live.SetDeadline(time.Now().Add(failAfter))
	br := bufio.NewReader(live)
	for _, path := range []string{"/live", "/again"} {
		if _, err := live.Write([]byte("GET " + path + " HTTP/1.1\r\nHost: a\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		x, err := readReply(br, http.MethodGet)
		if want := path + " from " + live.LocalAddr().String(); err != nil || string(x.body) != want {
			t.Fatalf("live client: %v, body %q; want %q", err, x.body, want)
		}
	}
	for i, c := range gone {
		if !closedByPeer(t, c, bufio.NewReader(c)) {
			t.Errorf("gone client %d: its connection was not closed", i)
		}
	}
	if n := served.Load(); n != 2 {
		t.Errorf("handler ran %d times, want 2", n)
	}
}
