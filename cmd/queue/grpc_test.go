package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// grpcTimeout bounds every call: a proxy that buffers a stream shows up as
// a deadline, not as a hung test.
const grpcTimeout = 20 * time.Second

// grpcTestServer is the gRPC upstream. It reports what it saw of the
// request in the response, so the client side can check it.
type grpcTestServer struct {
	testpb.UnimplementedTestServiceServer
}

// trailerBin is the value of the binary trailer the server sets on a
// failure.
const trailerBin = "\x00\x01\x02\xfe\xff"

// failWith returns the status the request asks for, after setting trailer
// metadata, or nil when it asks for none.
func failWith(es *testpb.EchoStatus, setTrailer func(metadata.MD) error) error {
	if es.GetCode() == 0 {
		return nil
	}
	setTrailer(metadata.Pairs("x-trailer", "t-value", "x-trailer-bin", trailerBin))
	return status.Error(codes.Code(es.GetCode()), es.GetMessage())
}

// UnaryCall echoes the payload; Username is the request's x-test-meta and
// OauthScope its x-forwarded-for values joined with "|".
func (grpcTestServer) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	grpc.SetHeader(ctx, metadata.Pairs("x-server-header", "from-server"))
	if err := failWith(req.GetResponseStatus(), func(md metadata.MD) error { return grpc.SetTrailer(ctx, md) }); err != nil {
		return nil, err
	}
	return &testpb.SimpleResponse{
		Payload:    &testpb.Payload{Body: req.GetPayload().GetBody()},
		Username:   strings.Join(md.Get("x-test-meta"), "|"),
		OauthScope: strings.Join(md.Get("x-forwarded-for"), "|"),
	}, nil
}

// StreamingOutputCall sends one message per ResponseParameters: message i
// is Size bytes of value i. It sets trailer x-count to the number sent.
func (grpcTestServer) StreamingOutputCall(req *testpb.StreamingOutputCallRequest, s grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	for i, p := range req.GetResponseParameters() {
		body := bytes.Repeat([]byte{byte(i)}, int(p.GetSize()))
		if err := s.Send(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: body}}); err != nil {
			return err
		}
	}
	if err := failWith(req.GetResponseStatus(), func(md metadata.MD) error { s.SetTrailer(md); return nil }); err != nil {
		return err
	}
	s.SetTrailer(metadata.Pairs("x-count", strconv.Itoa(len(req.GetResponseParameters()))))
	return nil
}

// StreamingInputCall answers the total payload size once the client is done.
func (grpcTestServer) StreamingInputCall(s grpc.ClientStreamingServer[testpb.StreamingInputCallRequest, testpb.StreamingInputCallResponse]) error {
	var n int
	for {
		req, err := s.Recv()
		if err == io.EOF {
			return s.SendAndClose(&testpb.StreamingInputCallResponse{AggregatedPayloadSize: int32(n)})
		}
		if err != nil {
			return err
		}
		n += len(req.GetPayload().GetBody())
	}
}

// FullDuplexCall answers each message with its payload as soon as it
// arrives, before reading the next.
func (grpcTestServer) FullDuplexCall(s grpc.BidiStreamingServer[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]) error {
	for {
		req, err := s.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := s.Send(&testpb.StreamingOutputCallResponse{Payload: req.GetPayload()}); err != nil {
			return err
		}
	}
}

// startGRPCQueue starts the gRPC upstream, queue in front of it speaking
// h2c to it with extra flags, and returns a client connected to queue's
// serving port.
func startGRPCQueue(t *testing.T, flags ...string) testpb.TestServiceClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	testpb.RegisterTestServiceServer(s, grpcTestServer{})
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	t.Cleanup(func() {
		s.Stop()
		if err := <-served; err != nil {
			t.Errorf("grpc Serve: %v", err)
		}
	})
	q := startQueue(t, ln.Addr().String(), append([]string{"--upstream-protocol", "h2c"}, flags...)...)
	cc, err := grpc.NewClient("passthrough:///"+q.addr.Listen, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc.NewClient: %v", err)
	}
	t.Cleanup(func() { cc.Close() })
	return testpb.NewTestServiceClient(cc)
}

func grpcContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), grpcTimeout)
	t.Cleanup(cancel)
	return ctx
}

