package tracing_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queue-dev/queue/internal/testnet"
	"github.com/queue-dev/queue/tracing"
	"go.opentelemetry.io/otel/trace"
	collectortracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

const (
	traceID  = "4bf92f3577b34da6a3ce929d0e0e4736"
	spanID   = "00f067aa0ba902b7"
	parentID = "a3ce929d0e0e4736"
)

// exported is one span as the receiver got it.
type exported struct {
	span     *tracepb.Span
	resource *resourcepb.Resource
}

// receiver is an in-process OTLP/HTTP trace receiver.
type receiver struct {
	url    string
	status int // answer to every export; 0 means 200

	mu      sync.Mutex
	spans   []exported
	headers []http.Header
}

func newReceiver(t *testing.T, status int) *receiver {
	t.Helper()
	rc := &receiver{status: status}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
			t.Errorf("receiver got %s %s, want POST /v1/traces", r.Method, r.URL.Path)
			http.NotFound(w, r)
			return
		}
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				t.Errorf("receiver: gzip: %v", err)
				http.Error(w, "bad gzip", http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		if err != nil {
			t.Errorf("receiver: read: %v", err)
			return
		}
		var req collectortracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			t.Errorf("receiver: decode %s: %v", r.Header.Get("Content-Type"), err)
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		rc.mu.Lock()
		rc.headers = append(rc.headers, r.Header.Clone())
		for _, rs := range req.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					rc.spans = append(rc.spans, exported{span: s, resource: rs.GetResource()})
				}
			}
		}
		rc.mu.Unlock()
		if rc.status != 0 {
			http.Error(w, http.StatusText(rc.status), rc.status)
			return
		}
		resp, _ := proto.Marshal(&collectortracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(resp)
	}))
	t.Cleanup(srv.Close)
	rc.url = srv.URL
	return rc
}

func (rc *receiver) got() ([]exported, []http.Header) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.spans, rc.headers
}

