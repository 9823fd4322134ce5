package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// clients are the soak's well-behaved clients and the slow and vanishing
// ones. The transports live for the run; the gRPC connection for a phase.
// Every request is bounded by cfg.requestTimeout and reports to rec.
type clients struct {
	cfg  *config
	rec  *recorder
	is   *issuer
	base context.Context // the run's: requests are not cut when their phase's load ends

	a, aTLS, b string // queue "up-h1"'s serving and TLS addresses, queue "up-h2c"'s serving address

	h1, h2c, tlsH1, tlsH2, ws *http.Transport

	rounds atomic.Int64 // rounds of bad clients so far: vanishing ones alternate FIN and RST

	mu   sync.Mutex
	grpc *grpc.ClientConn // to queue up-h2c, for the current phase
}

func newClients(base context.Context, cfg *config, rec *recorder, is *issuer, a, aTLS, b string) *clients {
	c := &clients{cfg: cfg, rec: rec, is: is, base: base, a: a, aTLS: aTLS, b: b}
	c.h1 = &http.Transport{MaxIdleConnsPerHost: cfg.workers, DisableCompression: true}
	h2c := new(http.Protocols)
	h2c.SetUnencryptedHTTP2(true)
	c.h2c = &http.Transport{Protocols: h2c, DisableCompression: true}
	c.tlsH1 = &http.Transport{
		MaxIdleConnsPerHost: cfg.workers, DisableCompression: true,
		TLSClientConfig: is.clientConfig("http/1.1"),
		// A non-nil empty map keeps HTTP/2 off: ALPN offers http/1.1 alone.
		TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
	h2 := new(http.Protocols)
	h2.SetHTTP2(true)
	c.tlsH2 = &http.Transport{Protocols: h2, DisableCompression: true, TLSClientConfig: is.clientConfig("h2")}
	c.ws = &http.Transport{DisableKeepAlives: true}
	return c
}

// startPhase opens the phase's gRPC connection.
func (c *clients) startPhase() error {
	conn, err := grpc.NewClient("passthrough:///"+c.b, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("gRPC client: %w", err)
	}
	c.mu.Lock()
	c.grpc = conn
	c.mu.Unlock()
	return nil
}

// rest closes every idle client connection, the gRPC one included, so that
// queue at rest holds none of the soak's.
func (c *clients) rest() {
	for _, t := range []*http.Transport{c.h1, c.h2c, c.tlsH1, c.tlsH2, c.ws} {
		t.CloseIdleConnections()
	}
	c.mu.Lock()
	if c.grpc != nil {
		c.grpc.Close()
		c.grpc = nil
	}
	c.mu.Unlock()
}

// run runs the phase's load until ctx ends and every client has returned.
func (c *clients) run(ctx context.Context) {
	var wg sync.WaitGroup
	n := c.cfg.workers
	for w := range n {
		// Even workers load queue up-h1, odd ones up-h2c: both proxy paths
		// of a plain client.
		target := c.a
		if w%2 == 1 {
			target = c.b
		}
		body := data[:16<<10]
		c.worker(ctx, &wg, pH1, c.cfg.httpRate, func(ctx context.Context, i int) error {
			return c.httpOnce(ctx, c.h1, "http://"+target, 1, i, body)
		})
		c.worker(ctx, &wg, pH2C, c.cfg.httpRate, func(ctx context.Context, i int) error {
			return c.httpOnce(ctx, c.h2c, "http://"+target, 2, i, body)
		})
		c.worker(ctx, &wg, pTLSH1, c.cfg.httpRate, func(ctx context.Context, i int) error {
			return c.httpOnce(ctx, c.tlsH1, "https://"+c.aTLS, 1, i, body)
		})
		c.worker(ctx, &wg, pTLSH2, c.cfg.httpRate, func(ctx context.Context, i int) error {
			return c.httpOnce(ctx, c.tlsH2, "https://"+c.aTLS, 2, i, body)
		})
		c.worker(ctx, &wg, pGRPC, c.cfg.grpcRate, func(ctx context.Context, i int) error {
			return c.unary(ctx, body[:1+i%1024])
		})
		c.worker(ctx, &wg, pWS, c.cfg.streamRate, func(ctx context.Context, i int) error {
			return c.websocket(ctx, body[:1+i%4096])
		})
		c.worker(ctx, &wg, pGRPCStream, c.cfg.streamRate, func(ctx context.Context, i int) error {
			return c.stream(ctx, body[:1+i%4096])
		})
	}
	if c.cfg.slowEvery > 0 {
		wg.Go(func() { every(ctx, c.cfg.slowEvery, c.slowRound) })
	}
	if c.cfg.vanishEvery > 0 {
		wg.Go(func() { every(ctx, c.cfg.vanishEvery, c.vanishRound) })
	}
	wg.Wait()
}

// worker starts one of a class's cfg.workers clients: it runs do about
// rate/workers times a second (no faster, and without catching up after a
// slow request) until ctx ends, each under its own timeout.
func (c *clients) worker(ctx context.Context, wg *sync.WaitGroup, p proto, rate float64, do func(context.Context, int) error) {
	if rate <= 0 {
		return
	}
	period := time.Duration(float64(c.cfg.workers) / rate * float64(time.Second))
	wg.Go(func() {
		t := time.NewTimer(rand.N(period)) // spread the workers' requests over the period
		defer t.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			start := time.Now()
			rctx, cancel := context.WithTimeout(c.base, c.cfg.requestTimeout)
			err := do(rctx, i)
			cancel()
			if c.base.Err() != nil {
				return // the soak is stopping: the request was cut by it
			}
			c.rec.done(p, start, err)
			t.Reset(max(0, period-time.Since(start)))
		}
	})
}

