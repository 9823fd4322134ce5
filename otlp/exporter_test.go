package otlp

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	collectortracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/queue-dev/queue/internal/testnet"
)

// testNow is a whole second, as HTTP dates are.
var testNow = time.Unix(1700000000, 0)

// testBody is an encoded ExportTraceServiceRequest of one span named name.
func testBody(t testing.TB, name string) []byte {
	t.Helper()
	b, err := proto.Marshal(&collectortracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{
		ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{{Name: name, TraceId: make([]byte, 16), SpanId: make([]byte, 8)}}}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// spanName decodes an ExportTraceServiceRequest and returns its first span's
// name. It calls no method of a testing.T, so that a collector's handler
// may use it.
func spanName(b []byte) (string, error) {
	var req collectortracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		return "", fmt.Errorf("proto.Unmarshal: %w", err)
	}
	rs := req.GetResourceSpans()
	if len(rs) == 0 || len(rs[0].GetScopeSpans()) == 0 || len(rs[0].GetScopeSpans()[0].GetSpans()) == 0 {
		return "", errors.New("no span in the request")
	}
	return rs[0].GetScopeSpans()[0].GetSpans()[0].GetName(), nil
}

// roundTripper is a stub collector: it answers request i with answers[i]
// (the last one for any later request) and records each request.
type roundTripper struct {
	answers []answer

	mu       sync.Mutex
	requests []recorded
}

type answer struct {
	status int
	header http.Header
	body   []byte
	err    error // a transport error instead of a response
}

type recorded struct {
	at     time.Time
	header http.Header
	body   []byte // as sent, before any gzip decoding
}

func (rt *roundTripper) RoundTrip(r *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(r.Body)
	r.Body.Close()
	if err != nil {
		return nil, err
	}
	rt.mu.Lock()
	i := len(rt.requests)
	rt.requests = append(rt.requests, recorded{at: time.Now(), header: r.Header.Clone(), body: body})
	rt.mu.Unlock()
	a := rt.answers[min(i, len(rt.answers)-1)]
	if a.err != nil {
		return nil, a.err
	}
	h := a.header
	if h == nil {
		h = http.Header{}
	}
	return &http.Response{
		StatusCode: a.status,
		Status:     http.StatusText(a.status),
		Header:     h,
		Body:       io.NopCloser(bytes.NewReader(a.body)),
		Request:    r,
	}, nil
}

func (rt *roundTripper) got() []recorded {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.requests
}

// testExporter returns an exporter for cfg that sends to rt; the caller
// shuts it down.
func testExporter(t testing.TB, cfg Config, rt http.RoundTripper) *Exporter {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = "http://collector.test:4318/v1/traces"
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	e.client.Transport = rt
	return e
}

// rpcStatusBody encodes a google.rpc.Status with message msg, the body of
// an OTLP/HTTP error response.
func rpcStatusBody(msg string) []byte {
	b := protowire.AppendTag(nil, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, 3)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	return protowire.AppendString(b, msg)
}

// TestExportRetry, on testing/synctest's clock: what the OTLP/HTTP
// specification has retried (429, 502, 503, 504, a transport error) is
// sent again with the same body, at most three times in all, no sooner
// than the backoff or the Retry-After asked (in seconds or as an HTTP
// date), never past the export timeout; the last failure is the error.
func TestExportRetry(t *testing.T) {
	t.Parallel()
	pb := http.Header{"Content-Type": {"application/x-protobuf"}}
	tests := []struct {
		name     string
		answers  []answer
		timeout  time.Duration
		wantErr  string // "" means success
		attempts int
		waits    []time.Duration // minimum wait before each retry
	}{
		{
			name:     "503 then success",
			answers:  []answer{{status: 503}, {status: 200}},
			attempts: 2, waits: []time.Duration{backoffBase / 2},
		},
		{
			name:     "429 with Retry-After",
			answers:  []answer{{status: 429, header: http.Header{"Retry-After": {"3"}}}, {status: 200}},
			attempts: 2, waits: []time.Duration{3 * time.Second},
		},
		{
			name: "Retry-After as an HTTP date",
			answers: []answer{
				{status: 503, header: http.Header{"Retry-After": {testNow.Add(4 * time.Second).UTC().Format(http.TimeFormat)}}},
				{status: 200},
			},
			attempts: 2, waits: []time.Duration{4 * time.Second},
		},
		{
			name:     "502 and 504 then success",
			answers:  []answer{{status: 502}, {status: 504}, {status: 204}},
			attempts: 3, waits: []time.Duration{backoffBase / 2, backoffBase},
		},
		{
			name:     "connection failure then success",
			answers:  []answer{{err: errors.New("connection refused")}, {status: 200}},
			attempts: 2, waits: []time.Duration{backoffBase / 2},
		},
		{
			name:     "gives up after three attempts",
			answers:  []answer{{status: 503, header: pb, body: rpcStatusBody("overloaded")}},
			attempts: 3, waits: []time.Duration{backoffBase / 2, backoffBase},
			wantErr: "503 Service Unavailable: overloaded",
		},
		{
			name:     "Retry-After past the timeout",
			answers:  []answer{{status: 429, header: http.Header{"Retry-After": {"60"}}}, {status: 200}},
			timeout:  5 * time.Second,
			attempts: 1,
			wantErr:  "429",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				// The bubble's clock starts at 2000-01-01; move it to
				// testNow so that HTTP dates are in the future.
				time.Sleep(time.Until(testNow))
				rt := &roundTripper{answers: tt.answers}
				e := testExporter(t, Config{Timeout: tt.timeout}, rt)
				defer e.Shutdown(context.Background())
				err := e.Export(t.Context(), testBody(t, "GET"))
				switch {
				case tt.wantErr == "" && err != nil:
					t.Errorf("Export = %v, want success", err)
				case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
					t.Errorf("Export = %v, want an error with %q", err, tt.wantErr)
				}
				reqs := rt.got()
				if got, want := len(reqs), tt.attempts; got != want {
					t.Fatalf("%d requests, want %d", got, want)
				}
				for i := 1; i < len(reqs); i++ {
					if got, want := reqs[i].at.Sub(reqs[i-1].at), tt.waits[i-1]; got < want {
						t.Errorf("retry %d after %v, want at least %v", i, got, want)
					}
					if !bytes.Equal(reqs[i].body, reqs[0].body) {
						t.Errorf("retry %d sent another body", i)
					}
				}
				if len(reqs) > 0 {
					if got, max := reqs[len(reqs)-1].at.Sub(reqs[0].at), e.timeout; got > max {
						t.Errorf("retries took %v, past the export timeout %v", got, max)
					}
				}
			})
		})
	}
}