// getenv serves env, with $RECEIVER replaced by the receiver's URL, and sets
// OTEL_EXPORTER_OTLP_ENDPOINT to the receiver unless env names an endpoint
// or exporter itself.
func getenv(rc *receiver, env map[string]string) func(string) string {
	m := map[string]string{}
	for k, v := range env {
		m[k] = strings.ReplaceAll(v, "$RECEIVER", rc.url)
	}
	_, e1 := m["OTEL_EXPORTER_OTLP_ENDPOINT"]
	_, e2 := m["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
	_, e3 := m["OTEL_TRACES_EXPORTER"]
	if !e1 && !e2 && !e3 {
		m["OTEL_EXPORTER_OTLP_ENDPOINT"] = rc.url
	}
	return func(k string) string { return m[k] }
}

// serverSpan returns the server span of one request's spans, and its
// kn.queueproxy.proxy child; it fails the test unless there are exactly
// those two.
func serverSpan(t *testing.T, spans []exported) (server, proxy *tracepb.Span) {
	t.Helper()
	if len(spans) != 2 {
		t.Fatalf("exported %d spans, want 2 (the server span and %s)", len(spans), tracing.ProxySpanName)
	}
	for _, s := range spans {
		if s.span.GetKind() == tracepb.Span_SPAN_KIND_SERVER {
			server = s.span
		} else {
			proxy = s.span
		}
	}
	if server == nil || proxy == nil {
		t.Fatalf("spans %v, want one of kind server and one internal", spans)
	}
	if got, want := proxy.GetName(), tracing.ProxySpanName; got != want {
		t.Errorf("proxy span name %q, want %q", got, want)
	}
	if got, want := proxy.GetKind(), tracepb.Span_SPAN_KIND_INTERNAL; got != want {
		t.Errorf("proxy span kind %v, want %v", got, want)
	}
	if !bytes.Equal(proxy.GetParentSpanId(), server.GetSpanId()) || !bytes.Equal(proxy.GetTraceId(), server.GetTraceId()) {
		t.Errorf("proxy span's parent %x, want the server span %x", proxy.GetParentSpanId(), server.GetSpanId())
	}
	return server, proxy
}

func newTracer(t *testing.T, cfg tracing.Config) *tracing.Tracer {
	t.Helper()
	tr, err := tracing.New(t.Context(), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if tr == nil {
		t.Fatal("New returned a nil Tracer, want tracing on")
	}
	return tr
}

// shutdown flushes tr; every span ended before it is then at the receiver.
func shutdown(t *testing.T, tr *tracing.Tracer) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	return tr.Shutdown(ctx)
}

// upstream records what the handler behind the Tracer received.
type upstream struct {
	header http.Header
	span   trace.SpanContext // the span in the request's context
	status int
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.header = r.Header.Clone()
	u.span = trace.SpanContextFromContext(r.Context())
	if u.status != 0 {
		w.WriteHeader(u.status)
	}
}

// upstreamContext reads the trace context the upstream got in format.
func upstreamContext(t *testing.T, h http.Header, format string) (traceID, spanID string, sampled bool) {
	t.Helper()
	switch format {
	case "w3c":
		p := strings.Split(h.Get("traceparent"), "-")
		if len(p) != 4 || p[0] != "00" {
			t.Fatalf("upstream traceparent = %q, want 00-<trace>-<span>-<flags>", h.Get("traceparent"))
		}
		return p[1], p[2], p[3] == "01"
	case "b3":
		p := strings.Split(h.Get("b3"), "-")
		if len(p) != 3 {
			t.Fatalf("upstream b3 = %q, want <trace>-<span>-<sampled>", h.Get("b3"))
		}
		return p[0], p[1], p[2] == "1"
	case "b3multi":
		return h.Get("X-B3-TraceId"), h.Get("X-B3-SpanId"), h.Get("X-B3-Sampled") == "1"
	}
	t.Fatalf("unknown format %q", format)
	return "", "", false
}

// TestHandlerPropagation: the Handler reads the incoming trace context in
// the configured propagation formats and joins its trace (a malformed one
// is ignored), samples as OTEL_TRACES_SAMPLER and the sample rate decide,
// exports the span only when sampled, and passes the context on to the
// upstream in the configured formats; baggage and the headers of formats
// not configured reach the upstream as they came.
func TestHandlerPropagation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		env      map[string]string
		rate     float64
		in       map[string]string // incoming headers
		format   string            // how the upstream's context is read; "" = not checked
		exported bool
		traceID  string   // the trace the span joins; "" = a new trace
		parent   string   // the exported span's parent; "" = a root span
		keep     []string // incoming headers that must reach the upstream unchanged
		absent   []string // headers the upstream must not get
	}{
		{
			name: "w3c sampled parent",
			in: map[string]string{
				"traceparent": "00-" + traceID + "-" + spanID + "-01",
				"tracestate":  "vendor=abc,other=x",
				"baggage":     "user=alice;prop=1,  k2=v%202",
			},
			format: "w3c", exported: true, traceID: traceID, parent: spanID,
			keep: []string{"tracestate", "baggage"},
		},
		{
			name:   "w3c sampled parent wins over rate 0",
			rate:   0,
			in:     map[string]string{"traceparent": "00-" + traceID + "-" + spanID + "-01"},
			format: "w3c", exported: true, traceID: traceID, parent: spanID,
		},
		{
			name:   "w3c unsampled parent",
			rate:   1,
			in:     map[string]string{"traceparent": "00-" + traceID + "-" + spanID + "-00", "baggage": "a=b"},
			format: "w3c", exported: false, traceID: traceID,
			keep: []string{"baggage"},
		},
		{
			name:   "no context rate 1 starts a trace",
			rate:   1,
			format: "w3c", exported: true,
			absent: []string{"tracestate", "b3"},
		},
		{
			name:   "no context rate 0 propagates unsampled",
			rate:   0,
			format: "w3c", exported: false,
		},
		{
			name:   "malformed traceparent starts a trace",
			rate:   1,
			in:     map[string]string{"traceparent": "00-zz-" + spanID + "-01", "tracestate": "vendor=abc"},
			format: "w3c", exported: true,
			absent: []string{"tracestate"},
		},
		{
			name:   "b3 single",
			env:    map[string]string{"OTEL_PROPAGATORS": "b3"},
			in:     map[string]string{"b3": traceID + "-" + spanID + "-1", "baggage": "a=b"},
			format: "b3", exported: true, traceID: traceID, parent: spanID,
			keep:   []string{"baggage"},
			absent: []string{"traceparent", "X-B3-TraceId"},
		},
		{
			name:   "b3 single unsampled",
			env:    map[string]string{"OTEL_PROPAGATORS": "b3"},
			rate:   1,
			in:     map[string]string{"b3": traceID + "-" + spanID + "-0"},
			format: "b3", exported: false, traceID: traceID,
		},
		{
			name: "b3multi",
			env:  map[string]string{"OTEL_PROPAGATORS": "b3multi"},
			in: map[string]string{
				"X-B3-TraceId": traceID, "X-B3-SpanId": spanID,
				"X-B3-ParentSpanId": parentID, "X-B3-Sampled": "1",
			},
			format: "b3multi", exported: true, traceID: traceID, parent: spanID,
			absent: []string{"X-B3-ParentSpanId", "b3", "traceparent"},
		},
		{
			name: "b3 reads multi and writes single",
			env:  map[string]string{"OTEL_PROPAGATORS": "b3"},
			in: map[string]string{
				"X-B3-TraceId": traceID, "X-B3-SpanId": spanID,
				"X-B3-ParentSpanId": parentID, "X-B3-Sampled": "1",
			},
			format: "b3", exported: true, traceID: traceID, parent: spanID,
			absent: []string{"X-B3-TraceId", "X-B3-SpanId", "X-B3-ParentSpanId", "X-B3-Sampled"},
		},
		{
			name:   "tracecontext only leaves b3 alone",
			env:    map[string]string{"OTEL_PROPAGATORS": "tracecontext"},
			rate:   1,
			in:     map[string]string{"b3": traceID + "-" + spanID + "-1"},
			format: "w3c", exported: true,
			keep: []string{"b3"},
		},
		{
			name:   "tracecontext and b3 both written",
			env:    map[string]string{"OTEL_PROPAGATORS": "tracecontext,b3"},
			in:     map[string]string{"traceparent": "00-" + traceID + "-" + spanID + "-01"},
			format: "b3", exported: true, traceID: traceID, parent: spanID,
		},
		{
			name:     "propagators none",
			env:      map[string]string{"OTEL_PROPAGATORS": "none"},
			rate:     1,
			in:       map[string]string{"traceparent": "00-" + traceID + "-" + spanID + "-01"},
			exported: true,
			keep:     []string{"traceparent"},
		},
		{
			name:   "always_off ignores a sampled parent",
			env:    map[string]string{"OTEL_TRACES_SAMPLER": "always_off"},
			in:     map[string]string{"traceparent": "00-" + traceID + "-" + spanID + "-01"},
			format: "w3c", exported: false, traceID: traceID,
		},
		{
			name:   "always_on samples an unsampled parent",
			env:    map[string]string{"OTEL_TRACES_SAMPLER": "always_on"},
			in:     map[string]string{"traceparent": "00-" + traceID + "-" + spanID + "-00"},
			format: "w3c", exported: true, traceID: traceID, parent: spanID,
		},
		{
			name:   "parentbased_always_off keeps a sampled parent",
			env:    map[string]string{"OTEL_TRACES_SAMPLER": "parentbased_always_off"},
			in:     map[string]string{"traceparent": "00-" + traceID + "-" + spanID + "-01"},
			format: "w3c", exported: true, traceID: traceID, parent: spanID,
		},
		{
			name:   "parentbased_always_off starts no trace",
			env:    map[string]string{"OTEL_TRACES_SAMPLER": "parentbased_always_off"},
			rate:   1,
			format: "w3c", exported: false,
		},
		{
			name:   "parentbased_traceidratio 1 starts a trace",
			env:    map[string]string{"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "1"},
			format: "w3c", exported: true,
		},
		{
			name:   "traceidratio 0 starts no trace",
			env:    map[string]string{"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0"},
			rate:   1,
			format: "w3c", exported: false,
		},
		{
			name:   "traces endpoint used as is",
			env:    map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "$RECEIVER/v1/traces"},
			in:     map[string]string{"traceparent": "00-" + traceID + "-" + spanID + "-01"},
			format: "w3c", exported: true, traceID: traceID, parent: spanID,
		},
		{
			name:   "otlp exporter with base endpoint",
			env:    map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "$RECEIVER/"},
			in:     map[string]string{"traceparent": "00-" + traceID + "-" + spanID + "-01"},
			format: "w3c", exported: true, traceID: traceID, parent: spanID,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rc := newReceiver(t, 0)
			tr := newTracer(t, tracing.Config{Getenv: getenv(rc, tt.env), SampleRate: tt.rate})
			up := &upstream{}
			req := httptest.NewRequest(http.MethodGet, "http://example.com/x", nil)
			for k, v := range tt.in {
				req.Header.Set(k, v)
			}
			tr.Handler(up).ServeHTTP(httptest.NewRecorder(), req)
			if err := shutdown(t, tr); err != nil {
				t.Fatalf("Shutdown: %v", err)
			}
			spans, _ := rc.got()

			var span, proxy *tracepb.Span
			switch {
			case tt.exported:
				span, proxy = serverSpan(t, spans)
				if got, want := span.GetKind(), tracepb.Span_SPAN_KIND_SERVER; got != want {
					t.Errorf("span kind = %v, want %v", got, want)
				}
				if got, want := span.GetName(), "GET"; got != want {
					t.Errorf("span name = %q, want %q", got, want)
				}
				if tt.traceID != "" {
					if got := hex.EncodeToString(span.GetTraceId()); got != tt.traceID {
						t.Errorf("span trace id = %s, want %s", got, tt.traceID)
					}
				}
				if got := hex.EncodeToString(span.GetParentSpanId()); got != tt.parent {
					t.Errorf("span parent id = %q, want %q", got, tt.parent)
				}
			case len(spans) != 0:
				t.Fatalf("exported %d spans, want none", len(spans))
			}

			if up.header == nil {
				t.Fatal("upstream handler not called")
			}
			if tt.format != "" {
				gotTrace, gotSpan, sampled := upstreamContext(t, up.header, tt.format)
				wantTrace := tt.traceID
				if span != nil {
					wantTrace = hex.EncodeToString(span.GetTraceId())
				}
				if wantTrace != "" && gotTrace != wantTrace {
					t.Errorf("upstream trace id = %s, want %s", gotTrace, wantTrace)
				}
				if len(gotTrace) != 32 || strings.Trim(gotTrace, "0") == "" {
					t.Errorf("upstream trace id = %q, want 32 hex digits, not all zero", gotTrace)
				}
				if span != nil {
					if want := hex.EncodeToString(proxy.GetSpanId()); gotSpan != want {
						t.Errorf("upstream parent span id = %s, want the exported proxy span %s", gotSpan, want)
					}
				} else if gotSpan == spanID || len(gotSpan) != 16 {
					t.Errorf("upstream parent span id = %q, want a new span id", gotSpan)
				}
				if sampled != tt.exported {
					t.Errorf("upstream sampled = %t, want %t", sampled, tt.exported)
				}
				if got := up.span.SpanID().String(); got != gotSpan {
					t.Errorf("span in the request context = %s, want the propagated %s", got, gotSpan)
				}
			}
			for _, k := range tt.keep {
				if got, want := up.header.Get(k), tt.in[k]; got != want {
					t.Errorf("upstream %s = %q, want it unchanged %q", k, got, want)
				}
			}
			for _, k := range tt.absent {
				if got := up.header.Get(k); got != "" {
					t.Errorf("upstream %s = %q, want none", k, got)
				}
			}
		})
	}
}

