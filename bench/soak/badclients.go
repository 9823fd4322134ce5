package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// Pacing of the slow clients: what they wait between two bytes of a head
// or body, and between two reads of a response. These pauses are the
// clients' behaviour, not synchronisation.
const (
	slowByte = 20 * time.Millisecond
	slowRead = 4 * time.Millisecond
)

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// badClient is one kind of slow or vanishing client; reset, for a vanishing
// one, asks for a TCP RST rather than a FIN.
type badClient func(ctx context.Context, reset bool) error

// slowRound runs each slow client once, at the same time, and waits for
// them. Each is a request of proto slow, a failure as any other.
func (c *clients) slowRound(ctx context.Context) {
	tlsH1 := c.is.clientConfig("http/1.1")
	c.round([]badClient{
		func(ctx context.Context, _ bool) error { return slowHead(ctx, c.a) },
		func(ctx context.Context, _ bool) error { return slowBody(ctx, c.b) },
		func(ctx context.Context, _ bool) error { return slowReader(ctx, c.a, nil) },
		func(ctx context.Context, _ bool) error { return slowReader(ctx, c.aTLS, tlsH1) },
		func(ctx context.Context, _ bool) error { return slowH2Reader(ctx, c.b, nil) },
		func(ctx context.Context, _ bool) error { return slowH2Reader(ctx, c.aTLS, c.is.clientConfig("h2")) },
	}, func(start time.Time, err error) { c.rec.done(pSlow, start, err) })
}

// vanishRound runs each vanishing client once, at the same time, and waits
// for them. A client that got as far as it meant to before vanishing counts
// as a request abandoned by design; one that failed before is a failure of
// proto vanish.
func (c *clients) vanishRound(ctx context.Context) {
	tlsH1, tlsH2 := c.is.clientConfig("http/1.1"), c.is.clientConfig("h2")
	c.round([]badClient{
		func(ctx context.Context, reset bool) error { return vanishMidHead(ctx, c.a, reset) },
		func(ctx context.Context, reset bool) error { return vanishMidBody(ctx, c.b, 16<<10, reset) },  // a body queue holds
		func(ctx context.Context, reset bool) error { return vanishMidBody(ctx, c.a, 256<<10, reset) }, // a body queue streams
		func(ctx context.Context, reset bool) error { return vanishMidResponse(ctx, c.a, nil, reset) },
		func(ctx context.Context, reset bool) error { return vanishMidResponse(ctx, c.b, nil, reset) },
		func(ctx context.Context, reset bool) error { return vanishMidResponse(ctx, c.aTLS, tlsH1, reset) },
		func(ctx context.Context, reset bool) error { return vanishH2(ctx, c.a, nil, reset) },
		func(ctx context.Context, reset bool) error { return vanishH2(ctx, c.b, nil, reset) },
		func(ctx context.Context, reset bool) error { return vanishH2(ctx, c.aTLS, tlsH2, reset) },
		func(ctx context.Context, _ bool) error { return c.vanishWebsocket(ctx) },
		func(ctx context.Context, _ bool) error { return c.vanishGRPC(ctx) },
	}, func(start time.Time, err error) {
		if err != nil {
			c.rec.done(pVanish, start, err)
			return
		}
		c.rec.vanished(pVanish)
	})
}

// round runs each of bad at once, each under cfg.requestTimeout, and hands
// each result to report unless the soak is stopping.
func (c *clients) round(bad []badClient, report func(time.Time, error)) {
	reset := c.rounds.Add(1)%2 == 0
	var wg sync.WaitGroup
	for i, b := range bad {
		wg.Go(func() {
			start := time.Now()
			ctx, cancel := context.WithTimeout(c.base, c.cfg.requestTimeout)
			err := b(ctx, reset != (i%2 == 0))
			cancel()
			if c.base.Err() == nil {
				report(start, err)
			}
		})
	}
	wg.Wait()
}

// dialDeadline dials addr (over TLS when tlsCfg is set) with a deadline of
// ctx's on the connection.
func dialDeadline(ctx context.Context, addr string, tlsCfg *tls.Config, rcvbuf int) (net.Conn, error) {
	conn, err := dial(ctx, addr, tlsCfg, rcvbuf)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	return conn, nil
}

// readResponse reads an HTTP/1.1 response and checks a 200 with body want.
func readResponse(br *bufio.Reader, method string, want []byte) error {
	res, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		return fmt.Errorf("read response: %w", err)
	}
	defer res.Body.Close()
	got, err := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", res.StatusCode)
	}
	if err != nil {
		return fmt.Errorf("read body: %w", err)
	}
	return checkBody(got, want)
}

// writeSlowly writes b one byte at a time, slowByte apart.
func writeSlowly(ctx context.Context, conn net.Conn, b string) error {
	for i := range len(b) {
		if _, err := io.WriteString(conn, b[i:i+1]); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		if err := pause(ctx, slowByte); err != nil {
			return err
		}
	}
	return nil
}

