package otlp

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	collectormetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	collectortracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	_ "google.golang.org/grpc/encoding/gzip" // the receiver decompresses what Config.Gzip sends
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

func slogJSON(w io.Writer) *slog.Logger { return slog.New(slog.NewJSONHandler(w, nil)) }

// grpcCollector is a real OTLP/gRPC receiver: grpc-go serving the
// collector's trace and metrics services. Each call is answered with the
// next of errs (nil: success; the last one for every later call).
type grpcCollector struct {
	collectortracepb.UnimplementedTraceServiceServer
	collectormetricspb.UnimplementedMetricsServiceServer

	errs    []error
	partial int64 // rejected items in every successful answer

	mu      sync.Mutex
	traces  []*collectortracepb.ExportTraceServiceRequest
	metrics []*collectormetricspb.ExportMetricsServiceRequest
	md      []metadata.MD
	left    []time.Duration // each call's time left to the deadline grpc-go read from grpc-timeout; -1: none
	calls   int
}

func (c *grpcCollector) answer(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	md, _ := metadata.FromIncomingContext(ctx)
	c.md = append(c.md, md)
	left := time.Duration(-1)
	if d, ok := ctx.Deadline(); ok {
		left = time.Until(d)
	}
	c.left = append(c.left, left)
	i := c.calls
	c.calls++
	if len(c.errs) == 0 {
		return nil
	}
	return c.errs[min(i, len(c.errs)-1)]
}

func (c *grpcCollector) Export(ctx context.Context, req *collectortracepb.ExportTraceServiceRequest) (*collectortracepb.ExportTraceServiceResponse, error) {
	if err := c.answer(ctx); err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.traces = append(c.traces, req)
	c.mu.Unlock()
	resp := &collectortracepb.ExportTraceServiceResponse{}
	if c.partial > 0 {
		resp.PartialSuccess = &collectortracepb.ExportTracePartialSuccess{RejectedSpans: c.partial, ErrorMessage: "dropped"}
	}
	return resp, nil
}

// metricsService adapts grpcCollector to the metrics service, whose Export
// method has the same name as the trace service's.
type metricsService struct{ *grpcCollector }

func (m metricsService) Export(ctx context.Context, req *collectormetricspb.ExportMetricsServiceRequest) (*collectormetricspb.ExportMetricsServiceResponse, error) {
	if err := m.answer(ctx); err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.metrics = append(m.metrics, req)
	m.mu.Unlock()
	return &collectormetricspb.ExportMetricsServiceResponse{}, nil
}

// startGRPC serves c on a loopback port, over TLS with cert when it is not
// nil, and returns the endpoint URL.
func startGRPC(t *testing.T, c *grpcCollector, cert *tls.Certificate) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var opts []grpc.ServerOption
	scheme := "http://"
	if cert != nil {
		opts = append(opts, grpc.Creds(credentials.NewServerTLSFromCert(cert)))
		scheme = "https://"
	}
	s := grpc.NewServer(opts...)
	collectortracepb.RegisterTraceServiceServer(s, c)
	collectormetricspb.RegisterMetricsServiceServer(s, metricsService{c})
	go s.Serve(ln)
	t.Cleanup(s.Stop)
	return scheme + ln.Addr().String()
}