// statusWriter is the kind of ResponseWriter wrapper the request path has
// once, outside the tracing handler.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Status() int { return w.code }

// outerWriter is a writer that only unwraps to the one that knows the status.
type outerWriter struct{ http.ResponseWriter }

func (w outerWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		v := kv.GetValue()
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = strconv.FormatInt(x.IntValue, 10)
		default:
			m[kv.GetKey()] = v.GetStringValue()
		}
	}
	return m
}

// TestSpanAttributes: the server span is named after the method (HTTP for
// one outside the standard set) and carries OpenTelemetry's HTTP server
// attributes; the response status is read from a writer that reports it
// (directly or by Unwrap), and a 5xx makes the span an error.
func TestSpanAttributes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		method    string
		status    int
		writer    func(http.ResponseWriter) http.ResponseWriter
		wantName  string
		want      map[string]string // attributes; "" means absent
		wantError bool
	}{
		{
			name:     "status reporter",
			method:   http.MethodGet,
			status:   http.StatusCreated,
			writer:   func(w http.ResponseWriter) http.ResponseWriter { return &statusWriter{ResponseWriter: w} },
			wantName: "GET",
			want: map[string]string{
				"http.request.method": "GET", "url.path": "/x", "url.scheme": "http",
				"server.address": "example.com", "server.port": "8080",
				"network.protocol.version": "1.1", "client.address": "192.0.2.1", "client.port": "1234",
				"user_agent.original": "test/1", "http.response.status_code": "201", "error.type": "",
			},
		},
		{
			name:     "reporter reached by Unwrap",
			method:   http.MethodPost,
			status:   http.StatusServiceUnavailable,
			writer:   func(w http.ResponseWriter) http.ResponseWriter { return outerWriter{&statusWriter{ResponseWriter: w}} },
			wantName: "POST",
			want: map[string]string{
				"http.request.method": "POST", "http.response.status_code": "503", "error.type": "503",
			},
			wantError: true,
		},
		{
			name:     "plain writer has no status",
			method:   http.MethodGet,
			status:   http.StatusOK,
			writer:   func(w http.ResponseWriter) http.ResponseWriter { return w },
			wantName: "GET",
			want:     map[string]string{"http.request.method": "GET", "http.response.status_code": ""},
		},
		{
			name:     "unknown method",
			method:   "FOO",
			writer:   func(w http.ResponseWriter) http.ResponseWriter { return w },
			wantName: "HTTP",
			want:     map[string]string{"http.request.method": "_OTHER", "http.request.method_original": "FOO"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rc := newReceiver(t, 0)
			tr := newTracer(t, tracing.Config{Getenv: getenv(rc, nil), SampleRate: 1})
			req := httptest.NewRequest(tt.method, "http://example.com:8080/x?q=1", nil)
			req.RemoteAddr = "192.0.2.1:1234"
			req.Header.Set("User-Agent", "test/1")
			tr.Handler(&upstream{status: tt.status}).ServeHTTP(tt.writer(httptest.NewRecorder()), req)
			if err := shutdown(t, tr); err != nil {
				t.Fatalf("Shutdown: %v", err)
			}
			spans, _ := rc.got()
			span, _ := serverSpan(t, spans)
			if got := span.GetName(); got != tt.wantName {
				t.Errorf("span name = %q, want %q", got, tt.wantName)
			}
			got := attrs(span.GetAttributes())
			for k, want := range tt.want {
				if got[k] != want {
					t.Errorf("attribute %s = %q, want %q", k, got[k], want)
				}
			}
			if got, want := span.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR, tt.wantError; got != want {
				t.Errorf("span status error = %t, want %t", got, want)
			}
		})
	}
}

