package tracing

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/queue-dev/queue/otlp"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	// The semantic conventions of the SDK's own resource detectors: a
	// resource merges only with one of the same schema.
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// instrumentationName names the tracer, as the OpenTelemetry API asks: the
// import path of the instrumenting package.
const instrumentationName = "github.com/queue-dev/queue/tracing"

// Config configures a Tracer. The zero Config means tracing off.
type Config struct {
	// Getenv looks up the OTEL_* variables listed in the package doc; the
	// caller passes os.Getenv. nil means an empty environment, and so
	// tracing off.
	Getenv func(string) string
	// SampleRate, --trace-sample-rate, is the share of requests, from 0 to
	// 1, that start a new trace when none comes in. A request that comes
	// with a trace context keeps its sampling decision. 0 means no new
	// traces. OTEL_TRACES_SAMPLER, when set, replaces this rule.
	SampleRate float64
	// ServiceName is the resource's service.name. OTEL_SERVICE_NAME, then a
	// service.name in OTEL_RESOURCE_ATTRIBUTES, win over it. "" means
	// "queue".
	ServiceName string
	// ResourceAttributes are added to the resource that describes this
	// process in every export, e.g. k8s.pod.name. OTEL_RESOURCE_ATTRIBUTES
	// wins per key. nil means none.
	ResourceAttributes map[string]string
	// Logger receives one line at startup and the exporter's changes of
	// state (failing, recovered). nil discards.
	Logger *slog.Logger
	// Stdout is where the console exporter writes (OTEL_TRACES_EXPORTER=
	// console). nil means os.Stdout, as OpenTelemetry's stdout exporter.
	Stdout io.Writer
}

// Span names of the request path, Knative's queue-proxy's: the span of a
// proxied request, inside the server span, and the span of its wait for
// a concurrency slot, inside that (pkg/queue/handler.go).
const (
	ProxySpanName = "kn.queueproxy.proxy"
	WaitSpanName  = "kn.queueproxy.wait"
)

// Tracer starts a server span per request and exports spans. Create it with
// New; it is safe for concurrent use. A nil *Tracer is tracing off: its
// Handler returns next unchanged and its Shutdown returns nil.
type Tracer struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
	prop     propagation.TextMapPropagator
	stale    []string
	fields   []string       // canonical names of the fields the propagators read
	otlp     *otlp.Exporter // nil: no OTLP exporter (console only)
}

// New reads cfg.Getenv and returns a Tracer that exports to the configured
// exporters: OTLP (http/protobuf or grpc, package otlp) and the console. It
// returns (nil, nil), tracing off, when no exporter is configured (see the
// package doc). It returns an error that names the variable when a value
// is malformed; nothing is started then. New does not connect: an
// unreachable collector shows as export failures in the log. ctx bounds
// resource detection only.
func New(ctx context.Context, cfg Config) (*Tracer, error) {
	getenv := cfg.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	want, err := exportersWanted(getenv)
	if err != nil || !want.any() {
		return nil, err
	}
	sampler, err := newSampler(getenv, cfg.SampleRate)
	if err != nil {
		return nil, err
	}
	props, err := newPropagators(getenv)
	if err != nil {
		return nil, err
	}
	var expCfg otlp.Config
	var endpoints []string
	if want.otlp {
		var endpoint string
		expCfg, endpoint, err = otlp.FromEnv(getenv, otlp.Traces)
		if err != nil {
			return nil, err
		}
		endpoints = append(endpoints, string(expCfg.Protocol)+" "+endpoint)
	}
	if want.console {
		endpoints = append(endpoints, "stdout")
	}
	res, err := newResource(ctx, getenv, cfg)
	if err != nil {
		return nil, err
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithSampler(sampler), sdktrace.WithResource(res)}
	var exp *otlp.Exporter
	if want.otlp {
		expCfg.Logger = log
		if exp, err = otlp.New(expCfg); err != nil {
			return nil, fmt.Errorf("%s: %w", otlp.Traces.EnvName("ENDPOINT", false), err)
		}
		opts = append(opts, sdktrace.WithBatcher(spanExporter{exp}))
	}
	if want.console {
		w := cfg.Stdout
		if w == nil {
			w = os.Stdout
		}
		opts = append(opts, sdktrace.WithBatcher(newStdoutExporter(w)))
	}
	provider := sdktrace.NewTracerProvider(opts...)
	log.LogAttrs(ctx, slog.LevelInfo, "tracing on",
		slog.String("endpoint", strings.Join(endpoints, ", ")),
		slog.String("sampler", sampler.Description()),
		slog.String("propagators", props.names))
	return &Tracer{
		provider: provider,
		tracer:   provider.Tracer(instrumentationName),
		prop:     props.prop,
		stale:    props.stale,
		fields:   canonicalFields(props.prop.Fields()),
		otlp:     exp,
	}, nil
}