// TestExportStatusError: a status that is not retried fails the export at
// once, as a *statusError that says the status and the message of the
// body where the body is a google.rpc.Status or text (not HTML).
func TestExportStatusError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		answer  answer
		wantErr string
	}{
		{name: "400 protobuf status", answer: answer{status: 400,
			header: http.Header{"Content-Type": {"application/x-protobuf"}}, body: rpcStatusBody("bad span")},
			wantErr: "collector answered 400 Bad Request: bad span"},
		{name: "401 text", answer: answer{status: 401,
			header: http.Header{"Content-Type": {"text/plain; charset=utf-8"}}, body: []byte("no token\n")},
			wantErr: "collector answered 401 Unauthorized: no token"},
		{name: "404 html ignored", answer: answer{status: 404,
			header: http.Header{"Content-Type": {"text/html"}}, body: []byte("<h1>nope</h1>")},
			wantErr: "collector answered 404 Not Found"},
		{name: "500 not retried", answer: answer{status: 500}, wantErr: "collector answered 500 Internal Server Error"},
		{name: "redirect not followed without Location", answer: answer{status: 302}, wantErr: "collector answered 302 Found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rt := &roundTripper{answers: []answer{tt.answer, {status: 200}}}
			e := testExporter(t, Config{}, rt)
			defer e.Shutdown(context.Background())
			err := e.Export(t.Context(), testBody(t, "GET"))
			if err == nil || !strings.HasSuffix(err.Error(), tt.wantErr) {
				t.Errorf("Export = %v, want an error ending %q", err, tt.wantErr)
			}
			var serr *statusError
			if !errors.As(err, &serr) || serr.code != tt.answer.status {
				t.Errorf("Export = %#v, want a *statusError with code %d", err, tt.answer.status)
			}
			if got := len(rt.got()); got != 1 {
				t.Errorf("%d requests, want 1: %d is not retryable", got, tt.answer.status)
			}
		})
	}
}

