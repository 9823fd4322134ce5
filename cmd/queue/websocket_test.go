package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// wsTimeout bounds every websocket exchange: a tunnel that loses or holds
// back a frame shows up as a deadline, not as a hung test.
const wsTimeout = 20 * time.Second

// wsHello is what the echo upstream sends, unasked, right after accepting.
const wsHello = "hello from upstream"

// wsReadLimit lets messages past coder/websocket's 32 KiB default through.
const wsReadLimit = 1 << 20

// startWSEcho starts a websocket echo upstream over HTTP/1.1 and queue in
// front of it with default flags. Each accepted connection first sends
// wsHello, then echoes every message with its type; when its read fails,
// the error is sent on the returned channel.
func startWSEcho(t *testing.T) (*testQueue, <-chan error) {
	t.Helper()
	ended := make(chan error, 16)
	up := h1Upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			ended <- err
			return
		}
		defer c.CloseNow()
		c.SetReadLimit(wsReadLimit)
		ctx := r.Context()
		if err := c.Write(ctx, websocket.MessageText, []byte(wsHello)); err != nil {
			ended <- err
			return
		}
		for {
			typ, b, err := c.Read(ctx)
			if err != nil {
				ended <- err
				return
			}
			if err := c.Write(ctx, typ, b); err != nil {
				ended <- err
				return
			}
		}
	}))
	return startQueue(t, hostPort(up)), ended
}

// wsDial dials queue's serving port and returns the connection; it is
// closed without a handshake when the test ends.
func wsDial(t *testing.T, ctx context.Context, q *testQueue) *websocket.Conn {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	c, res, err := websocket.Dial(ctx, "ws://"+q.addr.Listen+"/echo", &websocket.DialOptions{HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		t.Fatalf("websocket.Dial through queue: %v", err)
	}
	if got, want := res.StatusCode, http.StatusSwitchingProtocols; got != want {
		t.Errorf("handshake status = %d, want %d", got, want)
	}
	c.SetReadLimit(wsReadLimit)
	t.Cleanup(func() { c.CloseNow() })
	return c
}

func wsContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), wsTimeout)
	t.Cleanup(cancel)
	return ctx
}

// readHello reads the upstream's unsolicited first message and checks it.
func readHello(t *testing.T, ctx context.Context, c *websocket.Conn) {
	t.Helper()
	typ, b, err := c.Read(ctx)
	if err != nil {
		t.Fatalf("read the upstream's first message: %v", err)
	}
	if got, want := typ, websocket.MessageText; got != want {
		t.Errorf("first message type = %v, want %v", got, want)
	}
	if got, want := string(b), wsHello; got != want {
		t.Errorf("first message = %q, want %q", got, want)
	}
}

// TestWebsocketServerSpeaksFirst checks that a message the upstream sends
// right after its 101, before the client sent anything, reaches the client.
func TestWebsocketServerSpeaksFirst(t *testing.T) {
	t.Parallel()
	q, _ := startWSEcho(t)
	ctx := wsContext(t)
	c := wsDial(t, ctx, q)
	readHello(t, ctx, c)
}