// Exporter returns the OTLP exporter, for its counters; nil when spans go
// only to the console, or for the nil Tracer.
func (t *Tracer) Exporter() *otlp.Exporter {
	if t == nil {
		return nil
	}
	return t.otlp
}

// newResource describes this process: the SDK, then the attributes of
// otlp.ResourceAttributes (cfg.ResourceAttributes, OTEL_RESOURCE_ATTRIBUTES
// and service.name), which request metrics share.
func newResource(ctx context.Context, getenv func(string) string, cfg Config) (*resource.Resource, error) {
	kv, err := otlp.ResourceAttributes(getenv, cfg.ResourceAttributes, cfg.ServiceName)
	if err != nil {
		return nil, err
	}
	attrs := make([]attribute.KeyValue, 0, len(kv))
	for k, v := range kv {
		attrs = append(attrs, attribute.String(k, v))
	}
	res, err := resource.New(ctx,
		resource.WithSchemaURL(semconv.SchemaURL),
		resource.WithTelemetrySDK(),
		resource.WithAttributes(attrs...),
	)
	if err != nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	return res, nil
}

// Shutdown ends the Tracer: it exports the spans not yet exported and
// closes the exporters, within ctx. It returns an error when the last
// export fails or ctx ends first. Call it once the servers that use
// Handler have stopped; later spans are dropped.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	if err := t.provider.Shutdown(ctx); err != nil {
		return fmt.Errorf("trace shutdown: %w", err)
	}
	return nil
}

// StatusReporter is implemented by a ResponseWriter that remembers the
// status code written through it; Status returns 0 before the header is
// written. Handler does not wrap the ResponseWriter (the request path
// keeps to one wrapper, docs/architecture.md); when the writer it receives, or one it reaches
// through Unwrap() http.ResponseWriter, is a StatusReporter, the span
// records http.response.status_code. Otherwise the span has no status code,
// since net/http offers no other way to read it.
type StatusReporter interface {
	Status() int
}

// Handler returns next wrapped in a server span (docs/contract.md section 3,
// "Trace context"). Per request it:
//
//   - extracts the incoming context from r.Header with the propagators of
//     OTEL_PROPAGATORS;
//   - starts a span of kind server named after the method, as its child,
//     and inside it ProxySpanName, the span Knative's queue-proxy makes
//     for the proxied request (kind internal, no attributes of its own);
//   - replaces the trace headers in r.Header (in place: the map is shared
//     with the caller's request) with the proxy span's context, so that
//     the upstream sees that span as its parent; tracestate carries over
//     and baggage is left as it came;
//   - calls next with the proxy span in the request's context;
//   - ends both spans when next returns, or panics (status error on the
//     server span).
//
// The span is a child of the incoming context whether that context is
// sampled or not, so an unsampled trace stays one trace downstream.
func (t *Tracer) Handler(next http.Handler) http.Handler {
	if t == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header == nil {
			r.Header = http.Header{}
		}
		carrier := propagation.HeaderCarrier(r.Header)
		// The request's strings may live only as long as the request (the
		// HTTP/1.1 engine's, package h1); what the propagators keep
		// (tracestate, baggage) outlives it in an exported span: copies.
		for _, f := range t.fields {
			if vv, ok := r.Header[f]; ok {
				for i, v := range vv {
					vv[i] = strings.Clone(v)
				}
			}
		}
		ctx := t.prop.Extract(r.Context(), carrier)
		name, method := methodName(r.Method)
		ctx, span := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer))
		recording := span.IsRecording()
		if recording {
			// Attributes only for spans that will be exported: an unsampled
			// request, the common case at a low sample rate, then costs no
			// attribute slice.
			span.SetAttributes(requestAttributes(r, method)...)
		}
		ctx, proxy := t.tracer.Start(ctx, ProxySpanName)
		for _, h := range t.stale {
			r.Header.Del(h)
		}
		t.prop.Inject(ctx, carrier)

		done := false
		defer func() {
			if !done { // next panicked, e.g. http.ErrAbortHandler mid-response
				proxy.End()
				span.SetStatus(codes.Error, "handler panicked")
				span.End()
			}
		}()
		next.ServeHTTP(w, r.WithContext(ctx))
		done = true
		proxy.End()
		if recording {
			if code := statusOf(w); code != 0 {
				span.SetAttributes(semconv.HTTPResponseStatusCode(code))
				if code >= 500 {
					// Server spans: 5xx is an error, 4xx is not
					// (semantic conventions, "Status" of HTTP spans).
					span.SetAttributes(semconv.ErrorTypeKey.String(strconv.Itoa(code)))
					span.SetStatus(codes.Error, "")
				}
			}
		}
		span.End()
	})
}