// TestExportPartialSuccess: a 200 whose ExportTraceServiceResponse rejects
// spans is an error that is not retried; a warning alone is success.
func TestExportPartialSuccess(t *testing.T) {
	t.Parallel()
	pb := http.Header{"Content-Type": {"application/x-protobuf"}}
	partial := func(rejected int64, msg string) []byte {
		b, _ := proto.Marshal(&collectortracepb.ExportTraceServiceResponse{
			PartialSuccess: &collectortracepb.ExportTracePartialSuccess{RejectedSpans: rejected, ErrorMessage: msg}})
		return b
	}
	for _, tt := range []struct {
		name    string
		body    []byte
		wantErr string
	}{
		{"rejected", partial(2, "too old"), "collector rejected 2 items: too old"},
		{"warning only", partial(0, "slow down"), ""},
		{"empty", nil, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rt := &roundTripper{answers: []answer{{status: 200, header: pb, body: tt.body}}}
			e := testExporter(t, Config{}, rt)
			defer e.Shutdown(context.Background())
			err := e.Export(t.Context(), testBody(t, "GET"))
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.HasSuffix(err.Error(), tt.wantErr)) {
				t.Errorf("Export = %v, want %q", err, tt.wantErr)
			}
			if got := len(rt.got()); got != 1 {
				t.Errorf("%d requests, want 1", got)
			}
		})
	}
}

// TestExportRequestHeaders: an export is a protobuf body (gzipped when
// configured, with Content-Encoding saying so), with the configured
// headers, but for a Content-Type of its own, which the exporter's wins.
func TestExportRequestHeaders(t *testing.T) {
	t.Parallel()
	for _, gz := range []bool{false, true} {
		name := "identity"
		if gz {
			name = "gzip"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rt := &roundTripper{answers: []answer{{status: 200, body: []byte("ignored")}}}
			e := testExporter(t, Config{
				Gzip:    gz,
				Headers: map[string]string{"authorization": "Bearer x", "Content-Type": "text/plain"},
			}, rt)
			defer e.Shutdown(context.Background())
			sent := testBody(t, "GET")
			if err := e.Export(t.Context(), sent); err != nil {
				t.Fatalf("Export: %v", err)
			}
			reqs := rt.got()
			if len(reqs) != 1 {
				t.Fatalf("%d requests, want 1", len(reqs))
			}
			h := reqs[0].header
			wantEncoding := ""
			if gz {
				wantEncoding = "gzip"
			}
			for k, want := range map[string]string{
				"Content-Type":     "application/x-protobuf", // ours wins over the configured one
				"Content-Encoding": wantEncoding,
				"Authorization":    "Bearer x",
			} {
				if got := h.Get(k); got != want {
					t.Errorf("header %s = %q, want %q", k, got, want)
				}
			}
			body := reqs[0].body
			if gz {
				zr, err := gzip.NewReader(bytes.NewReader(body))
				if err != nil {
					t.Fatalf("gzip: %v", err)
				}
				if body, err = io.ReadAll(zr); err != nil {
					t.Fatalf("gunzip: %v", err)
				}
			}
			if !bytes.Equal(body, sent) {
				t.Errorf("body differs from the request given")
			}
		})
	}
}