// TestGRPCUnary: unary calls of several sizes reach the gRPC upstream
// through queue with their payload and metadata intact, X-Forwarded-For
// extended with the peer, and the response headers come back.
func TestGRPCUnary(t *testing.T) {
	t.Parallel()
	c := startGRPCQueue(t)
	tests := []struct {
		name    string
		size    int
		md      metadata.MD
		wantXFF string
	}{
		{name: "empty", size: 0, md: metadata.Pairs("x-test-meta", "one"), wantXFF: "127.0.0.1"},
		{name: "small", size: 10, md: metadata.Pairs("x-test-meta", "two"), wantXFF: "127.0.0.1"},
		{name: "1 MiB", size: 1 << 20, md: metadata.Pairs("x-test-meta", "three"), wantXFF: "127.0.0.1"},
		{name: "repeated metadata", size: 3, md: metadata.Pairs("x-test-meta", "a", "x-test-meta", "b"), wantXFF: "127.0.0.1"},
		// Loopback is a trusted proxy by default (docs/contract.md section 1.1): its
		// X-Forwarded-For is kept and queue appends the peer.
		{
			name: "x-forwarded-for from a trusted peer", size: 3,
			md:      metadata.Pairs("x-test-meta", "four", "x-forwarded-for", "203.0.113.7"),
			wantXFF: "203.0.113.7, 127.0.0.1",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := metadata.NewOutgoingContext(grpcContext(t), tt.md)
			body := bytes.Repeat([]byte("q"), tt.size)
			var hdr metadata.MD
			res, err := c.UnaryCall(ctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: body}}, grpc.Header(&hdr))
			if err != nil {
				t.Fatalf("UnaryCall: %v", err)
			}
			if got, want := len(res.GetPayload().GetBody()), tt.size; got != want {
				t.Errorf("response payload length = %d, want %d", got, want)
			}
			if !bytes.Equal(res.GetPayload().GetBody(), body) {
				t.Errorf("response payload differs from the request's")
			}
			if got, want := res.GetUsername(), strings.Join(tt.md.Get("x-test-meta"), "|"); got != want {
				t.Errorf("server saw x-test-meta %q, want %q", got, want)
			}
			if got, want := res.GetOauthScope(), tt.wantXFF; got != want {
				t.Errorf("server saw x-forwarded-for %q, want %q", got, want)
			}
			if got, want := strings.Join(hdr.Get("x-server-header"), "|"), "from-server"; got != want {
				t.Errorf("response header x-server-header = %q, want %q", got, want)
			}
		})
	}
}

// TestGRPCUntrustedForwardedFor checks that a client outside
// --trusted-proxies cannot forge the address the upstream sees.
func TestGRPCUntrustedForwardedFor(t *testing.T) {
	t.Parallel()
	c := startGRPCQueue(t, "--trusted-proxies", "192.0.2.0/24")
	ctx := metadata.NewOutgoingContext(grpcContext(t), metadata.Pairs("x-forwarded-for", "203.0.113.7"))
	res, err := c.UnaryCall(ctx, &testpb.SimpleRequest{})
	if err != nil {
		t.Fatalf("UnaryCall: %v", err)
	}
	if got, want := res.GetOauthScope(), "127.0.0.1"; got != want {
		t.Errorf("server saw x-forwarded-for %q, want %q", got, want)
	}
}

// TestGRPCServerStreaming: every message of a server stream, in order and
// intact (sizes across flow-control windows), then io.EOF and the trailers.
func TestGRPCServerStreaming(t *testing.T) {
	t.Parallel()
	c := startGRPCQueue(t)
	sizes := []int32{1, 0, 100, 16 << 10, 64<<10 + 1, 3, 200 << 10, 7}
	req := &testpb.StreamingOutputCallRequest{}
	for _, n := range sizes {
		req.ResponseParameters = append(req.ResponseParameters, &testpb.ResponseParameters{Size: n})
	}
	stream, err := c.StreamingOutputCall(grpcContext(t), req)
	if err != nil {
		t.Fatalf("StreamingOutputCall: %v", err)
	}
	for i, n := range sizes {
		res, err := stream.Recv()
		if err != nil {
			t.Fatalf("Recv message %d: %v", i, err)
		}
		if want := bytes.Repeat([]byte{byte(i)}, int(n)); !bytes.Equal(res.GetPayload().GetBody(), want) {
			t.Errorf("message %d: got %d bytes (first %v), want %d bytes of %d",
				i, len(res.GetPayload().GetBody()), first(res.GetPayload().GetBody()), n, i)
		}
	}
	if _, err := stream.Recv(); err != io.EOF {
		t.Errorf("Recv after %d messages: %v, want io.EOF", len(sizes), err)
	}
	if got, want := strings.Join(stream.Trailer().Get("x-count"), "|"), strconv.Itoa(len(sizes)); got != want {
		t.Errorf("trailer x-count = %q, want %q", got, want)
	}
}

func first(b []byte) any {
	if len(b) == 0 {
		return "none"
	}
	return b[0]
}

