package h1

import (
	"bufio"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/queue-dev/queue/internal/engine"
)

// TestGlitchBudget: requests a handler refuses itself (Refuser) count
// against the connection's budget; the response that goes past it carries
// "Connection: close" and the connection closes; a request served takes one
// back, so that a client whose refused requests are few among served ones
// keeps its connection. The server's counts move.
func TestGlitchBudget(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// paths are the connection's requests in order; /bad is refused.
		paths []string
		// closeAt is the index of the response that closes the
		// connection, -1 for none.
		closeAt int
	}{
		{"refused again and again", repeat("/bad", MaxGlitches+1), MaxGlitches},
		{"refused among served", append(alternate("/bad", "/ok", 2*MaxGlitches), repeat("/bad", MaxGlitches)...), -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/bad" {
					w.(engine.Refuser).Refuse()
					w.WriteHeader(http.StatusBadRequest)
					return
				}
				w.Write([]byte("ok"))
			})}
			c := dial(t, startServer(t, s))
			br := bufio.NewReader(c)
			c.SetDeadline(time.Now().Add(failAfter))
			for i, p := range tc.paths {
				fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: a\r\n\r\n", p)
				x, err := readReply(br, http.MethodGet)
				if err != nil {
					t.Fatalf("request %d (%s): %v", i, p, err)
				}
				if want := i == tc.closeAt; x.res.Close != want {
					t.Fatalf("request %d (%s): Connection: close %v, want %v", i, p, x.res.Close, want)
				}
				if x.res.Close {
					if !closedByPeer(t, c, br) {
						t.Errorf("the connection stayed open after Connection: close")
					}
					break
				}
			}
			g, closed := s.Glitches()
			wantClosed := uint64(0)
			if tc.closeAt >= 0 {
				wantClosed = 1
			}
			if g == 0 || closed != wantClosed {
				t.Errorf("Glitches() = %d, %d; want some, and %d connections closed", g, closed, wantClosed)
			}
		})
	}
}

func repeat(p string, n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = p
	}
	return s
}

// alternate returns a, b, a, b... n paths long.
func alternate(a, b string, n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = a
		if i%2 == 1 {
			s[i] = b
		}
	}
	return s
}