// TestExporterClient: the exporter has an HTTP client and transport of its
// own, with no proxy, not even one from the environment.
func TestExporterClient(t *testing.T) {
	t.Parallel()
	e, err := New(Config{URL: "http://127.0.0.1:1/v1/traces", Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	if e.client == http.DefaultClient {
		t.Error("exporter uses http.DefaultClient")
	}
	tr, ok := e.client.Transport.(*http.Transport)
	if !ok || tr == http.DefaultTransport {
		t.Fatalf("transport = %T, want an *http.Transport of its own", e.client.Transport)
	}
	if tr.Proxy != nil {
		t.Error("transport has a Proxy; want none, not even from the environment")
	}
}

// TestNewErrors: New refuses a configuration without a URL, with a URL
// that is not http or https, or with a protocol it does not speak.
func TestNewErrors(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{
		{URL: ""},
		{URL: "collector:4317"},
		{URL: "ftp://collector/"},
		{URL: "http://c:4318", Protocol: "http/json"},
	} {
		if e, err := New(cfg); err == nil {
			e.Shutdown(context.Background())
			t.Errorf("New(%+v) succeeded, want an error", cfg)
		}
	}
}

// TestExportTimeout, on testing/synctest's clock: an export to a collector
// that does not answer ends at the export timeout, exactly, with the
// deadline's error.
func TestExportTimeout(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		block := http.RoundTripper(roundTripFunc(func(r *http.Request) (*http.Response, error) {
			<-r.Context().Done()
			return nil, r.Context().Err()
		}))
		e := testExporter(t, Config{Timeout: 2 * time.Second}, block)
		defer e.Shutdown(context.Background())
		start := time.Now()
		err := e.Export(context.Background(), testBody(t, "GET"))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Export = %v, want the deadline", err)
		}
		if got, want := time.Since(start), 2*time.Second; got != want {
			t.Errorf("export took %v, want the timeout %v", got, want)
		}
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestQueue: Enqueue never blocks; while the collector hangs, the queue
// keeps the newest requests within its bound and counts those it drops;
// once the collector answers, what is queued goes out in order, and
// Shutdown sends the rest.
func TestQueue(t *testing.T) {
	t.Parallel()
	release, releaseAll := testnet.Releaser(t)
	var mu sync.Mutex
	var names []string
	arrived := make(chan struct{}, 16)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		name, err := spanName(b)
		if err != nil {
			t.Errorf("the collector got a request it cannot read: %v", err) // not Fatal: the handler's goroutine
		}
		mu.Lock()
		names = append(names, name)
		mu.Unlock()
		arrived <- struct{}{}
		<-release
	}))
	t.Cleanup(collector.Close)
	t.Cleanup(releaseAll) // first: Close waits for the handler
	first := testBody(t, "first")
	size := len(testBody(t, "q0"))
	e, err := New(Config{URL: collector.URL + "/v1/traces", QueueBytes: 3 * size})
	if err != nil {
		t.Fatal(err)
	}
	e.Enqueue(first)
	select {
	case <-arrived: // the sender is busy with "first" from here on
	case <-time.After(10 * time.Second):
		releaseAll()
		e.Shutdown(context.Background())
		t.Fatal("the first request did not reach the collector within 10 s")
	}
	for i := range 10 {
		if !e.Enqueue(testBody(t, "q"+string(rune('0'+i)))) {
			t.Errorf("Enqueue refused a request before Shutdown")
		}
	}
	if got, want := e.Dropped(), uint64(7); got != want {
		t.Errorf("Dropped = %d, want %d (3 of 10 fit)", got, want)
	}
	releaseAll()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown = %v", err)
	}
	if e.Enqueue(testBody(t, "late")) {
		t.Error("Enqueue after Shutdown = true, want false")
	}
	mu.Lock()
	defer mu.Unlock()
	if got, want := strings.Join(names, ","), "first,q7,q8,q9"; got != want {
		t.Errorf("the collector got %s, want %s", got, want)
	}
	if got := e.Sent(); got != 4 {
		t.Errorf("Sent = %d, want 4", got)
	}
}