// TestGRPCClientStreaming: every message of a client stream reaches the
// upstream, which answers the total size once the client is done.
func TestGRPCClientStreaming(t *testing.T) {
	t.Parallel()
	c := startGRPCQueue(t)
	sizes := []int{1, 10, 0, 1000, 100 << 10, 64 << 10, 5}
	stream, err := c.StreamingInputCall(grpcContext(t))
	if err != nil {
		t.Fatalf("StreamingInputCall: %v", err)
	}
	total := 0
	for i, n := range sizes {
		total += n
		if err := stream.Send(&testpb.StreamingInputCallRequest{Payload: &testpb.Payload{Body: make([]byte, n)}}); err != nil {
			t.Fatalf("Send message %d: %v", i, err)
		}
	}
	res, err := stream.CloseAndRecv()
	if err != nil {
		t.Fatalf("CloseAndRecv: %v", err)
	}
	if got, want := int(res.GetAggregatedPayloadSize()), total; got != want {
		t.Errorf("aggregated payload size = %d, want %d", got, want)
	}
}

// TestGRPCBidiPingPong sends a message and waits for its answer before
// sending the next: it completes only if queue forwards each message in
// both directions as it comes, without waiting for the end of either stream.
func TestGRPCBidiPingPong(t *testing.T) {
	t.Parallel()
	c := startGRPCQueue(t)
	stream, err := c.FullDuplexCall(grpcContext(t))
	if err != nil {
		t.Fatalf("FullDuplexCall: %v", err)
	}
	for i := range 20 {
		ping := fmt.Appendf(nil, "ping %d %s", i, strings.Repeat("x", i*i*50))
		if err := stream.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: ping}}); err != nil {
			t.Fatalf("Send ping %d: %v", i, err)
		}
		res, err := stream.Recv()
		if err != nil {
			t.Fatalf("Recv pong %d: %v", i, err)
		}
		if got := res.GetPayload().GetBody(); !bytes.Equal(got, ping) {
			t.Fatalf("pong %d = %.40q (%d bytes), want %.40q (%d bytes)", i, got, len(got), ping, len(ping))
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatalf("CloseSend: %v", err)
	}
	if _, err := stream.Recv(); err != io.EOF {
		t.Errorf("Recv after CloseSend: %v, want io.EOF", err)
	}
}

// TestGRPCErrorStatus checks that a non-OK status, its message and the
// trailer metadata reach the client, when the upstream fails a unary call
// before sending anything (grpc-go answers it trailers-only) and after
// messages of a server stream (real HTTP/2 trailers).
func TestGRPCErrorStatus(t *testing.T) {
	t.Parallel()
	c := startGRPCQueue(t)
	es := &testpb.EchoStatus{Code: int32(codes.FailedPrecondition), Message: "not ready: caché ünïcode % 100"}
	tests := []struct {
		name string
		call func(t *testing.T, ctx context.Context) (metadata.MD, error)
	}{
		{
			name: "unary trailers-only",
			call: func(t *testing.T, ctx context.Context) (metadata.MD, error) {
				var tr metadata.MD
				_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{ResponseStatus: es}, grpc.Trailer(&tr))
				return tr, err
			},
		},
		{
			name: "server stream after messages",
			call: func(t *testing.T, ctx context.Context) (metadata.MD, error) {
				stream, err := c.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{
					ResponseParameters: []*testpb.ResponseParameters{{Size: 10}, {Size: 20}},
					ResponseStatus:     es,
				})
				if err != nil {
					t.Fatalf("StreamingOutputCall: %v", err)
				}
				n := 0
				for {
					if _, err = stream.Recv(); err != nil {
						break
					}
					n++
				}
				if got, want := n, 2; got != want {
					t.Errorf("got %d messages before the status, want %d", got, want)
				}
				return stream.Trailer(), err
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr, err := tt.call(t, grpcContext(t))
			if err == nil {
				t.Fatal("call succeeded, want an error status")
			}
			if errors.Is(err, io.EOF) {
				t.Fatalf("stream ended with io.EOF, want an error status")
			}
			st, ok := status.FromError(err)
			if !ok {
				t.Fatalf("error %v carries no status", err)
			}
			if got, want := st.Code(), codes.FailedPrecondition; got != want {
				t.Errorf("code = %v, want %v", got, want)
			}
			if got, want := st.Message(), es.GetMessage(); got != want {
				t.Errorf("message = %q, want %q", got, want)
			}
			if got, want := strings.Join(tr.Get("x-trailer"), "|"), "t-value"; got != want {
				t.Errorf("trailer x-trailer = %q, want %q", got, want)
			}
			if got, want := strings.Join(tr.Get("x-trailer-bin"), "|"), trailerBin; got != want {
				t.Errorf("trailer x-trailer-bin = %q, want %q", got, want)
			}
		})
	}
}