// selfSigned returns a certificate for 127.0.0.1 and a pool that trusts it.
func selfSigned(t *testing.T) (*tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "collector"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

func testMetricsBody(t testing.TB) []byte {
	t.Helper()
	b, err := proto.Marshal(&collectormetricspb.ExportMetricsServiceRequest{ResourceMetrics: []*metricspb.ResourceMetrics{{
		ScopeMetrics: []*metricspb.ScopeMetrics{{Metrics: []*metricspb.Metric{{Name: "kn.serving.queue.depth",
			Data: &metricspb.Metric_Gauge{Gauge: &metricspb.Gauge{DataPoints: []*metricspb.NumberDataPoint{{
				Value: &metricspb.NumberDataPoint_AsInt{AsInt: 3}}}}}}}}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestGRPCExport: both signals reach grpc-go's collector services over
// HTTP/2 with prior knowledge and over TLS, compressed or not, with the
// configured headers as metadata and the deadline as grpc-timeout.
func TestGRPCExport(t *testing.T) {
	t.Parallel()
	cert, pool := selfSigned(t)
	for _, tt := range []struct {
		name   string
		signal Signal
		tls    bool
		gzip   bool
	}{
		{"traces h2c", Traces, false, false},
		{"metrics h2c", Metrics, false, false},
		{"traces gzip", Traces, false, true},
		{"metrics tls", Metrics, true, false},
		{"traces tls gzip", Traces, true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := &grpcCollector{}
			var serverCert *tls.Certificate
			var clientTLS *tls.Config
			if tt.tls {
				serverCert, clientTLS = cert, &tls.Config{RootCAs: pool}
			}
			url := startGRPC(t, c, serverCert)
			e, err := New(Config{Signal: tt.signal, Protocol: GRPC, URL: url + "/ignored/path", Gzip: tt.gzip, TLS: clientTLS,
				Headers: map[string]string{"Authorization": "Bearer x"}})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Shutdown(context.Background())
			body := testBody(t, "GET")
			if tt.signal == Metrics {
				body = testMetricsBody(t)
			}
			if err := e.Export(t.Context(), body); err != nil {
				t.Fatalf("Export: %v", err)
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			var got proto.Message
			if tt.signal == Metrics {
				if len(c.metrics) != 1 || len(c.traces) != 0 {
					t.Fatalf("metrics %d, traces %d calls; want 1 metrics call", len(c.metrics), len(c.traces))
				}
				got = c.metrics[0]
			} else {
				if len(c.traces) != 1 || len(c.metrics) != 0 {
					t.Fatalf("traces %d, metrics %d calls; want 1 traces call", len(c.traces), len(c.metrics))
				}
				got = c.traces[0]
			}
			again, _ := proto.MarshalOptions{Deterministic: true}.Marshal(got)
			if !bytes.Equal(again, body) {
				t.Errorf("the collector decoded another message")
			}
			// grpc-go makes the call's deadline from grpc-timeout: the
			// exporter's timeout, less the time the call took to arrive.
			if left := c.left[0]; left <= 0 || left > e.timeout {
				t.Errorf("the collector's call had %v left to its deadline, want a deadline within the export timeout %v", left, e.timeout)
			}
			md := c.md[0]
			if got := md.Get("authorization"); len(got) != 1 || got[0] != "Bearer x" {
				t.Errorf("authorization metadata %q", got)
			}
			if got := md.Get("user-agent"); len(got) == 0 || !strings.HasPrefix(got[0], "queue-otlp-exporter") {
				t.Errorf("user-agent metadata %q", got)
			}
		})
	}
}

// retryInfoStatus is a gRPC status with a RetryInfo detail of delay.
func retryInfoStatus(t *testing.T, code codes.Code, delay time.Duration) error {
	t.Helper()
	st, err := status.New(code, "busy").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(delay)})
	if err != nil {
		t.Fatal(err)
	}
	return st.Err()
}

// TestGRPCStatus: the status from the trailers (or the headers of a
// trailers-only answer) decides: the retryable codes are sent again,
// RESOURCE_EXHAUSTED only with a RetryInfo and after its delay, the rest
// fail at once with their decoded message; a partial success is an error.
func TestGRPCStatus(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		errs     []error
		partial  int64
		calls    int
		wantErr  string
		minDelay time.Duration
	}{
		{name: "ok", calls: 1},
		{name: "unavailable then ok", errs: []error{status.Error(codes.Unavailable, "restarting"), nil}, calls: 2},
		{name: "aborted then ok", errs: []error{status.Error(codes.Aborted, "x"), nil}, calls: 2},
		{name: "invalid argument", errs: []error{status.Error(codes.InvalidArgument, "bad span\nname é%")}, calls: 1,
			wantErr: "gRPC status 3: bad span name é%"},
		{name: "unauthenticated", errs: []error{status.Error(codes.Unauthenticated, "who")}, calls: 1,
			wantErr: "gRPC status 16: who"},
		{name: "resource exhausted without RetryInfo", errs: []error{status.Error(codes.ResourceExhausted, "full")}, calls: 1,
			wantErr: "gRPC status 8: full"},
		{name: "resource exhausted with RetryInfo", errs: []error{retryInfoStatus(t, codes.ResourceExhausted, 300*time.Millisecond), nil},
			calls: 2, minDelay: 300 * time.Millisecond},
		{name: "partial success", partial: 3, calls: 1, wantErr: "collector rejected 3 items: dropped"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := &grpcCollector{errs: tt.errs, partial: tt.partial}
			e, err := New(Config{Protocol: GRPC, URL: startGRPC(t, c, nil)})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Shutdown(context.Background())
			start := time.Now()
			err = e.Export(t.Context(), testBody(t, "GET"))
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Export = %v, want success", err)
			case tt.wantErr != "" && (err == nil || !strings.HasSuffix(err.Error(), tt.wantErr)):
				t.Errorf("Export = %v, want an error ending %q", err, tt.wantErr)
			}
			if got := time.Since(start); got < tt.minDelay {
				t.Errorf("Export took %v, want the RetryInfo's %v at least", got, tt.minDelay)
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.calls != tt.calls {
				t.Errorf("%d calls, want %d", c.calls, tt.calls)
			}
		})
	}
}

// TestGRPCNotGRPC: an answer that is not gRPC's (a proxy's 503, a plain
// HTTP/2 server's 200) maps as gRPC's clients map it: 503 is UNAVAILABLE
// and retried, a 200 without a grpc-status fails.
func TestGRPCNotGRPC(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		status  int
		calls   int
		wantErr string
	}{
		{"503", 503, 3, "gRPC status 14: HTTP status 503 Service Unavailable"},
		{"404", 404, 1, "gRPC status 12: HTTP status 404 Not Found"},
		{"200 without status", 200, 1, "gRPC status 13: the answer has no grpc-status"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			calls := 0
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			var p http.Protocols
			p.SetUnencryptedHTTP2(true)
			srv := &http.Server{Protocols: &p, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				calls++
				mu.Unlock()
				if r.ProtoMajor != 2 || r.Header.Get("Content-Type") != "application/grpc" {
					t.Errorf("request %s with Content-Type %q, want HTTP/2 and application/grpc", r.Proto, r.Header.Get("Content-Type"))
				}
				w.Header().Set("Retry-After", "0")
				w.WriteHeader(tt.status)
			})}
			go srv.Serve(ln)
			t.Cleanup(func() { srv.Close() })
			e, err := New(Config{Protocol: GRPC, URL: "http://" + ln.Addr().String()})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Shutdown(context.Background())
			err = e.Export(t.Context(), testBody(t, "GET"))
			var gerr *grpcError
			if err == nil || !errors.As(err, &gerr) || !strings.HasSuffix(err.Error(), tt.wantErr) {
				t.Errorf("Export = %v, want a gRPC error ending %q", err, tt.wantErr)
			}
			mu.Lock()
			defer mu.Unlock()
			if calls != tt.calls {
				t.Errorf("%d calls, want %d", calls, tt.calls)
			}
		})
	}
}