// TestResource: the spans' resource has service.name "queue" by default,
// Config's name and attributes, and OTEL_RESOURCE_ATTRIBUTES and
// OTEL_SERVICE_NAME over them, in that order of precedence.
func TestResource(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		env     map[string]string
		service string // Config.ServiceName
		attrs   map[string]string
		want    map[string]string
	}{
		{name: "default", want: map[string]string{"service.name": "queue", "telemetry.sdk.language": "go"}},
		{name: "config", service: "svc", attrs: map[string]string{"k8s.pod.name": "p"},
			want: map[string]string{"service.name": "svc", "k8s.pod.name": "p"}},
		{name: "OTEL_SERVICE_NAME wins", env: map[string]string{
			"OTEL_SERVICE_NAME": "env", "OTEL_RESOURCE_ATTRIBUTES": "service.name=attr"}, service: "svc",
			want: map[string]string{"service.name": "env"}},
		{name: "OTEL_RESOURCE_ATTRIBUTES", env: map[string]string{
			"OTEL_RESOURCE_ATTRIBUTES": "service.name=attr, k8s.pod.name=p%2C1"}, service: "svc",
			attrs: map[string]string{"k8s.pod.name": "cfg", "k8s.namespace.name": "ns"},
			want:  map[string]string{"service.name": "attr", "k8s.pod.name": "p,1", "k8s.namespace.name": "ns"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rc := newReceiver(t, 0)
			tr := newTracer(t, tracing.Config{
				Getenv: getenv(rc, tt.env), SampleRate: 1,
				ServiceName: tt.service, ResourceAttributes: tt.attrs,
			})
			tr.Handler(&upstream{}).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
			if err := shutdown(t, tr); err != nil {
				t.Fatalf("Shutdown: %v", err)
			}
			spans, _ := rc.got()
			serverSpan(t, spans)
			got := attrs(spans[0].resource.GetAttributes())
			for k, want := range tt.want {
				if got[k] != want {
					t.Errorf("resource %s = %q, want %q", k, got[k], want)
				}
			}
		})
	}
}