// StartWait starts WaitSpanName, the span of a request's wait for a
// concurrency slot, as a child of the span in ctx (Handler's proxy span),
// as Knative's queue-proxy does for every request under a
// containerConcurrency, whether or not it has to wait. The caller ends it
// with EndWait once it has a slot or has given up. The chain's limiter
// layer calls it only when tracing is on: with tracing off the wait costs
// nothing more.
func (t *Tracer) StartWait(ctx context.Context) trace.Span {
	_, s := t.tracer.Start(ctx, WaitSpanName)
	return s
}

// EndWait ends a span StartWait started. err is why no slot was taken
// (a full queue, a wait that timed out, a client that left), or nil; the
// span's status says it.
func EndWait(s trace.Span, err error) {
	if err != nil && s.IsRecording() {
		s.SetStatus(codes.Error, err.Error())
	}
	s.End()
}

// statusOf returns the status code that w, or a writer it unwraps to,
// reports; 0 if none does.
func statusOf(w http.ResponseWriter) int {
	for {
		if s, ok := w.(StatusReporter); ok {
			return s.Status()
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return 0
		}
		w = u.Unwrap()
	}
}

// methodName returns the span name and the http.request.method attribute:
// the method when it is a known one, else "HTTP" and "_OTHER", which keeps
// the name's cardinality low (semantic conventions, "HTTP server span").
func methodName(m string) (string, attribute.KeyValue) {
	switch m {
	case http.MethodGet:
		return m, semconv.HTTPRequestMethodGet
	case http.MethodHead:
		return m, semconv.HTTPRequestMethodHead
	case http.MethodPost:
		return m, semconv.HTTPRequestMethodPost
	case http.MethodPut:
		return m, semconv.HTTPRequestMethodPut
	case http.MethodPatch:
		return m, semconv.HTTPRequestMethodPatch
	case http.MethodDelete:
		return m, semconv.HTTPRequestMethodDelete
	case http.MethodOptions:
		return m, semconv.HTTPRequestMethodOptions
	case http.MethodConnect:
		return m, semconv.HTTPRequestMethodConnect
	case http.MethodTrace:
		return m, semconv.HTTPRequestMethodTrace
	case "QUERY":
		return m, semconv.HTTPRequestMethodQuery
	}
	return "HTTP", semconv.HTTPRequestMethodOther
}

// requestAttributes are the server span's request attributes (semantic
// conventions, "HTTP server span"). client.address is the peer: queue's
// caller, not a client named in X-Forwarded-For.
//
// Every string is copied: the span outlives the request, whose strings
// may point into a buffer that is reused (package h1).
func requestAttributes(r *http.Request, method attribute.KeyValue) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 9)
	attrs = append(attrs, method)
	if method == semconv.HTTPRequestMethodOther {
		attrs = append(attrs, semconv.HTTPRequestMethodOriginal(strings.Clone(r.Method)))
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	attrs = append(attrs, semconv.URLScheme(scheme), semconv.URLPath(strings.Clone(r.URL.Path)))
	if host, port := splitHostPort(r.Host); host != "" {
		attrs = append(attrs, semconv.ServerAddress(strings.Clone(host)))
		if port > 0 {
			attrs = append(attrs, semconv.ServerPort(port))
		}
	}
	switch {
	case r.ProtoMajor == 2:
		attrs = append(attrs, semconv.NetworkProtocolVersion("2"))
	case r.ProtoMajor == 1 && r.ProtoMinor == 1:
		attrs = append(attrs, semconv.NetworkProtocolVersion("1.1"))
	case r.ProtoMajor == 1 && r.ProtoMinor == 0:
		attrs = append(attrs, semconv.NetworkProtocolVersion("1.0"))
	}
	if host, port := splitHostPort(r.RemoteAddr); host != "" {
		attrs = append(attrs, semconv.ClientAddress(host))
		if port > 0 {
			attrs = append(attrs, semconv.ClientPort(port))
		}
	}
	if ua := r.UserAgent(); ua != "" {
		attrs = append(attrs, semconv.UserAgentOriginal(strings.Clone(ua)))
	}
	return attrs
}

// splitHostPort splits "host:port", "[v6]:port", "host" or "[v6]"; port is
// 0 when absent or malformed.
func splitHostPort(hostport string) (string, int) {
	host, p, err := net.SplitHostPort(hostport)
	if err != nil {
		return strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]"), 0
	}
	port, err := strconv.Atoi(p)
	if err != nil || port <= 0 || port > 65535 {
		port = 0
	}
	return host, port
}

func canonicalFields(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = http.CanonicalHeaderKey(n)
	}
	return out
}