// slowHead sends a GET's head byte by byte (about a second, under queue's
// 10 s head limit) and checks the answer.
func slowHead(ctx context.Context, addr string) error {
	conn, err := dialDeadline(ctx, addr, nil, 0)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := writeSlowly(ctx, conn, "GET /1k HTTP/1.1\r\nHost: soak\r\nUser-Agent: soak-slow\r\n\r\n"); err != nil {
		return fmt.Errorf("slow head: %w", err)
	}
	if err := readResponse(bufio.NewReader(conn), http.MethodGet, data[:size1k]); err != nil {
		return fmt.Errorf("slow head: %w", err)
	}
	return nil
}

// slowBody sends a POST's head at once and its 100-byte body byte by byte.
func slowBody(ctx context.Context, addr string) error {
	conn, err := dialDeadline(ctx, addr, nil, 0)
	if err != nil {
		return err
	}
	defer conn.Close()
	body := data[:100]
	if _, err := io.WriteString(conn, "POST /echo HTTP/1.1\r\nHost: soak\r\nContent-Length: 100\r\n\r\n"); err != nil {
		return fmt.Errorf("slow body: write head: %w", err)
	}
	if err := writeSlowly(ctx, conn, string(body)); err != nil {
		return fmt.Errorf("slow body: %w", err)
	}
	if err := readResponse(bufio.NewReader(conn), http.MethodPost, body); err != nil {
		return fmt.Errorf("slow body: %w", err)
	}
	return nil
}

// slowReader reads GET /big (1 MiB) 4 KiB at a time, slowRead apart, over
// a socket with a 4 KiB receive buffer, so that queue's writes block on it.
func slowReader(ctx context.Context, addr string, tlsCfg *tls.Config) error {
	conn, err := dialDeadline(ctx, addr, tlsCfg, 4<<10)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /big HTTP/1.1\r\nHost: soak\r\n\r\n"); err != nil {
		return fmt.Errorf("slow reader: write: %w", err)
	}
	res, err := http.ReadResponse(bufio.NewReaderSize(conn, 4<<10), &http.Request{Method: http.MethodGet})
	if err != nil {
		return fmt.Errorf("slow reader: read response: %w", err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("slow reader: status %d", res.StatusCode)
	}
	buf := make([]byte, 4<<10)
	n := 0
	for {
		k, err := res.Body.Read(buf)
		if n+k > sizeBig || !bytes.Equal(buf[:k], data[n:n+k]) {
			return fmt.Errorf("slow reader: body differs at byte %d", n)
		}
		n += k
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("slow reader: after %d bytes: %w", n, err)
		}
		if err := pause(ctx, slowRead); err != nil {
			return err
		}
	}
	if n != sizeBig {
		return fmt.Errorf("slow reader: %d bytes, want %d", n, sizeBig)
	}
	return nil
}