// TestExportRequest: one export carries the spans of a request, as
// protobuf, with the headers of OTEL_EXPORTER_OTLP_HEADERS (the signal's
// own winning) and gzip when asked for.
func TestExportRequest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		env         map[string]string
		wantHeaders map[string]string
	}{
		{
			name: "headers",
			env: map[string]string{
				"OTEL_EXPORTER_OTLP_HEADERS":        "Authorization=Bearer%20secret,x-a=1",
				"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "x-a=2",
			},
			wantHeaders: map[string]string{"Authorization": "Bearer secret", "X-A": "2", "Content-Type": "application/x-protobuf"},
		},
		{
			name:        "gzip",
			env:         map[string]string{"OTEL_EXPORTER_OTLP_COMPRESSION": "gzip"},
			wantHeaders: map[string]string{"Content-Encoding": "gzip"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rc := newReceiver(t, 0)
			tr := newTracer(t, tracing.Config{Getenv: getenv(rc, tt.env), SampleRate: 1})
			tr.Handler(&upstream{}).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
			if err := shutdown(t, tr); err != nil {
				t.Fatalf("Shutdown: %v", err)
			}
			spans, headers := rc.got()
			if len(spans) != 2 || len(headers) != 1 {
				t.Fatalf("got %d spans in %d exports, want 2 in 1", len(spans), len(headers))
			}
			for k, want := range tt.wantHeaders {
				if got := headers[0].Get(k); got != want {
					t.Errorf("export header %s = %q, want %q", k, got, want)
				}
			}
		})
	}
}