// every runs round once per period until ctx ends, waiting for each round
// to finish before the next is due: a round late by more than a period is
// not made up.
func every(ctx context.Context, period time.Duration, round func(context.Context)) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			round(ctx)
		}
	}
}

// httpOnce makes request i of a plain client: mostly GET /1k, every tenth
// a GET /64k and every tenth a POST /echo of 1 to 16 KiB (a prefix of
// body). Anything but a 200 with the expected body over HTTP/major fails.
func (c *clients) httpOnce(ctx context.Context, t *http.Transport, base string, major, i int, body []byte) error {
	var req *http.Request
	var want []byte
	var err error
	switch i % 10 {
	case 8:
		req, err = http.NewRequestWithContext(ctx, http.MethodGet, base+"/64k", nil)
		want = data[:size64k]
	case 9:
		want = body[:(1+i/10%16)<<10]
		req, err = http.NewRequestWithContext(ctx, http.MethodPost, base+"/echo", bytes.NewReader(want))
	default:
		req, err = http.NewRequestWithContext(ctx, http.MethodGet, base+"/1k", nil)
		want = body[:size1k]
	}
	if err != nil {
		return err
	}
	res, err := t.RoundTrip(req)
	if err != nil {
		return err
	}
	got, err := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: status %d", req.Method, req.URL.Path, res.StatusCode)
	}
	if err != nil {
		return fmt.Errorf("%s %s: read body: %w", req.Method, req.URL.Path, err)
	}
	if res.ProtoMajor != major {
		return fmt.Errorf("%s %s: answered over %s, want HTTP/%d", req.Method, req.URL.Path, res.Proto, major)
	}
	return checkBody(got, want)
}

func (c *clients) grpcClient() (testpb.TestServiceClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.grpc == nil {
		return nil, errors.New("no gRPC connection in this phase")
	}
	return testpb.NewTestServiceClient(c.grpc), nil
}

// unary makes one UnaryCall through queue up-h2c and checks the echo.
func (c *clients) unary(ctx context.Context, payload []byte) error {
	cl, err := c.grpcClient()
	if err != nil {
		return err
	}
	res, err := cl.UnaryCall(ctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: payload}})
	if err != nil {
		return fmt.Errorf("UnaryCall: %w", err)
	}
	return checkBody(res.GetPayload().GetBody(), payload)
}

// A websocket session or a gRPC stream echoes streamMessages messages,
// streamGap apart, before it closes: it lasts long enough (about 200 ms)
// that an upstream kill finds some open and cuts them.
const (
	streamMessages = 3
	streamGap      = 100 * time.Millisecond
)

// stream runs a FullDuplexCall through queue up-h2c: streamMessages
// ping-pongs, then the client's half-close and the server's end.
func (c *clients) stream(ctx context.Context, payload []byte) error {
	cl, err := c.grpcClient()
	if err != nil {
		return err
	}
	s, err := cl.FullDuplexCall(ctx)
	if err != nil {
		return fmt.Errorf("FullDuplexCall: %w", err)
	}
	for i := range streamMessages {
		if i > 0 {
			if err := pause(ctx, streamGap); err != nil {
				return err
			}
		}
		if err := s.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: payload}}); err != nil {
			return fmt.Errorf("FullDuplexCall send: %w", err)
		}
		res, err := s.Recv()
		if err != nil {
			return fmt.Errorf("FullDuplexCall receive: %w", err)
		}
		if err := checkBody(res.GetPayload().GetBody(), payload); err != nil {
			return err
		}
	}
	if err := s.CloseSend(); err != nil {
		return fmt.Errorf("FullDuplexCall close: %w", err)
	}
	if _, err := s.Recv(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("FullDuplexCall end: %w", err)
	}
	return nil
}

// websocket runs one session through queue up-h1: connect, echo
// streamMessages messages, close with the closing handshake.
func (c *clients) websocket(ctx context.Context, payload []byte) error {
	conn, _, err := websocket.Dial(ctx, "ws://"+c.a+"/ws", &websocket.DialOptions{HTTPClient: &http.Client{Transport: c.ws}})
	if err != nil {
		return fmt.Errorf("websocket dial: %w", err)
	}
	defer conn.CloseNow()
	for i := range streamMessages {
		if i > 0 {
			if err := pause(ctx, streamGap); err != nil {
				return err
			}
		}
		if err := conn.Write(ctx, websocket.MessageBinary, payload); err != nil {
			return fmt.Errorf("websocket write: %w", err)
		}
		_, got, err := conn.Read(ctx)
		if err != nil {
			return fmt.Errorf("websocket read: %w", err)
		}
		if err := checkBody(got, payload); err != nil {
			return err
		}
	}
	if err := conn.Close(websocket.StatusNormalClosure, ""); err != nil {
		return fmt.Errorf("websocket close: %w", err)
	}
	return nil
}