// TestShutdownTimeout: Shutdown gives up on a collector that does not
// answer when its context ends, cancelling the export in flight.
func TestShutdownTimeout(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		started := make(chan struct{}, 1)
		block := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			started <- struct{}{}
			<-r.Context().Done()
			return nil, r.Context().Err()
		})
		e := testExporter(t, Config{Timeout: time.Hour}, block)
		e.Enqueue(testBody(t, "GET"))
		<-started
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		if err := e.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Shutdown = %v, want the deadline", err)
		}
		if got := time.Since(start); got != time.Second {
			t.Errorf("Shutdown took %v, want its context's 1s", got)
		}
	})
}

// TestExportFailureLogged: a failing collector is logged once, its
// recovery once.
func TestExportFailureLogged(t *testing.T) {
	t.Parallel()
	var logs testnet.SyncBuffer
	answers := []answer{{status: 400}, {status: 400}, {status: 200}, {status: 200}}
	rt := &roundTripper{answers: answers}
	e := testExporter(t, Config{Logger: slogJSON(&logs)}, rt)
	for range answers {
		e.Enqueue(testBody(t, "GET"))
	}
	if err := e.Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown = %v, want nil after a success", err)
	}
	out := logs.String()
	if got := strings.Count(out, `"msg":"otlp export failing"`); got != 1 {
		t.Errorf("%d failing lines, want 1:\n%s", got, out)
	}
	if got := strings.Count(out, `"msg":"otlp export recovered"`); got != 1 {
		t.Errorf("%d recovered lines, want 1:\n%s", got, out)
	}
	if !strings.Contains(out, `"signal":"traces"`) {
		t.Errorf("no signal in the log:\n%s", out)
	}
}

// TestExportTLS: OTEL_EXPORTER_OTLP_CERTIFICATE names the CA that an https
// collector's certificate is checked against: without it, the export fails
// on the certificate (signed by an authority the system does not know).
func TestExportTLS(t *testing.T) {
	t.Parallel()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req collectortracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}))
	// The untrusted case makes the server log a handshake error.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name    string
		env     map[string]string
		wantErr bool
	}{
		{name: "trusted", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL, "OTEL_EXPORTER_OTLP_CERTIFICATE": ca}},
		{name: "traces certificate", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL, "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE": ca}},
		{name: "untrusted", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL}, wantErr: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, _, err := FromEnv(func(k string) string { return tt.env[k] }, Traces)
			if err != nil {
				t.Fatalf("FromEnv: %v", err)
			}
			e, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Shutdown(context.Background())
			err = e.Export(t.Context(), testBody(t, "GET"))
			if (err != nil) != tt.wantErr {
				t.Errorf("Export = %v, want error %t", err, tt.wantErr)
			}
			if _, ok := errors.AsType[x509.UnknownAuthorityError](err); tt.wantErr && !ok {
				t.Errorf("Export = %v, want the certificate refused (x509.UnknownAuthorityError)", err)
			}
		})
	}
}