// parseGRPCTimeout parses a grpc-timeout value as the gRPC over HTTP/2
// protocol defines it: TimeoutValue, a positive integer of at most 8
// digits, then TimeoutUnit, one of H M S m u n. It returns the duration
// and the unit's.
func parseGRPCTimeout(s string) (d, unit time.Duration, err error) {
	units := map[byte]time.Duration{'H': time.Hour, 'M': time.Minute, 'S': time.Second,
		'm': time.Millisecond, 'u': time.Microsecond, 'n': time.Nanosecond}
	if len(s) < 2 || len(s) > 9 {
		return 0, 0, fmt.Errorf("%q: want 1 to 8 digits and a unit", s)
	}
	unit, ok := units[s[len(s)-1]]
	if !ok {
		return 0, 0, fmt.Errorf("%q: unit %q, want one of H M S m u n", s, s[len(s)-1])
	}
	var n int64
	for _, c := range []byte(s[:len(s)-1]) {
		if c < '0' || c > '9' {
			return 0, 0, fmt.Errorf("%q: want digits before the unit", s)
		}
		n = n*10 + int64(c-'0')
	}
	if n == 0 {
		return 0, 0, fmt.Errorf("%q: want a positive value", s)
	}
	return time.Duration(n) * unit, unit, nil
}

// TestGRPCTimeout: grpcTimeout writes a grpc-timeout value the protocol
// accepts (a positive value of at most 8 digits, and a unit) that a
// receiver reads as the time left, to within the unit it chose; a deadline
// already passed, or under the smallest unit, is still a positive value
// (the protocol has no zero), within a unit of none. Which unit is the
// writer's choice: the value is parsed, not compared with a string.
func TestGRPCTimeout(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{
		10 * time.Second,
		0,
		-time.Second,
		500 * time.Microsecond,
		1500 * time.Microsecond,
		99999999 * time.Millisecond, // 8 digits of milliseconds
		100000000 * time.Millisecond,
		100000 * time.Second,
		365 * 24 * time.Hour,
	} {
		got := grpcTimeout(d)
		parsed, unit, err := parseGRPCTimeout(got)
		if err != nil {
			t.Errorf("grpcTimeout(%v) = %v", d, err)
			continue
		}
		if want := max(d, 0); parsed < want-unit || parsed > want+unit {
			t.Errorf("grpcTimeout(%v) = %q, read as %v: want %v to within its unit (%v)", d, got, parsed, want, unit)
		}
	}
}