// slowH2Reader reads GET /big over HTTP/2 with a 16 KiB stream window,
// giving each DATA frame's credit back slowRead after it arrived, so that
// queue's stream waits on flow control.
func slowH2Reader(ctx context.Context, addr string, tlsCfg *tls.Config) error {
	dl, _ := ctx.Deadline()
	h, err := dialH2(ctx, addr, tlsCfg, 16<<10, dl)
	if err != nil {
		return fmt.Errorf("slow h2 reader: %w", err)
	}
	defer h.c.Close()
	id, err := h.open(http.MethodGet, "/big", nil, true)
	if err != nil {
		return fmt.Errorf("slow h2 reader: %w", err)
	}
	n := 0
	err = h.read(func(f http2.Frame) (bool, error) {
		if f.Header().StreamID != id {
			return false, nil
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			return false, status200(f)
		case *http2.RSTStreamFrame:
			return false, fmt.Errorf("RST_STREAM %v after %d bytes", f.ErrCode, n)
		case *http2.DataFrame:
			b := f.Data()
			if n+len(b) > sizeBig || !bytes.Equal(b, data[n:n+len(b)]) {
				return false, fmt.Errorf("body differs at byte %d", n)
			}
			n += len(b)
			if f.StreamEnded() {
				return true, nil
			}
			if err := pause(ctx, slowRead); err != nil {
				return false, err
			}
			if k := uint32(f.Length); k > 0 {
				if err := h.fr.WriteWindowUpdate(0, k); err != nil {
					return false, err
				}
				if err := h.fr.WriteWindowUpdate(id, k); err != nil {
					return false, err
				}
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("slow h2 reader: %w", err)
	}
	if n != sizeBig {
		return fmt.Errorf("slow h2 reader: %d bytes, want %d", n, sizeBig)
	}
	return nil
}

// vanishMidHead sends part of a request head and goes.
func vanishMidHead(ctx context.Context, addr string, reset bool) error {
	conn, err := dialDeadline(ctx, addr, nil, 0)
	if err != nil {
		return err
	}
	defer vanish(conn, reset)
	if _, err := io.WriteString(conn, "GET /1k HTTP/1.1\r\nHost: soak\r\nX-Soak: going"); err != nil {
		return fmt.Errorf("vanish mid-head: %w", err)
	}
	return nil
}

// vanishMidBody announces a body of n bytes, sends 1 KiB of it and goes.
func vanishMidBody(ctx context.Context, addr string, n int, reset bool) error {
	conn, err := dialDeadline(ctx, addr, nil, 0)
	if err != nil {
		return err
	}
	defer vanish(conn, reset)
	head := "POST /echo HTTP/1.1\r\nHost: soak\r\nContent-Length: " + strconv.Itoa(n) + "\r\n\r\n"
	if _, err := io.WriteString(conn, head+string(data[:1<<10])); err != nil {
		return fmt.Errorf("vanish mid-body: %w", err)
	}
	// Give queue a moment to start the exchange: the client is leaving in
	// the middle of it, not before it.
	return pause(ctx, 10*time.Millisecond)
}

// vanishMidResponse asks for GET /big, reads the head (a 200) and 8 KiB of
// the body, and goes.
func vanishMidResponse(ctx context.Context, addr string, tlsCfg *tls.Config, reset bool) error {
	conn, err := dialDeadline(ctx, addr, tlsCfg, 0)
	if err != nil {
		return err
	}
	defer vanish(conn, reset)
	if _, err := io.WriteString(conn, "GET /big HTTP/1.1\r\nHost: soak\r\n\r\n"); err != nil {
		return fmt.Errorf("vanish mid-response: write: %w", err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: http.MethodGet})
	if err != nil {
		return fmt.Errorf("vanish mid-response: %w", err)
	}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("vanish mid-response: status %d", res.StatusCode)
	}
	if _, err := io.ReadFull(res.Body, make([]byte, 8<<10)); err != nil {
		return fmt.Errorf("vanish mid-response: read body: %w", err)
	}
	return nil
}

// vanishH2 opens three streams (two GET /big, and a POST /echo whose body
// it does not finish), waits for a 200 and the first DATA of a GET, and
// goes with all three open.
func vanishH2(ctx context.Context, addr string, tlsCfg *tls.Config, reset bool) error {
	dl, _ := ctx.Deadline()
	h, err := dialH2(ctx, addr, tlsCfg, 0, dl)
	if err != nil {
		return fmt.Errorf("vanish h2: %w", err)
	}
	defer vanish(h.c, reset)
	for _, s := range []struct {
		method string
		path   string
		body   []byte
	}{{http.MethodGet, "/big", nil}, {http.MethodGet, "/big", nil}, {http.MethodPost, "/echo", data[:1<<10]}} {
		if _, err := h.open(s.method, s.path, s.body, s.body == nil); err != nil {
			return fmt.Errorf("vanish h2: %w", err)
		}
	}
	err = h.read(func(f http2.Frame) (bool, error) {
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			return false, status200(f)
		case *http2.RSTStreamFrame:
			return false, fmt.Errorf("stream %d: RST_STREAM %v", f.StreamID, f.ErrCode)
		case *http2.DataFrame:
			return f.Length > 0, nil
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("vanish h2: %w", err)
	}
	return nil
}

// vanishWebsocket opens a session through queue up-h1, echoes one message
// and drops the connection without a closing handshake.
func (c *clients) vanishWebsocket(ctx context.Context) error {
	conn, _, err := websocket.Dial(ctx, "ws://"+c.a+"/ws", &websocket.DialOptions{HTTPClient: &http.Client{Transport: c.ws}})
	if err != nil {
		return fmt.Errorf("vanish websocket: dial: %w", err)
	}
	defer conn.CloseNow()
	if err := conn.Write(ctx, websocket.MessageText, []byte("going")); err != nil {
		return fmt.Errorf("vanish websocket: write: %w", err)
	}
	if _, _, err := conn.Read(ctx); err != nil {
		return fmt.Errorf("vanish websocket: read: %w", err)
	}
	return nil
}

// vanishGRPC opens a connection of its own to queue up-h2c, starts a
// FullDuplexCall, echoes one message, and closes the connection with the
// stream open.
func (c *clients) vanishGRPC(ctx context.Context) error {
	conn, err := grpc.NewClient("passthrough:///"+c.b, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("vanish gRPC: %w", err)
	}
	defer conn.Close()
	s, err := testpb.NewTestServiceClient(conn).FullDuplexCall(ctx)
	if err != nil {
		return fmt.Errorf("vanish gRPC: FullDuplexCall: %w", err)
	}
	payload := data[:100]
	if err := s.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: payload}}); err != nil {
		return fmt.Errorf("vanish gRPC: send: %w", err)
	}
	res, err := s.Recv()
	if err != nil {
		return fmt.Errorf("vanish gRPC: receive: %w", err)
	}
	return checkBody(res.GetPayload().GetBody(), payload)
}