// TestFromEnv table-tests the configuration read from the OTEL_EXPORTER_OTLP_*
// variables: the defaults, the signal's variables over the general ones,
// the path each signal's URL gets over http/protobuf (and none over grpc),
// the endpoint as logged (no credentials, no query), and the error for
// each malformed value.
func TestFromEnv(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		signal  Signal
		env     map[string]string
		want    Config
		log     string
		wantErr string
	}{
		{
			name: "defaults",
			env:  map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"},
			want: Config{Protocol: HTTPProtobuf, URL: "http://c:4318/v1/traces", Timeout: 10 * time.Second},
			log:  "http://c:4318/v1/traces",
		},
		{
			name:   "metrics path",
			signal: Metrics,
			env:    map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/base/"},
			want:   Config{Signal: Metrics, Protocol: HTTPProtobuf, URL: "http://c:4318/base/v1/metrics", Timeout: 10 * time.Second},
			log:    "http://c:4318/base/v1/metrics",
		},
		{
			name: "nothing set",
			want: Config{Protocol: HTTPProtobuf, URL: "http://localhost:4318/v1/traces", Timeout: 10 * time.Second},
			log:  "http://localhost:4318/v1/traces",
		},
		{
			name:   "grpc default",
			signal: Metrics,
			env:    map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
			want:   Config{Signal: Metrics, Protocol: GRPC, URL: "http://localhost:4317", Timeout: 10 * time.Second},
			log:    "http://localhost:4317",
		},
		{
			name: "grpc endpoint as is",
			env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc",
				"OTEL_EXPORTER_OTLP_ENDPOINT": "https://c:4317"},
			want: Config{Protocol: GRPC, URL: "https://c:4317", Timeout: 10 * time.Second},
			log:  "https://c:4317",
		},
		{
			name: "signal variables win",
			env: map[string]string{
				"OTEL_EXPORTER_OTLP_ENDPOINT":           "http://c:4318",
				"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT":    "https://u:p@t:443/custom?k=secret",
				"OTEL_EXPORTER_OTLP_TIMEOUT":            "100",
				"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT":     "2500",
				"OTEL_EXPORTER_OTLP_COMPRESSION":        "none",
				"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "GZIP",
				"OTEL_EXPORTER_OTLP_PROTOCOL":           "grpc",
				"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL":    "http/protobuf",
				"OTEL_EXPORTER_OTLP_HEADERS":            "a=1,b=2",
				"OTEL_EXPORTER_OTLP_TRACES_HEADERS":     "b=3",
			},
			want: Config{Protocol: HTTPProtobuf, URL: "https://u:p@t:443/custom?k=secret",
				Headers: map[string]string{"a": "1", "b": "3"}, Timeout: 2500 * time.Millisecond, Gzip: true},
			log: "https://t:443/custom",
		},
		{
			name:    "metrics variables are not traces'",
			env:     map[string]string{"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/json"},
			want:    Config{Protocol: HTTPProtobuf, URL: "http://localhost:4318/v1/traces", Timeout: 10 * time.Second},
			log:     "http://localhost:4318/v1/traces",
			wantErr: "",
		},
		{name: "http/json", env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
			wantErr: `OTEL_EXPORTER_OTLP_PROTOCOL "http/json": want http/protobuf or grpc`},
		{name: "no scheme", signal: Metrics, env: map[string]string{"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "c:4318"},
			wantErr: `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT "c:4318": want an http:// or https:// URL`},
		{name: "bad timeout", env: map[string]string{"OTEL_EXPORTER_OTLP_TIMEOUT": "1s"},
			wantErr: `OTEL_EXPORTER_OTLP_TIMEOUT "1s": want a positive number of milliseconds`},
		{name: "bad compression", env: map[string]string{"OTEL_EXPORTER_OTLP_COMPRESSION": "zstd"},
			wantErr: `OTEL_EXPORTER_OTLP_COMPRESSION "zstd": want gzip or none`},
		{name: "bad header value", env: map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "k=a%0Ab"},
			wantErr: `OTEL_EXPORTER_OTLP_HEADERS: header "k": want a valid HTTP header name and value`},
		{name: "key without certificate", env: map[string]string{"OTEL_EXPORTER_OTLP_CLIENT_KEY": "/k.pem"},
			wantErr: "OTEL_EXPORTER_OTLP_CLIENT_KEY is set without OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, log, err := FromEnv(func(k string) string { return tt.env[k] }, tt.signal)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Errorf("FromEnv = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("FromEnv: %v", err)
			}
			if got.Signal != tt.want.Signal || got.Protocol != tt.want.Protocol || got.URL != tt.want.URL ||
				got.Timeout != tt.want.Timeout || got.Gzip != tt.want.Gzip || len(got.Headers) != len(tt.want.Headers) || got.TLS != nil {
				t.Errorf("FromEnv = %+v, want %+v", got, tt.want)
			}
			for k, v := range tt.want.Headers {
				if got.Headers[k] != v {
					t.Errorf("header %s = %q, want %q", k, got.Headers[k], v)
				}
			}
			if log != tt.log {
				t.Errorf("logged endpoint = %q, want %q", log, tt.log)
			}
		})
	}
}

