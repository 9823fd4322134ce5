package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestTimeouts: before any response byte a timeout is a 504; after the
// response started it cuts the response (HTTP/1.1 close, HTTP/2 reset),
// never appends to it; a response that started is past the response start
// timeout, and a steady one is spared by the idle timeout, however long it
// lasts. Each upstream handler blocks until queue gives up on it, so the
// timer under test is queue's, not the test's.
//
// Where the upstream must beat a timeout (its first byte, the gaps of its
// trickle), the timeout is 500 ms: twenty times the trickle's gaps, and
// room for a slow machine; the trickle itself lasts longer (ticks times
// trickleGap), so that the timer shows if it did not stop or restart.
// Where queue must give up first, a shorter timeout does.
func TestTimeouts(t *testing.T) {
	t.Parallel()
	const ticks, trickleGap = 25, 25 * time.Millisecond
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hang": // never answers
		case "/partial": // starts, then stalls
			w.Header().Set("Content-Length", "100")
			io.WriteString(w, "started")
			w.(http.Flusher).Flush()
		case "/trickle": // a write every trickleGap, ticks times: never idle for long
			for range ticks {
				io.WriteString(w, "tick\n")
				w.(http.Flusher).Flush()
				select {
				case <-time.After(trickleGap): // the upstream's pace, not synchronisation
				case <-r.Context().Done():
					return
				}
			}
			return
		}
		<-r.Context().Done()
	})
	tests := []struct {
		name, flag, value, path string
		want                    int // 0: the response must be cut
	}{
		{"timeout before the first byte", "--timeout", "300ms", "/hang", 504},
		{"timeout after the first byte", "--timeout", "500ms", "/partial", 0},
		{"response start timeout", "--response-start-timeout", "200ms", "/hang", 504},
		{"response start timeout is over once it started", "--response-start-timeout", "500ms", "/trickle", 200},
		{"idle timeout cuts a stalled body", "--idle-timeout", "500ms", "/partial", 0},
		{"idle timeout spares a steady stream", "--idle-timeout", "500ms", "/trickle", 200},
	}
	for _, up := range []string{"http1", "h2c"} {
		for _, tt := range tests {
			t.Run(up+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				var u string
				if up == "h2c" {
					u = hostPort(h2cUpstream(t, handler))
				} else {
					u = hostPort(h1Upstream(t, handler))
				}
				q := startQueue(t, u, "--upstream-protocol", up, tt.flag, tt.value)
				for _, mode := range []string{modeH1, modeH2C} {
					c, base := q.client(t, mode)
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+tt.path, nil)
					res, err := c.Do(req)
					if err != nil {
						t.Fatalf("%s: %v", mode, err)
					}
					body, rerr := io.ReadAll(res.Body)
					res.Body.Close()
					if ctx.Err() != nil {
						t.Fatalf("%s: queue did not enforce %s", mode, tt.flag)
					}
					switch tt.want {
					case 0:
						if res.StatusCode != 200 || rerr == nil {
							t.Errorf("%s: got %d %q with read error %v, want a cut 200 response", mode, res.StatusCode, body, rerr)
						}
						if strings.Contains(string(body), "Gateway") {
							t.Errorf("%s: status text appended to a started body: %q", mode, body)
						}
					default:
						if res.StatusCode != tt.want || rerr != nil {
							t.Errorf("%s: got %d %q (%v), want %d", mode, res.StatusCode, body, rerr, tt.want)
						}
						if tt.want == 504 && string(body) != "Gateway Timeout" {
							t.Errorf("%s: body %q, want Gateway Timeout", mode, body)
						}
						if tt.want == 200 && strings.Count(string(body), "tick") != ticks {
							t.Errorf("%s: body %q, want %d ticks", mode, body, ticks)
						}
					}
				}
			})
		}
	}
}

// TestWebsocketOutlivesTimeout: an upgraded connection is not cut by
// --timeout.
func TestWebsocketOutlivesTimeout(t *testing.T) {
	t.Parallel()
	up := h1Upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, msg, err := c.Read(r.Context())
			if err != nil {
				return
			}
			if c.Write(r.Context(), typ, msg) != nil {
				return
			}
		}
	}))
	q := startQueue(t, hostPort(up), "--timeout", "200ms")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws://"+q.addr.Listen+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	start := time.Now()
	for i := 0; time.Since(start) < 3*200*time.Millisecond; i++ {
		msg := []byte(strings.Repeat("m", i+1))
		if err := c.Write(ctx, websocket.MessageText, msg); err != nil {
			t.Fatalf("write after %v: %v", time.Since(start), err)
		}
		_, got, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("read after %v: %v", time.Since(start), err)
		}
		if string(got) != string(msg) {
			t.Fatalf("echo %q, want %q", got, msg)
		}
		time.Sleep(20 * time.Millisecond) // time passing is what is under test
	}
	c.Close(websocket.StatusNormalClosure, "")
}