// TestExportFailure: an export the receiver refuses makes Shutdown return
// an error and is logged once, however many spans it had.
func TestExportFailure(t *testing.T) {
	t.Parallel()
	// 400 is not retried (OTLP/HTTP "Failures"), so the export fails at once.
	rc := newReceiver(t, http.StatusBadRequest)
	var logs testnet.SyncBuffer
	tr := newTracer(t, tracing.Config{
		Getenv: getenv(rc, nil), SampleRate: 1,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
	})
	h := tr.Handler(&upstream{})
	for range 3 {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	}
	if err := shutdown(t, tr); err == nil {
		t.Error("Shutdown = nil, want the failed export's error")
	}
	if got, want := strings.Count(logs.String(), `"msg":"otlp export failing","signal":"traces"`), 1; got != want {
		t.Errorf("logged the failure %d times, want %d; log:\n%s", got, want, logs.String())
	}
}

// TestHandlerPanic: a panic in the handler behind the Handler goes on up,
// and its span is still exported, with an error status.
func TestHandlerPanic(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, 0)
	tr := newTracer(t, tracing.Config{Getenv: getenv(rc, nil), SampleRate: 1})
	h := tr.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }))
	func() {
		defer func() {
			if p := recover(); p != http.ErrAbortHandler {
				t.Errorf("recovered %v, want http.ErrAbortHandler passed on", p)
			}
		}()
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	}()
	if err := shutdown(t, tr); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	spans, _ := rc.got()
	server, _ := serverSpan(t, spans)
	if got, want := server.GetStatus().GetCode(), tracepb.Status_STATUS_CODE_ERROR; got != want {
		t.Errorf("span status = %v, want %v", got, want)
	}
}