// TestWebsocketEcho: messages of each type and of the sizes around the
// frame length encodings (125, 126 bytes, 64 KiB and past it) go through
// the tunnel and back whole, three in a row on one connection.
func TestWebsocketEcho(t *testing.T) {
	t.Parallel()
	q, _ := startWSEcho(t)
	binary := make([]byte, 64<<10)
	for i := range binary {
		binary[i] = byte(i * 7)
	}
	tests := []struct {
		name string
		typ  websocket.MessageType
		data []byte
	}{
		{name: "tiny text", typ: websocket.MessageText, data: []byte("hi")},
		{name: "empty text", typ: websocket.MessageText, data: []byte{}},
		{name: "125 byte text", typ: websocket.MessageText, data: bytes.Repeat([]byte("a"), 125)},
		{name: "126 byte binary", typ: websocket.MessageBinary, data: binary[:126]},
		{name: "utf-8 text", typ: websocket.MessageText, data: []byte("ünïcödé ✓")},
		{name: "64 KiB binary", typ: websocket.MessageBinary, data: binary},
		{name: "256 KiB binary", typ: websocket.MessageBinary, data: bytes.Repeat(binary, 4)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := wsContext(t)
			c := wsDial(t, ctx, q)
			readHello(t, ctx, c)
			// Several in a row on one connection, then their echoes.
			const n = 3
			for i := range n {
				if err := c.Write(ctx, tt.typ, tt.data); err != nil {
					t.Fatalf("write %d: %v", i, err)
				}
			}
			for i := range n {
				typ, b, err := c.Read(ctx)
				if err != nil {
					t.Fatalf("read echo %d: %v", i, err)
				}
				if got, want := typ, tt.typ; got != want {
					t.Errorf("echo %d type = %v, want %v", i, got, want)
				}
				if !bytes.Equal(b, tt.data) {
					t.Errorf("echo %d = %d bytes, want the %d sent", i, len(b), len(tt.data))
				}
			}
			if err := c.Close(websocket.StatusNormalClosure, ""); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
}

// TestWebsocketEchoSequence sends messages of different sizes one at a time
// on a single connection, each checked before the next is sent.
func TestWebsocketEchoSequence(t *testing.T) {
	t.Parallel()
	q, _ := startWSEcho(t)
	ctx := wsContext(t)
	c := wsDial(t, ctx, q)
	readHello(t, ctx, c)
	for i, size := range []int{1, 0, 100, 64 << 10, 3, 70000, 10} {
		typ := websocket.MessageBinary
		if i%2 == 0 {
			typ = websocket.MessageText
		}
		msg := bytes.Repeat([]byte{'a' + byte(i)}, size)
		if err := c.Write(ctx, typ, msg); err != nil {
			t.Fatalf("write message %d: %v", i, err)
		}
		gotTyp, b, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("read echo %d: %v", i, err)
		}
		if got, want := gotTyp, typ; got != want {
			t.Errorf("echo %d type = %v, want %v", i, got, want)
		}
		if !bytes.Equal(b, msg) {
			t.Errorf("echo %d = %d bytes, want the %d sent", i, len(b), len(msg))
		}
	}
}

// TestWebsocketClientClose checks that the client's close code and reason
// reach the upstream through the tunnel, and the upstream's close reply
// reaches the client (Close returns nil only after it).
func TestWebsocketClientClose(t *testing.T) {
	t.Parallel()
	q, ended := startWSEcho(t)
	ctx := wsContext(t)
	c := wsDial(t, ctx, q)
	readHello(t, ctx, c)
	const code, reason = websocket.StatusCode(4001), "client is done"
	if err := c.Close(code, reason); err != nil {
		t.Errorf("Close: %v", err)
	}
	select {
	case err := <-ended:
		if got, want := websocket.CloseStatus(err), code; got != want {
			t.Errorf("upstream saw close status %v (err %v), want %v", got, err, want)
		}
		var ce websocket.CloseError
		if errors.As(err, &ce) {
			if got, want := ce.Reason, reason; got != want {
				t.Errorf("upstream saw close reason %q, want %q", got, want)
			}
		}
	case <-ctx.Done():
		t.Fatalf("upstream did not see the close: %v", ctx.Err())
	}
}

// TestWebsocketUpgradeRefused checks that an upstream's ordinary answer to
// an upgrade request reaches the client as it is, and no tunnel is made.
func TestWebsocketUpgradeRefused(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		code int
		body string
	}{
		{name: "forbidden", code: http.StatusForbidden, body: "no websockets for you"},
		{name: "not found", code: http.StatusNotFound, body: "nothing here"},
		{name: "ignored upgrade", code: http.StatusOK, body: "plain answer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			up := h1Upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
					http.Error(w, "upstream wanted an upgrade request", http.StatusTeapot)
					return
				}
				w.Header().Set("X-Refused", "yes")
				w.WriteHeader(tt.code)
				io.WriteString(w, tt.body)
			}))
			q := startQueue(t, hostPort(up))
			tr := &http.Transport{}
			t.Cleanup(tr.CloseIdleConnections)
			c, res, err := websocket.Dial(wsContext(t), "ws://"+q.addr.Listen+"/", &websocket.DialOptions{HTTPClient: &http.Client{Transport: tr}})
			if err == nil {
				c.CloseNow()
				t.Fatal("websocket.Dial succeeded, want a refused handshake")
			}
			if res == nil {
				t.Fatalf("websocket.Dial: %v, and no response", err)
			}
			defer res.Body.Close()
			if got, want := res.StatusCode, tt.code; got != want {
				t.Errorf("status = %d, want %d", got, want)
			}
			if got, want := res.Header.Get("X-Refused"), "yes"; got != want {
				t.Errorf("X-Refused = %q, want %q", got, want)
			}
			b, err := io.ReadAll(res.Body)
			if err != nil {
				t.Fatalf("read body: %v", err)
			}
			if got, want := string(b), tt.body; got != want {
				t.Errorf("body = %q, want %q", got, want)
			}
			if got, want := q.app.proxy.Tunnels(), 0; got != want {
				t.Errorf("open tunnels = %d, want %d", got, want)
			}
		})
	}
}