// TestResourceAttributes: the resource's attributes are the ones given,
// then OTEL_RESOURCE_ATTRIBUTES' (percent-decoded) over them key by key, then
// OTEL_SERVICE_NAME over service.name, which is otherwise the service
// given, or "queue"; a malformed OTEL_RESOURCE_ATTRIBUTES is an error.
func TestResourceAttributes(t *testing.T) {
	t.Parallel()
	base := map[string]string{"k8s.pod.name": "p", "kn.revision.name": "r"}
	for _, tt := range []struct {
		name    string
		env     map[string]string
		service string
		want    map[string]string
	}{
		{"base and default service", nil, "hello",
			map[string]string{"k8s.pod.name": "p", "kn.revision.name": "r", "service.name": "hello"}},
		{"queue without a service", nil, "",
			map[string]string{"k8s.pod.name": "p", "kn.revision.name": "r", "service.name": "queue"}},
		{"environment wins per key", map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "k8s.pod.name=q,team=a%2Cb,service.name=res"}, "hello",
			map[string]string{"k8s.pod.name": "q", "kn.revision.name": "r", "team": "a,b", "service.name": "res"}},
		{"OTEL_SERVICE_NAME wins", map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "service.name=res", "OTEL_SERVICE_NAME": "svc"}, "hello",
			map[string]string{"k8s.pod.name": "p", "kn.revision.name": "r", "service.name": "svc"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ResourceAttributes(func(k string) string { return tt.env[k] }, base, tt.service)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Errorf("ResourceAttributes = %v, want %v", got, tt.want)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q", k, got[k], v)
				}
			}
		})
	}
	if _, err := ResourceAttributes(func(string) string { return "novalue" }, nil, ""); err == nil {
		t.Error("a malformed OTEL_RESOURCE_ATTRIBUTES was accepted")
	}
}

// TestErrorMessage: the message taken from a collector's error body is a
// google.rpc.Status's (protobuf) or the text's, its white space folded to
// single spaces, and past 200 bytes cut at a rune boundary within them and
// marked with an ellipsis; a body of another type, or a Status that does
// not decode, gives none.
func TestErrorMessage(t *testing.T) {
	t.Parallel()
	long := "a" + strings.Repeat("é", 150) // 301 bytes: byte 200 is mid-rune
	tests := []struct {
		name, contentType string
		body              []byte
		want              string
	}{
		{"protobuf", "application/x-protobuf", rpcStatusBody("quota\nexceeded"), "quota exceeded"},
		{"protobuf malformed", "application/x-protobuf", []byte{0x12, 0x7f, 'a'}, ""},
		{"text", "text/plain", []byte("  busy  \r\n"), "busy"},
		{"text cut on a rune", "text/plain", []byte(long), "a" + strings.Repeat("é", 99) + "…"},
		{"json ignored", "application/json", []byte(`{"message":"x"}`), ""},
		{"none", "", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := errorMessage(tt.contentType, tt.body); got != tt.want {
				t.Errorf("errorMessage = %q, want %q", got, tt.want)
			}
		})
	}
}