// TestNewOff: without an exporter to use New returns a nil Tracer and no
// error, and the nil Tracer's Handler passes requests on untouched.
func TestNewOff(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  map[string]string
	}{
		{name: "empty environment"},
		{name: "nil Getenv"},
		{name: "exporter none", env: map[string]string{
			"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}},
		{name: "sdk disabled", env: map[string]string{
			"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}},
		{name: "only other OTEL variables", env: map[string]string{
			"OTEL_SERVICE_NAME": "x", "OTEL_PROPAGATORS": "b3", "OTEL_TRACES_SAMPLER": "always_on"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := tracing.Config{SampleRate: 1}
			if tt.name != "nil Getenv" {
				cfg.Getenv = func(k string) string { return tt.env[k] }
			}
			tr, err := tracing.New(t.Context(), cfg)
			if err != nil || tr != nil {
				t.Fatalf("New = %v, %v; want nil, nil", tr, err)
			}
			// The nil Tracer is usable: no span, headers untouched.
			up := &upstream{}
			next := http.Handler(up)
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			req.Header.Set("traceparent", "00-"+traceID+"-"+spanID+"-01")
			tr.Handler(next).ServeHTTP(httptest.NewRecorder(), req)
			if got, want := up.header.Get("traceparent"), req.Header.Get("traceparent"); got != want {
				t.Errorf("upstream traceparent = %q, want %q", got, want)
			}
			if err := tr.Shutdown(t.Context()); err != nil {
				t.Errorf("nil Tracer Shutdown = %v, want nil", err)
			}
		})
	}
}

// TestNewOnWithoutEndpoint: OTEL_TRACES_EXPORTER=otlp alone (the default
// endpoint, localhost:4318, where nothing need listen) turns tracing on,
// and a Shutdown with nothing to export returns nil.
func TestNewOnWithoutEndpoint(t *testing.T) {
	t.Parallel()
	tr := newTracer(t, tracing.Config{Getenv: func(k string) string {
		return map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}[k]
	}})
	if err := shutdown(t, tr); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// TestNewErrors: New refuses a configuration it cannot honour with an error
// that names the variable (or field) at fault and quotes no header value.
func TestNewErrors(t *testing.T) {
	t.Parallel()
	const endpoint = "http://127.0.0.1:4318"
	tests := []struct {
		name string
		env  map[string]string
		rate float64
		want string // in the error
	}{
		{name: "unknown propagator", env: map[string]string{"OTEL_PROPAGATORS": "tracecontext,jaeger"}, want: "OTEL_PROPAGATORS"},
		{name: "none with others", env: map[string]string{"OTEL_PROPAGATORS": "none,b3"}, want: "OTEL_PROPAGATORS"},
		{name: "unknown sampler", env: map[string]string{"OTEL_TRACES_SAMPLER": "sometimes"}, want: "OTEL_TRACES_SAMPLER"},
		{name: "sampler arg not a number", env: map[string]string{
			"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "half"}, want: "OTEL_TRACES_SAMPLER_ARG"},
		{name: "sampler arg above 1", env: map[string]string{
			"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"}, want: "OTEL_TRACES_SAMPLER_ARG"},
		{name: "unknown exporter", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, want: "OTEL_TRACES_EXPORTER"},
		{name: "endpoint without scheme", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, want: "OTEL_EXPORTER_OTLP_ENDPOINT"},
		{name: "traces endpoint ftp", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "ftp://collector/"}, want: "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"},
		{name: "headers without =", env: map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "secret"}, want: "OTEL_EXPORTER_OTLP_HEADERS"},
		{name: "header name invalid", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "a b=c"}, want: "OTEL_EXPORTER_OTLP_TRACES_HEADERS"},
		// Only http/protobuf and grpc are implemented: JSON is refused, not
		// sent as protobuf to a collector that expects JSON.
		{name: "json protocol", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"}, want: "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"},
		{name: "certificate missing", env: map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": "/nonexistent/ca.pem"}, want: "OTEL_EXPORTER_OTLP_CERTIFICATE"},
		{name: "client key without certificate", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY": "/nonexistent/key.pem"}, want: "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY"},
		{name: "timeout", env: map[string]string{"OTEL_EXPORTER_OTLP_TIMEOUT": "10s"}, want: "OTEL_EXPORTER_OTLP_TIMEOUT"},
		{name: "compression", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "zstd"}, want: "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION"},
		{name: "resource attributes", env: map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "a=%zz"}, want: "OTEL_RESOURCE_ATTRIBUTES"},
		{name: "sample rate", rate: 1.5, want: "sample rate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}
			for k, v := range tt.env {
				env[k] = v
			}
			tr, err := tracing.New(t.Context(), tracing.Config{
				Getenv: func(k string) string { return env[k] }, SampleRate: tt.rate,
			})
			if err == nil {
				tr.Shutdown(t.Context())
				t.Fatalf("New = nil error, want one naming %s", tt.want)
			}
			if tr != nil {
				t.Errorf("New returned a Tracer with error %v", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New error = %q, want it to name %s", err, tt.want)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("New error = %q quotes a header value", err)
			}
		})
	}
}

// TestConsoleExporter: OTEL_TRACES_EXPORTER=console (Knative's tracing
// protocol stdout) writes each span as one line of JSON with the fields of
// OpenTelemetry's stdouttrace exporter, timestamps included.
func TestConsoleExporter(t *testing.T) {
	t.Parallel()
	var out testnet.SyncBuffer
	tr := newTracer(t, tracing.Config{
		Getenv:     func(k string) string { return map[string]string{"OTEL_TRACES_EXPORTER": "console"}[k] },
		SampleRate: 1, Stdout: &out, ServiceName: "hello",
	})
	req := httptest.NewRequest(http.MethodGet, "/x", nil)
	req.Header.Set("traceparent", "00-"+traceID+"-"+spanID+"-01")
	tr.Handler(&upstream{}).ServeHTTP(httptest.NewRecorder(), req)
	if err := shutdown(t, tr); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2 (one per span):\n%s", len(lines), out.String())
	}
	// The fields of go.opentelemetry.io/otel/sdk/trace/tracetest.SpanStub,
	// which stdouttrace encodes.
	want := []string{"Name", "SpanContext", "Parent", "SpanKind", "StartTime", "EndTime", "Attributes", "Events",
		"Links", "Status", "DroppedAttributes", "DroppedEvents", "DroppedLinks", "ChildSpanCount", "Resource",
		"InstrumentationScope", "InstrumentationLibrary"}
	names := map[string]bool{}
	for _, l := range lines {
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		if len(m) != len(want) {
			t.Errorf("line has %d fields, want %d: %s", len(m), len(want), l)
		}
		for _, k := range want {
			if _, ok := m[k]; !ok {
				t.Errorf("line lacks %s: %s", k, l)
			}
		}
		var s struct {
			Name        string
			SpanContext struct{ TraceID string }
			StartTime   time.Time
			Resource    []struct {
				Key   string
				Value struct{ Value any }
			}
		}
		if err := json.Unmarshal([]byte(l), &s); err != nil {
			t.Fatal(err)
		}
		names[s.Name] = true
		if s.SpanContext.TraceID != traceID || s.StartTime.IsZero() {
			t.Errorf("span %s: trace %s, start %v; want %s and a start time", s.Name, s.SpanContext.TraceID, s.StartTime, traceID)
		}
		found := false
		for _, a := range s.Resource {
			found = found || a.Key == "service.name" && a.Value.Value == "hello"
		}
		if !found {
			t.Errorf("span %s: resource %v lacks service.name hello", s.Name, s.Resource)
		}
	}
	if !names["GET"] || !names[tracing.ProxySpanName] {
		t.Errorf("spans %v, want GET and %s", names, tracing.ProxySpanName)
	}
}
