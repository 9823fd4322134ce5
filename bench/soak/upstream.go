package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/coder/websocket"
	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// upstreamEnv, when set, makes the soak binary (or its test binary) the
// upstream instead: it serves on the address the variable holds until it is
// killed. The soak starts it so, as a child it can SIGKILL and start again.
const upstreamEnv = "SOAK_UPSTREAM_LISTEN"

// Sizes of the fixed responses.
const (
	size1k  = 1 << 10
	size64k = 64 << 10
	sizeBig = 1 << 20 // GET /big: large enough to fill socket buffers and flow-control windows
)

// serveUpstream is the upstream mode: one port that speaks HTTP/1.1 and h2c
// with prior knowledge (net/http's Protocols), answering
//
//	GET  /1k, /64k, /big  fixed bodies of 1 KiB, 64 KiB and 1 MiB
//	POST /echo            the request body back
//	GET  /ws              a websocket that echoes every message
//	gRPC                  grpc.testing.TestService: UnaryCall and FullDuplexCall echo their payloads
//
// It returns the process's exit status.
func serveUpstream(addr string) int {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "soak upstream: %v\n", err)
		return 1
	}
	gs := grpc.NewServer()
	testpb.RegisterTestServiceServer(gs, echoService{})
	srv := &http.Server{
		Handler:           newUpstreamHandler(gs),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
		Protocols:         new(http.Protocols),
	}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	// The soak ends the upstream with SIGKILL; SIGTERM (a stray one) ends
	// it too, at once.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintf(os.Stderr, "soak upstream: %v\n", err)
		return 1
	}
	return 0
}

// upstreamHandler serves the upstream's routes.
type upstreamHandler struct {
	grpc            http.Handler
	k1, k64, big    []byte
	n1k, n64k, nBig []string
}

func newUpstreamHandler(gs http.Handler) *upstreamHandler {
	return &upstreamHandler{
		grpc: gs,
		k1:   data[:size1k], k64: data[:size64k], big: data[:sizeBig],
		n1k: []string{strconv.Itoa(size1k)}, n64k: []string{strconv.Itoa(size64k)}, nBig: []string{strconv.Itoa(sizeBig)},
	}
}

// data is every fixed body and the clients' request bodies: each is a
// prefix of it.
var data = pattern(sizeBig)

// pattern is n bytes that a client can check: byte i is 'a'+i%26.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a' + byte(i%26)
	}
	return b
}

func (h *upstreamHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
		h.grpc.ServeHTTP(w, r)
		return
	}
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/1k":
		h.write(w, h.k1, h.n1k)
	case r.Method == http.MethodGet && r.URL.Path == "/64k":
		h.write(w, h.k64, h.n64k)
	case r.Method == http.MethodGet && r.URL.Path == "/big":
		h.write(w, h.big, h.nBig)
	case r.Method == http.MethodPost && r.URL.Path == "/echo":
		body, err := io.ReadAll(r.Body)
		if err != nil {
			// The client (queue) went away mid-body: nothing to answer.
			return
		}
		w.Header()["Content-Length"] = []string{strconv.Itoa(len(body))}
		_, _ = w.Write(body)
	case r.URL.Path == "/ws":
		echoWebsocket(w, r)
	default:
		http.NotFound(w, r)
	}
}

func (h *upstreamHandler) write(w http.ResponseWriter, b []byte, n []string) {
	w.Header()["Content-Length"] = n
	w.Header()["Content-Type"] = []string{"application/octet-stream"}
	_, _ = w.Write(b)
}

// echoWebsocket echoes messages until the client closes or goes away.
func echoWebsocket(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer c.CloseNow()
	ctx := r.Context()
	for {
		typ, msg, err := c.Read(ctx)
		if err != nil {
			return
		}
		if err := c.Write(ctx, typ, msg); err != nil {
			return
		}
	}
}

// echoService is the gRPC TestService of the upstream: the two calls the
// soak makes, echoing.
type echoService struct {
	testpb.UnimplementedTestServiceServer
}

func (echoService) UnaryCall(_ context.Context, in *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return &testpb.SimpleResponse{Payload: in.GetPayload()}, nil
}

func (echoService) FullDuplexCall(s grpc.BidiStreamingServer[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]) error {
	for {
		in, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := s.Send(&testpb.StreamingOutputCallResponse{Payload: in.GetPayload()}); err != nil {
			return err
		}
	}
}

// checkBody reports whether b is want, without printing megabytes.
func checkBody(got, want []byte) error {
	if !bytes.Equal(got, want) {
		return fmt.Errorf("body of %d bytes differs from the %d expected", len(got), len(want))
	}
	return nil
}
